"""The run summary's one screen of text: its facts (:meth:`torch_otel._sinks.summary.RunSummary.to_dict`) in at most
45 lines of 100 columns, each feature's lines with them; ``--json`` and the HTML page hold everything."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._analysis.eager import eager_lines
from .._analysis.recompiling_frames import frame_lines
from .._core.paths import in_installed_package
from .._core.text import cut_middle, cut_where, shorten_reason
from .._features.feature import Feature
from .._features.registry import features_or_default

__all__ = ["MAX_LINES", "format_text", "row_where", "where"]
MAX_LINES = 45  # the text summary's lines: one terminal screen


def where(fn: str, path: str | None, line: int | None, call_site: str | None = None) -> str:
    """``forward (model.py:32)``; a library's frame with the user's line that called it: ``wrapper (generic.py:1030)
    from train.py:42``."""
    if path is None:
        return fn
    site = f" from {call_site}" if call_site and in_installed_package(path) else ""  # a library's frame only
    return f"{fn} ({os.path.basename(path)}:{line if line is not None else '?'}){site}"


def row_where(r: Mapping[str, Any]) -> str:
    return where(str(r.get("function")), r.get("file"), r.get("line"), r.get("call_site"))


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_MORE = "--json or the HTML page lists them"


@dataclass(slots=True)
class _Block:
    """A block of the text summary, drawn for ``n`` of its rows (``render(n)``): its usual ``n``, the fewest it gives way
    to when the screen is full, and where it stands in the order blocks give way (lower first)."""

    render: Callable[[int], list[str]]  # n -> lines; a block cut below its usual rows says how many more, and where
    n: int
    least: int
    gives_way: int = 99  # never


def _rows_block(head: list[str], rows: list[str], n: int, usual: int, what: str) -> list[str]:
    """``head``, then ``n`` of ``rows``; cut below its usual ``usual``, it says how many more there are."""
    more = len(rows) - n
    tail = [f"  ({more} more {what}: {_MORE})"] if n < usual and more > 0 else []
    return [*head, *rows[:n], *tail]


def format_text(facts: dict[str, Any], width: int = 100, features: tuple[Feature, ...] | None = None) -> str:
    """The summary's facts (:meth:`RunSummary.to_dict`) as one screen of text, each feature's lines with them (its
    ``head`` leads the text, its ``text`` after the graph breaks).

    The frames torch left in eager come first: they are the costliest outcome, and the compile time alone reads
    like an improvement. A line cut to the width keeps its numbers: names are cut, never values. At most
    :data:`MAX_LINES` lines: where the blocks do not fit, the less useful ones give way first (the slowest compiles,
    the phases, the costliest frames, then the added features', the graph breaks' and the reasons' rows), each saying how
    many rows more the JSON and the page have, so that the frames that keep recompiling keep their place.
    """
    # each feature's lines; an optional part that had nothing to say (no key) has none
    views = [v for f in features_or_default(features) if (v := f.summary) is not None and (v.key in facts or not v.optional)]
    w = max(60, width)
    lead = [line for v in views if v.head is not None for line in v.head(facts, w)]  # each feature's head, first
    name_w = w - 42
    by_kind = ", ".join(f"{n} {k}" for k, n in facts["by_kind"].items())
    wall = facts["wall_s"]
    cpu = f", {facts['cpu_s']:.2f} s CPU" if facts.get("cpu_s") is not None else ""
    head = (
        f"torch.compile run summary ({facts['source']}): {facts['compiles']} compile{'' if facts['compiles'] == 1 else 's'}"
        + (f" ({by_kind})" if by_kind else "")
        + f", {wall:.2f} s compiling{cpu}"
    )
    if not facts["compiles"]:
        return "\n".join([*lead, head, "no compiles"]) + "\n"

    def fixed(lines: list[str]) -> _Block:  # a block that never gives way
        return _Block(lambda n: lines, 0, 0)

    blocks: list[_Block] = [fixed([*lead, head, *eager_lines(facts.get("eager_frames") or [], w, row_where)])]

    phases = facts["phases"]

    def phase_lines(n: int) -> list[str]:
        out = [
            "",
            f"{'time by phase (self time: not in a sub-phase)':<{name_w}} {'count':>7} {'total s':>10} {'self s':>10} {'self %':>7}",
        ]
        for p in phases[:n]:
            pct = 100 * p["self_s"] / wall if wall else 0.0
            # more than the compile time: the phase ran on several threads at once (inductor's parallel kernel builds)
            tag = " (ran in parallel)" if pct > 100 else ""
            label = _cut(p["name"], name_w - 2 - len(tag)) + tag
            out.append(f"  {label:<{name_w - 2}} {p['count']:>7} {p['total_s']:>10.3f} {p['self_s']:>10.3f} {pct:>6.1f}%")
        if len(phases) > n:
            rest = phases[n:]
            self_rest = sum(p["self_s"] for p in rest)
            pct = 100 * self_rest / wall if wall else 0.0
            label = f"({len(rest)} more phases" + (f": {_MORE})" if n < 10 else ")")
            out.append(f"  {_cut(label, name_w - 2):<{name_w - 2}} {'':>7} {'':>10} {self_rest:>10.3f} {pct:>6.1f}%")
        self_sum = sum(p["self_s"] for p in phases)
        if wall and self_sum > wall * 1.005:  # parallel builds each count their own time: say so where the % stand
            out.append(f"  (self % adds up to {100 * self_sum / wall:.0f}%: builds that ran in parallel each count their time)")
        return out

    blocks.append(_Block(phase_lines, 10, 3, 2))
    frame_w = w - 22  # two columns beside it: a frame's name, file:line and call site get the rest of the width
    frame_rows = [
        f"  {cut_where(row_where(f), frame_w - 2):<{frame_w - 2}} {f['compiles']:>8} {f['total_s']:>10.3f}"
        for f in facts["frames"]
    ]
    frames_head = ["", f"{'frames that cost most (compiles: with their backwards)':<{frame_w}} {'compiles':>8} {'total s':>10}"]
    blocks.append(_Block(lambda n: _rows_block(frames_head, frame_rows, n, 5, "frames"), 5, 2, 3))
    slow_rows = []
    for c in facts["slowest"]:
        mark = "  FAILED" if c["status"] == "error" else ""
        rank = f" rank {c['rank']}" if "rank" in c else ""
        slow_rows.append(
            f"  {c['duration_s']:>8.3f} s  {c['id']:<8} {c['kind']:<9} {cut_where(row_where(c), w - 34 - len(rank) - len(mark))}{rank}{mark}"
        )
    blocks.append(_Block(lambda n: _rows_block(["", "slowest compiles"], slow_rows, n, 5, "compiles"), 5, 1, 1))
    rc = facts["recompiles"]
    cats = ", ".join(f"{k} {v}" for k, v in rc["by_category"].items())

    def reason_lines(n: int) -> list[str]:
        out = ["", f"recompiles: {rc['total']}" + (f" ({cats})" if cats else "")]
        for r in rc["top_reasons"][:n]:
            out.append(f"  {r['count']:>5}  {shorten_reason(r['category'] + ': ' + r['reason'], w - 9)}")
        rest = rc["top_reasons"][n:]
        if rest:  # the reasons past those shown: how many, and how many recompiles they account for
            more = rc["total"] - sum(r["count"] for r in rc["top_reasons"][:n])
            out.append(f"  {more:>5}  ({len(rest)} more reason{'s' if len(rest) > 1 else ''}: {_MORE})")
        said = rc.get("user_contexts") or []
        if said:  # the user's own hooks (torch's recompile_user_contexts): when in their run the recompiles came
            listed = ", ".join(f"{c['context']} ({c['count']})" for c in said[:5])
            out.append(cut_middle(f"  your recompile hooks said: {listed}" + (" ..." if len(said) > 5 else ""), w))
        return out

    blocks.append(_Block(reason_lines, 3, 1, 8))
    gb = facts["graph_breaks"]
    codes = ", ".join(f"{g['code']} {g['count']}" for g in gb["by_code"][:6])
    unhandled = gb.get("unhandled") or 0  # each is its compile's failure, counted there (docs/metrics.md)
    ending = gb.get("ends_frame") or 0
    gb_line = (
        f"graph breaks: {gb['total']}"
        + (f" ({codes})" if codes else "")
        + (f"; {ending} more ended their frame (the rest of the function ran in eager)" if ending else "")
        + (f"; {unhandled} not handled (their frames run in eager)" if unhandled else "")
    )

    def code_lines(n: int) -> list[str]:
        out = [gb_line]
        for g in gb["by_code"][:n]:
            out.append(f"  {g['count']:>5}  {_cut(g['code'] + ' ' + g['type'], w - 9)}")
        if len(gb["by_code"]) > n:
            more = gb["total"] - sum(g["count"] for g in gb["by_code"][:n])
            k = len(gb["by_code"]) - n
            out.append(f"  {more:>5}  ({k} more graph-break code{'s' if k > 1 else ''}: {_MORE})")
        return out

    blocks.append(_Block(code_lines, 3, 1, 6))
    ends = []
    for g in gb.get("ends_frame_by_location") or []:
        at = f" at {os.path.basename(str(g['file']))}:{g.get('line')}" if g.get("file") else ""
        ends.append(_cut(f"  {g['count']:>5}  {g['code']}{at} ended {g.get('frame')}: the rest of it ran in eager", w))
    blocks.append(
        _Block(lambda n: _rows_block([], ends, n, 2, "places a break ended its frame"), min(2, len(ends)), min(1, len(ends)), 7)
    )
    for view in views:
        lines = view.text(facts, w)

        def feature_lines(n: int, lines: list[str] = lines) -> list[str]:
            return lines if n >= len(lines) else [*lines[: n - 1], f"  ({len(lines) - n + 1} more lines: {_MORE})"]

        blocks.append(_Block(feature_lines, len(lines), min(2, len(lines)), view.gives_way))
    fl = facts["failures"]
    types = ", ".join(f"{k} {v}" for k, v in fl["by_type"].items())
    # frames, where the summary lists them (an older summary has the compiles that left their frame in eager only)
    eager_frames = facts.get("eager_frames")
    n_eager = facts["eager_fallbacks"]
    in_eager = (
        f"frames left in eager: {len(eager_frames)}" + (f" ({n_eager} compiles)" if n_eager != len(eager_frames) else "")
        if isinstance(eager_frames, list)
        else f"compiles that left a frame in eager: {n_eager}"
    )
    tail = [
        f"failures: {fl['total']}"
        + (f" ({types})" if types else "")
        + f"; recompile-limit hits: {facts['recompile_limit_hits']}; {in_eager}"
    ]
    rt = facts.get("runtime") or {}
    if rt.get("records"):
        tail.append(f"after their compiles (autotuning, cudagraph set-up): {rt['records']} records, {rt['total_s']:.3f} s")
    blocks.append(fixed(tail))
    recompiling = facts.get("recompiling_frames") or []
    # the most useful block: the frames that keep recompiling, and their fix. The others give way to its first three
    # frames (at least its costliest); it then takes whatever room is left
    want = len(frame_lines(recompiling, w, 10**6, row_where, most=3))
    least = len(frame_lines(recompiling, w, 0, row_where))
    blocks.append(_Block(lambda n: frame_lines(recompiling, w, n, row_where), want, least, 98))
    return "\n".join(_fit(blocks, MAX_LINES)) + "\n"


def _fit(blocks: list[_Block], max_lines: int) -> list[str]:
    """The blocks in at most ``max_lines`` lines: the block that gives way first loses a row at a time, down to its
    fewest, then the next (the last block last); the last block then takes whatever room is left. Where even the
    fewest do not fit, the screen runs longer: no block vanishes."""

    def total() -> int:
        return sum(len(b.render(b.n)) for b in blocks)

    for b in sorted((b for b in blocks if b.gives_way < 99), key=lambda b: b.gives_way):
        while b.n > b.least and total() > max_lines:
            b.n -= 1
    last = blocks[-1]
    last.n = max(last.n, max_lines - sum(len(b.render(b.n)) for b in blocks[:-1]))
    return [ln for b in blocks for ln in b.render(b.n)]
