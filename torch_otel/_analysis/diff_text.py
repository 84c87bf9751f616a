"""``torch-otel diff``'s one screen: the diff's facts (torch_otel._analysis.diff_compare.compare) in at most
45 lines of 100 columns; ``--json`` and ``--html`` hold everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.frame_names import row_where
from .._core.merge import basename as _base
from .._core.text import cut_middle, cut_where, shorten_reason, wrap
from .._features.feature import Feature
from .._features.registry import features_or_default
from .diff_compare import ranks_text as _ranks
from .diff_gate import pct_text as _pct_text
from .diff_gate import secs_text as _secs
from .recompiling_frames import hint_lines, keeps_recompiling, limit_words

__all__ = ["format_text"]
MAX_LINES, WIDTH = 45, 100


# -- one screen of text ------------------------------------------------------------------------------------------


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _sec(title: str, lines: list[str], keep: int = 1) -> tuple[str, list[str], int]:
    return (title, lines, keep)


def format_text(
    d: Mapping[str, Any], width: int = WIDTH, max_lines: int = MAX_LINES, features: tuple[Feature, ...] | None = None
) -> str:
    """The diff on one screen: at most ``max_lines`` lines of ``width`` columns; --json and --html hold everything.
    Each feature's lines come after the record's own, or before the section it names."""
    w = max(72, width)
    secs: list[tuple[str, list[str], int]] = []
    head = [
        _cut(f"torch-otel diff   base: {d['base']['path']}", w),
        _cut(f"                  ({d['base']['describe']})", w),
        _cut(f"                  new:  {d['new']['path']}", w),
        _cut(f"                  ({d['new']['describe']})", w),
    ]
    head += [_cut(f"  note: {c}", w) for c in d["compared"]]
    secs.append(_sec("head", head, len(head)))
    eager = (d.get("eager_frames") or {}).get("new_frames") or []
    if eager:  # the costliest news first: the compile time below fell because these frames are no longer compiled
        lines = [f"FRAMES NOW LEFT IN EAGER: {len(eager)}: torch runs their whole work uncompiled"]
        for e in eager[:3]:
            lines.extend(wrap(f"  {row_where(e)}: {e.get('text') or e.get('why')}", w, 2, "      "))
            if e.get("code"):
                gb = f"{e['code']} {e.get('type') or ''}".strip()
                lines.append(_cut(f"    the break: {gb}" + (f": {e['explanation']}" if e.get("explanation") else ""), w))
        if len(eager) > 3:
            lines.append(f"  ({len(eager) - 3} more: --json or --html lists them)")
        secs.append(_sec("eager", lines, len(lines)))
    t = d["total"]
    secs.append(
        _sec(
            "total",
            [
                f"compile time {t['base_s']:.3f} s -> {t['new_s']:.3f} s, {_secs(t['change_s'])} ({_pct_text(t['change_pct'])});"
                f" compiles {t['base_compiles']} -> {t['new_compiles']}",
                # the time that fell is the work now done uncompiled, on every step: said on its own line, whole
                *(
                    [f"  not faster: {len(eager)} frame{'s' if len(eager) > 1 else ''} no longer compiled (in eager, above)"]
                    if eager
                    else []
                ),
            ],
            2 if eager else 1,
        )
    )
    name_w = w - 46
    fr = [f for f in d["frames"] if f["change_s"] or f["status"] != "both"]
    lines = [f"{'frames (compiles: with their backwards)':<{name_w}} {'compiles':>11} {'base s':>9} {'new s':>9} {'change':>13}"]
    for f in fr:
        tag = " (new)" if f["status"] == "new" else " (gone)" if f["status"] == "gone" else ""
        ch = f"{f['change_s']:+.3f} {_pct_text(f['change_pct']) if f['status'] == 'both' else '':>6}"
        nums = f"{f['base_compiles']:>4} -> {f['new_compiles']:<3} {f['base_s']:>9.3f} {f['new_s']:>9.3f} {ch:>13}"
        room = w - 3 - len(nums)  # the numbers are whole: the name takes what is left
        label = cut_where(row_where(f), room - len(tag)) + tag  # the file:line (and call site) kept
        lines.append(f"  {label:<{room}} {nums}")
    if len(lines) == 1:
        lines.append("  no frame changed")
    secs.append(_sec("frames", lines, 2))
    ph = [p for p in d["phases"] if p["change_s"]]
    lines = [f"{'phases, self time':<{name_w}} {'':>11} {'base s':>9} {'new s':>9} {'change':>13}"]
    for p in ph:
        lines.append(
            f"  {_cut(p['name'], name_w - 2):<{name_w - 2}} {'':>11} {p['base_self_s']:>9.3f} {p['new_self_s']:>9.3f} {p['change_s']:>+13.3f}"
        )
    secs.append(_sec("phases", lines if len(lines) > 1 else [], 2))
    g = d["graph_breaks"]
    other = []
    for key, words in (("ends_frame", "ended their frame"), ("unhandled", "not handled, frame in eager")):
        k = g.get(key) or {}
        if k.get("base") or k.get("new"):
            other.append(f"{words} {k.get('base', 0)} -> {k.get('new', 0)}")
    lines = [
        f"graph breaks: {g['base_total']} -> {g['new_total']}"
        + (" (as torch counts them)" if other else "")
        + ("" if g["new"] or g["gone"] else ": none new, none gone")
        + (f"; {'; '.join(other)}" if other else "")
    ]
    for x in g.get("new_ends_frame") or []:
        at = f" at {_base(x.get('file'))}:{x.get('line')}" if x.get("file") else ""
        lines.append(
            _cut(f"  new   {x.get('code')}{at} ended {x.get('frame')}: the rest of it ran in eager ({x.get('count')})", w)
        )
    for x in g["new"]:
        lines.append(_cut(f"  new   {_gb(x)}", w))
    for x in g["gone"]:
        lines.append(_cut(f"  gone  {_gb(x)}", w))
    secs.append(_sec("graph_breaks", lines, 2))
    r = d["recompiles"]
    cats = ", ".join(f"{c} {v['base']}->{v['new']}" for c, v in r["by_category"].items() if v["base"] != v["new"])
    lines = [
        f"recompiles: {r['base_total']} -> {r['new_total']}"
        + (f" ({cats})" if cats else "")
        + ("" if r["new"] or r["gone"] else "; no category new or gone")
    ]
    for x in r["new"]:
        lead, count = f"  new   {x['category']}", f": {x['count']}"
        # the reason keeps torch's words (shortened, never cut through them); the frame's name gives way first
        room = w - len(lead) - len(count) - 2 - (16 if x.get("frame") else 0)  # " in " and 12 of the frame's name
        why = f"; {shorten_reason(str(x['reasons'][0]), room)}" if x.get("reasons") else ""
        room = w - len(lead) - len(count) - len(why) - 4
        on = f" in {cut_middle(str(x['frame']), max(12, room), 24)}" if x.get("frame") else ""
        lines.append(_cut(lead + on + count + why, w))
    for x in r["gone"]:
        on = f" in {x['frame']}" if x.get("frame") else ""
        lines.append(_cut(f"  gone  {x['category']}{on}: {x['count']}", w))
    secs.append(_sec("recompiles", lines, 2))
    f = d["failures"]
    lh = f["limit_hits"]
    lines = [f"failures: {f['base_total']} -> {f['new_total']}; recompile-limit hits: {lh['base']} -> {lh['new']}"]
    for x in f["new"]:
        on = f" in {row_where(x)}" if x.get("function") else ""
        lines.append(_cut(f"  new   {x.get('type')}{on}: {x.get('count')}", w))
    for x in lh["new_frames"]:
        lines.append(_cut(f"  new   recompile-limit hit{' in ' + x['frame'] if x.get('frame') else ''}: {x['count']}", w))
    secs.append(_sec("failures", lines, 2))
    lines = []
    for x in d["recompiling_frames"]:
        if not keeps_recompiling(x):
            continue
        cost = f" ({x['cost_s']:.2f} s)" if isinstance(x.get("cost_s"), (int, float)) else ""
        tail = f": {x['base_recompiles']} -> {x['recompiles']} recompiles{cost}, {limit_words(x, short=True)}"
        lines.append(f"  {cut_where(row_where(x), max(20, w - 2 - len(tail)))}{tail}")
        lines.extend(hint_lines(x, w))
    if lines:
        secs.append(_sec("recompiling_frames", ["frames that keep recompiling (new side, the costliest first):", *lines], 3))
    for feature in features_or_default(features):
        view = feature.diff
        lines = view.text(d[view.key], w) if view is not None and d.get(view.key) is not None else []
        if view is not None and lines:
            place = next((i for i, sec in enumerate(secs) if sec[0] == view.before), len(secs))
            secs.insert(place, _sec(view.key, lines, view.keep))
    rk = d.get("ranks") or {}
    if rk:
        changed = rk["changed"]
        lines = [f"ranks compared: {_ranks(rk['compared'])}; changed: {_ranks(changed) or 'none'}"]
        for row in rk["per_rank"]:
            if row["flags"]:
                lines.append(_cut(f"  rank {row['rank']}: " + "; ".join(fl["text"] for fl in row["flags"]), w))
        secs.append(_sec("ranks", lines, 2))
    gate = d.get("gate")
    if gate is not None:
        if gate["passed"]:
            lines = [_cut(f"gate: passed ({gate['conditions']})", w)]
        else:
            lines = [_cut(f"gate: FAILED, exit {gate['exit']} ({gate['conditions']})", w)]
            lines += [cut_middle(f"  {x['text']}", w, 50) for x in gate["failed"]]  # its numbers are at its end
        secs.append(_sec("gate", lines, min(len(lines), 4)))
    else:
        fl = d.get("flags") or []
        lines = [_cut("changes past the default thresholds: " + ("; ".join(x["text"] for x in fl) if fl else "none"), w)]
        secs.append(_sec("flags", lines, 1))
    return "\n".join(_cut(line, w) for line in _fit(secs, max_lines)) + "\n"


def _gb(x: Mapping[str, Any]) -> str:
    at = f" at {_base(x.get('file'))}:{x.get('line')}" if x.get("file") else ""
    fr = f" in {x['frame']}" if x.get("frame") else ""
    moved = " (more than before)" if x.get("more") else ""
    return f"{x.get('code')} {x.get('type') or ''}".rstrip() + at + fr + f": {x.get('count')}" + moved


def _fit(secs: list[tuple[str, list[str], int]], max_lines: int) -> list[str]:
    """The sections, each cut (to no fewer than its ``keep`` lines, and a line saying how many were left out) so that
    all fit in ``max_lines``, the longest cut first."""
    sizes = [len(lines) for _, lines, _ in secs]
    while sum(sizes) > max_lines:
        i = max(range(len(secs)), key=lambda k: sizes[k] - secs[k][2] if sizes[k] > secs[k][2] else -1)
        if sizes[i] <= secs[i][2]:
            break
        sizes[i] -= 1
    out: list[str] = []
    for (_name, lines, _keep), n in zip(secs, sizes, strict=True):
        if n >= len(lines):
            out.extend(lines)
        elif n > 0:
            out.extend(lines[: n - 1])
            out.append(f"  ({len(lines) - n + 1} more lines: --json or --html has them)")
    return out[:max_lines]
