"""Frames that keep recompiling, over a run: the guard that keeps failing, how close each frame is to the limit,
and the fix (the run summary's ``recompiling_frames``; its lines of the text and of ``torch-otel diff``).

:class:`RecompilingFrames` adds each compile of a run (bounded: frames, guards, values); its ``to_dict`` is the
summary's part, with each frame's guards in words and its hints (torch_otel._analysis.recompile_hints).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.categories import REASON_CHARS, recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.paths import call_site_text
from .._core.text import cut, cut_where, shorten_reason, wrap
from .._model.record import CompileRecord
from .recompile_guards import (
    EXPECTED_ONLY,
    MAX_VALUES,
    NEAR,
    GuardValues,
    automatic_dynamic_of,
    guard_line,
    limit_label,
    parse_guard,
    sort_values,
)
from .recompile_hints import FrameContext, advise

__all__ = ["FrameRecompiles", "RecompilingFrames", "frame_lines", "hint_lines", "keeps_recompiling",
           "limit_words"]  # fmt: skip
MAX_FRAMES = 1000  # frames whose recompiles are followed
MAX_GUARDS = 16  # distinct guards per frame
MAX_CLASSES = 8  # classes named per shared frame (more are counted)


@dataclass(slots=True)
class FrameRecompiles:
    """One frame's recompiles: by category, the guards torch reported as failing and their values, its place against
    the limit, and what its compiles cost."""

    compiles: int = 0
    recompiles: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    reasons: dict[tuple[str, str], int] = field(default_factory=dict)  # (category, text) -> count, bounded
    guards: dict[tuple[str, str | None, int | None], GuardValues] = field(default_factory=dict)
    unparsed: int = 0  # reported reasons naming no guard torch-otel reads
    entries: int = 0  # the most compiles of this frame torch's cache held (its cache_size + 1)
    limit: int | None = None
    limit_hits: int = 0
    near: bool = False
    automatic_dynamic: bool | None = None
    ranks: set[int] = field(default_factory=set)
    cost_ns: int = 0  # the compile time of its compiles (their backwards' included) since it was followed
    call_site: str | None = None
    called_directly: bool = False
    limit_kind: str | None = None  # None: recompile_limit; else torch's other limit, the one hit or nearer
    classes: list[str] = field(default_factory=list)  # a frame of torch's shared by several classes: theirs, bounded
    more_classes: int = 0
    frame_class: str | None = None  # the class its first compile was named by (a row torch's shared frame may fold in)

    def folded(self, other: FrameRecompiles) -> FrameRecompiles:
        """This frame with ``other``'s recompiles in it: a row of the same frame of torch's, named by a class before
        the frame was known shared by several classes (its compiles are already counted here: torch's compile ids)."""
        out = copy.deepcopy(self)
        out.recompiles += other.recompiles
        for c, n in other.by_category.items():
            out.by_category[c] = out.by_category.get(c, 0) + n
        for r, n in other.reasons.items():
            if r in out.reasons or len(out.reasons) < 20:
                out.reasons[r] = out.reasons.get(r, 0) + n
        for gk, gv in other.guards.items():
            mine = out.guards.get(gk)
            if mine is None:
                if len(out.guards) < MAX_GUARDS:
                    out.guards[gk] = copy.deepcopy(gv)
                continue
            mine.failures += gv.failures
            mine.unnamed = max(mine.unnamed, gv.unnamed)
            mine.more += gv.more
            for v in gv.values:
                if v not in mine.values:
                    if len(mine.values) < MAX_VALUES:
                        mine.values.append(v)
                    else:
                        mine.more += 1
        out.unparsed += other.unparsed
        out.entries = max(out.entries, other.entries)
        out.limit = out.limit if out.limit is not None else other.limit
        out.limit_hits += other.limit_hits
        out.cost_ns += other.cost_ns
        out.ranks |= other.ranks
        out.called_directly = out.called_directly or other.called_directly
        if other.frame_class and other.frame_class not in out.classes:
            if len(out.classes) < MAX_CLASSES:
                out.classes.insert(0, other.frame_class)  # it compiled first
            else:
                out.more_classes += 1
        return out


def call_site_of(rec: CompileRecord) -> str | None:
    return call_site_text(rec.call_site)


class RecompilingFrames:
    """Per frame: its recompiles and what they say. Bounded (frames, guards, values).

    A frame is keyed as the run summary keys it (function, file, line, and for a library's frame the user's call site:
    two models compiled through one library wrapper are two frames). Only the reason torch reported for each
    recompile (``CompilationMetrics.recompile_reason``: the newest cache entry's failed guard) is read for guards and
    hints; the other entries' failures (``recompile_reasons``) say nothing about what changed this time.
    """

    def __init__(self, capture_payloads: bool = False, max_frames: int = MAX_FRAMES) -> None:
        self.capture_payloads = capture_payloads
        self.max_frames = max_frames
        self.frames: dict[tuple[Any, ...], FrameRecompiles] = {}
        # torch's frame (compiled autograd id, frame id) -> the summary's frames it compiled for, and how many times each:
        # two models of one class through one code object are one frame to torch and two here (bounded)
        self._torch_frames: dict[tuple[int | None, int | None], dict[tuple[Any, ...], int]] = {}
        # torch's frames known shared by several classes -> the summary's frame of it (torch's code): the rows named by
        # a class before that was known are folded into it (``to_dict``)
        self._shared: dict[tuple[int | None, int | None], tuple[Any, ...]] = {}

    def _before(self, rec: CompileRecord, key: tuple[Any, ...]) -> int:
        """This frame's compiles before ``rec``, counted from torch's frame compile id: less those of the summary's other
        frames in the same torch frame (all of them are this one's where several classes share it)."""
        cid = rec.compile_id
        if cid is None or not cid.frame_compile_id:
            return 0
        if rec.shared_frame:
            return cid.frame_compile_id
        others = sum(n for k, n in self._torch_frames.get((cid.compiled_autograd_id, cid.frame_id), {}).items() if k != key)
        return max(0, cid.frame_compile_id - others)

    def _count(self, rec: CompileRecord, key: tuple[Any, ...]) -> None:
        cid = rec.compile_id
        if cid is None:
            return
        tf = (cid.compiled_autograd_id, cid.frame_id)
        seen = self._torch_frames.get(tf)
        if seen is None:
            if len(self._torch_frames) >= self.max_frames:
                return
            seen = self._torch_frames[tf] = {}
        if key in seen or len(seen) < 64:
            seen[key] = seen.get(key, 0) + 1

    def add(self, rec: CompileRecord, key: tuple[Any, ...]) -> None:
        if rec.kind == "backward":  # what the frame's recompiles cost includes their backwards
            f = self.frames.get(key)
            if f is not None:
                f.cost_ns += rec.duration_ns
            return
        if rec.kind != "frame":
            return
        reason = rec.recompile_reason or (rec.recompile_reasons[0] if rec.recompile_reasons else None)
        limit_hit = rec.recompile_limit_hit
        f = self.frames.get(key)
        if f is None:
            if not (reason or limit_hit) or len(self.frames) >= self.max_frames:
                self._count(rec, key)
                return  # a frame is followed from its first recompile
            f = self.frames[key] = FrameRecompiles(frame_class=rec.frame_class)
            f.compiles = self._before(rec, key)  # the ones before
        self._count(rec, key)
        cid = rec.compile_id
        if rec.shared_frame and cid is not None and len(self._shared) < self.max_frames:
            self._shared.setdefault((cid.compiled_autograd_id, cid.frame_id), key)
        f.compiles += 1
        f.cost_ns += rec.duration_ns
        if f.call_site is None:
            f.call_site = call_site_of(rec)
        f.called_directly = f.called_directly or rec.called_directly
        if rec.rank is not None and len(f.ranks) < 64:
            f.ranks.add(rec.rank)
        if rec.recompile_limit is not None:
            f.limit = rec.recompile_limit
            f.limit_kind = rec.recompile_limit_kind
        if rec.shared_frame and rec.frame_class and rec.frame_class not in f.classes:
            if len(f.classes) < MAX_CLASSES:
                f.classes.append(rec.frame_class)
            else:
                f.more_classes += 1
        if rec.frame_recompiles is not None and not limit_hit:
            f.entries = max(f.entries, rec.frame_recompiles + 1)
        auto = automatic_dynamic_of(rec.metrics)
        if auto is not None:
            f.automatic_dynamic = auto if f.automatic_dynamic is None else (f.automatic_dynamic and auto)
        f.near = f.near or rec.recompile_limit_near
        if limit_hit:
            f.limit_hits += 1
            if rec.recompile_limit is not None:
                f.entries = max(f.entries, rec.recompile_limit)
        if not reason:
            return
        f.recompiles += 1
        category = recompile_category(reason)
        f.by_category[category] = f.by_category.get(category, 0) + 1
        text = strip_recompile_prefix(reason)
        text = (text if self.capture_payloads else scrub_guard_text(text))[:REASON_CHARS]  # whole in the JSON
        if (category, text) in f.reasons or len(f.reasons) < 20:
            f.reasons[(category, text)] = f.reasons.get((category, text), 0) + 1
        g = parse_guard(reason)
        if g is None:
            f.unparsed += 1
            return
        gk = (g.check, g.name, g.dim)
        gv = f.guards.get(gk)
        if gv is None:
            if len(f.guards) >= MAX_GUARDS:
                return
            gv = f.guards[gk] = GuardValues(g.check, g.name, g.dim)
        gv.failures += 1
        if g.check in EXPECTED_ONLY:
            gv.unnamed = 1  # until a later failure names it, the value this recompile compiled for is unnamed
        for v in g.values:
            if v in gv.values:
                continue
            if len(gv.values) < MAX_VALUES:
                gv.values.append(v)
            else:
                gv.more += 1

    def _rows(self) -> dict[tuple[Any, ...], FrameRecompiles]:
        """The frames, each frame of torch's that several classes share as one: its rows named by a class before that
        was known (a class that recompiled before another reached the frame) folded into it. One cache, one limit: the
        class's row would say "near" after another class hit the limit of the frame they share."""
        rows = dict(self.frames)
        for tf, shared in self._shared.items():
            if shared not in rows:
                continue
            for key in self._torch_frames.get(tf, {}):
                if key != shared and key in rows:
                    rows[shared] = rows[shared].folded(rows.pop(key))
        return rows

    def to_dict(self) -> list[dict[str, Any]]:
        """The frames that recompiled, the costliest first: the facts, the guards' lines and the hints."""
        out = []
        for key, f in sorted(self._rows().items(), key=lambda kv: (-kv[1].cost_ns, -kv[1].recompiles, str(kv[0][0]))):
            fn, path, line = key[0], key[1], key[2]
            guards = []
            for g in sorted(f.guards.values(), key=lambda g: -g.failures):
                shown = self.capture_payloads or g.check != "int"  # an int's values may be data: counted, not shown
                d: dict[str, Any] = {
                    "kind": g.check,
                    "input": g.name,
                    "dim": g.dim,
                    "values": sort_values(list(g.values)) if shown else [],
                    "more_values": g.more + (0 if shown else len(g.values)),
                    "unnamed_values": g.unnamed,
                    "failures": g.failures,
                }
                d["line"] = guard_line(d, shown)
                guards.append(d)
            left = None if f.limit is None else max(0, f.limit - f.entries)
            status = (
                "hit" if f.limit_hits else "unknown" if f.limit is None else "near" if left is not None and left <= NEAR else "ok"
            )
            pressed = bool(f.limit_hits) or status == "near"
            keeps = pressed or any(g["failures"] >= 2 for g in guards) or f.unparsed >= 2
            ctx = FrameContext(fn, path, f.call_site, f.called_directly, f.automatic_dynamic)
            reasons = sorted(f.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            hints = advise(guards, ctx, pressed, [f"{c}: {t}" for (c, t), _ in reasons[:1]])
            fixes = [h.to_dict() for h in hints if h.fix]
            unclear = next((h.why for h in hints if not h.fix), None)
            stopped = None
            if not keeps and f.recompiles:
                stopped = (
                    "automatic dynamic shapes: each changed dimension became dynamic after one recompile"
                    if guards and all(g["kind"] in ("size", "int") for g in guards) and f.automatic_dynamic is not False
                    else "each recompile was for another guard, and none came back"
                )
            out.append(
                {
                    "function": fn,
                    "file": path,
                    "line": line,
                    "call_site": f.call_site,
                    "compiles": f.compiles,
                    "recompiles": f.recompiles,
                    "cost_s": round(f.cost_ns / 1e9, 6),
                    "by_category": dict(sorted(f.by_category.items(), key=lambda kv: -kv[1])),
                    "top_reasons": [{"category": c, "reason": t, "count": n} for (c, t), n in reasons[:3]],
                    "cache_entries": f.entries or None,
                    "limit": f.limit,
                    "limit_name": f.limit_kind or "recompile_limit",
                    "classes": [c.rsplit(".", 1)[-1] for c in f.classes],
                    "more_classes": f.more_classes,
                    "left_before_limit": left,
                    "limit_hits": f.limit_hits,
                    "limit_status": status,
                    "automatic_dynamic": f.automatic_dynamic,
                    "keeps_recompiling": keeps,
                    "stopped_by": stopped,
                    "guards": guards,
                    "hints": [h.to_dict() for h in hints],
                    "fixes": fixes,
                    "unclear": unclear,
                    "ranks": sorted(f.ranks),
                }
            )
        return out


def keeps_recompiling(f: Mapping[str, Any]) -> bool:
    """Whether a frame (a row of :meth:`RecompilingFrames.to_dict`) keeps recompiling: a guard torch reported failed
    more than once, or the frame is near or at its recompile limit. A summary without the key (an older torch-otel's)
    says by its counts."""
    k = f.get("keeps_recompiling")
    if isinstance(k, bool):
        return k
    return (f.get("recompiles") or 0) >= 2 or bool(f.get("limit_hits")) or f.get("limit_status") == "near"


def limit_words(f: Mapping[str, Any], short: bool = False) -> str:
    """How close a frame is to the recompile limit, in words (its compiles: frame compiles, the entries the limit
    counts; their backwards are not among them)."""
    limit, entries, hits = f.get("limit"), f.get("cache_entries"), f.get("limit_hits") or 0
    which = limit_label(f.get("limit_name"))
    if limit is None:
        return f"hit the {which} (runs in eager)" if hits else "limit unknown (the log does not say)"
    if hits:
        return f"hit the {which} ({limit}): runs in eager"
    left = f.get("left_before_limit")
    if short:
        return f"{left} more before eager" + (" (near)" if left is not None and left <= NEAR else "")
    return f"{entries or '?'} of {limit} frame compiles, {left} more before eager" + (
        " (near)" if left is not None and left <= NEAR else ""
    )


def hint_lines(f: Mapping[str, Any], width: int, indent: str = "    ") -> list[str]:
    """A frame's guard and its first hint: the fix and torch's page, or why no hint is given (a summary without
    ``hints``, an older torch-otel's, by its ``fixes`` and ``unclear``)."""
    out: list[str] = []
    guards = f.get("guards") or []
    hints = [h for h in f.get("hints") or [] if isinstance(h, Mapping)]
    if not hints:
        hints = [{**x, "where": x.get("where") or "call_site"} for x in f.get("fixes") or []]
        if not hints and f.get("unclear"):
            hints = [{"fix": None, "why": f["unclear"], "guard": guards[0]["line"] if guards else None}]
    first = hints[0] if hints else None
    line = (first or {}).get("guard") or (guards[0]["line"] if guards else None)
    if line:
        lead = f"{indent}torch's reason: "
        out.append(lead + shorten_reason(line, max(20, width - len(lead))))
    if first is None:
        return out
    if first.get("fix"):
        site = f.get("call_site")
        at = f" (before the call at {site})" if first.get("where") == "call_site" and site else ""
        out.append(cut(f"{indent}fix{at}: {first['fix']}", width))
        if first.get("link"):
            out.append(cut(f"{indent}  {first['link']}", width))
    else:
        out.extend(wrap(f"{indent}no hint: {first.get('why')}", width, 3, indent + "  "))
    return out


def frame_lines(frames: list[Mapping[str, Any]], width: int, room: int, where: Any, most: int | None = None) -> list[str]:
    """The frames that keep recompiling, the costliest first, in at most ``room`` lines (``most`` frames at most): each
    frame, the guard torch reported, and its fix and torch's page, or why no hint is given. ``where(row)`` names a
    frame. Frames left out are counted on a line of their own ("(2 more: ...)"), and the costliest frame is never
    left out: past ``room`` if it must."""
    shown = [f for f in frames if keeps_recompiling(f)]
    if not shown:
        return []
    out = [f"frames that keep recompiling: {len(shown)} (the costliest first)"]
    for i, f in enumerate(shown):
        cost = f" ({f['cost_s']:.2f} s)" if isinstance(f.get("cost_s"), (int, float)) else ""
        head = f": {f['recompiles']} recompiles{cost}, {limit_words(f, short=True)}"
        block = [f"  {cut_where(where(f), max(20, width - 2 - len(head)))}{head}"]
        if f.get("classes"):  # one frame of torch's for several classes: they share its cache and its limit
            more = f" and {f['more_classes']} more" if f.get("more_classes") else ""
            block.append(f"    one frame of torch's, its limit shared by: {', '.join(f['classes'])}{more}")
        block += hint_lines(f, width)
        block = [cut(b, width) for b in block]
        if f.get("evidence"):  # whole: its last words are the fix it names
            block.extend(wrap(f"    evidence: {f['evidence']['line']}", width, 3, "      "))
        pointer = 0 if i == len(shown) - 1 else 1  # room for the line that counts the frames after it
        if i and ((most is not None and i >= most) or len(out) + len(block) + pointer > room):
            out.append(f"  ({len(shown) - i} more: --json or the HTML page lists them)")
            break
        out.extend(block)
    return out
