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
from .._core.compile_id import CompileId
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
MAX_STREAMS = 4096  # processes (rank, process id) whose resets are followed
MAX_ROW_STREAMS = 64  # processes per frame whose generation it remembers

Stream = tuple[int | None, int | None]  # one process's compiles, numbered by its torch: (rank, process id)
# a frame of torch's in one generation of one process (between two torch._dynamo.reset()s): stream, generation,
# compiled autograd id, frame id
TorchFrame = tuple[Stream, int, int | None, int | None]


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
    # after torch._dynamo.reset() (torch logs none: ids start again at 0/0), torch's cache for the frame is empty: the
    # generation of each process its last compile was in; each process's generation of its last limit hits and their
    # count; the hits of a generation a reset ended in a process that hit the limit again since
    gens: dict[Stream, int] = field(default_factory=dict)
    hit_gens: dict[Stream, tuple[int, int]] = field(default_factory=dict)
    hits_past: int = 0

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
        for s, g in other.gens.items():
            if s in out.gens or len(out.gens) < MAX_ROW_STREAMS:
                out.gens[s] = max(g, out.gens.get(s, g))
        out.hits_past += other.hits_past
        for s, (g, n) in other.hit_gens.items():  # each process's hits of its latest generation, the others' past
            had = out.hit_gens.get(s)
            if had is None:
                if len(out.hit_gens) < MAX_ROW_STREAMS:  # else counted as hits of now, as in ``add``
                    out.hit_gens[s] = (g, n)
            elif had[0] == g:
                out.hit_gens[s] = (g, had[1] + n)
            elif had[0] < g:
                out.hits_past += had[1]
                out.hit_gens[s] = (g, n)
            else:
                out.hits_past += n
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

    ``torch._dynamo.reset()`` empties torch's caches and numbers compiles again from ``0/0``: frame id 0 may then be
    another function's. torch logs no reset, but a frame compile ``N/0`` of a frame of torch's already compiled in the
    process's current generation marks one. A frame's counts are kept per generation: its first compile after a reset is
    a fresh compile, not a recompile (its compiles and cost leave it out, and its backward's), and its cache entries,
    and the limit it hit, start again.
    """

    def __init__(self, capture_payloads: bool = False, max_frames: int = MAX_FRAMES) -> None:
        self.capture_payloads = capture_payloads
        self.max_frames = max_frames
        self.frames: dict[tuple[Any, ...], FrameRecompiles] = {}
        # torch's frame (compiled autograd id, frame id) -> the summary's frames it compiled for, and how many times each:
        # two models of one class through one code object are one frame to torch and two here (bounded)
        # (of each process's current generation, and of earlier ones a row of ``_shared`` needs)
        self._torch_frames: dict[TorchFrame, dict[tuple[Any, ...], int]] = {}
        self._first_class: dict[TorchFrame, str | None] = {}  # the class each torch frame's first compile was named by
        # torch's frames known shared by several classes -> the summary's frame of it (torch's code): the rows named by
        # a class before that was known are folded into it (``to_dict``)
        self._shared: dict[TorchFrame, tuple[Any, ...]] = {}
        # each process's generation (its resets so far), and torch's frames compiled in it (compiled autograd id, frame)
        self._gens: dict[Stream, int] = {}
        self._seen: dict[Stream, set[tuple[int | None, int | None]]] = {}
        # a followed frame's fresh compile after a reset (stream, frame -> generation, compile id): its backward is not
        # counted either
        self._fresh: dict[tuple[Stream, tuple[Any, ...]], tuple[int, CompileId]] = {}

    def _generation(self, rec: CompileRecord) -> tuple[Stream, int]:
        """The process ``rec`` came from and its generation: a new one where a frame compile ``N/0`` repeats a frame of
        torch's already compiled in this one (``torch._dynamo.reset()``), its older frames then forgotten unless a
        shared frame's row needs them."""
        stream = (rec.rank, rec.process_id)
        gen = self._gens.get(stream, 0)
        cid = rec.compile_id
        if rec.kind != "frame" or cid is None or cid.frame_id is None:
            return stream, gen
        seen = self._seen.get(stream)
        if seen is None:
            if len(self._seen) >= MAX_STREAMS:
                return stream, gen
            seen = self._seen[stream] = set()
        tf = (cid.compiled_autograd_id, cid.frame_id)
        if cid.frame_compile_id == 0 and tf in seen:
            gen = self._gens[stream] = gen + 1
            seen.clear()
            for old in [k for k in self._torch_frames if k[0] == stream and k[1] < gen and k not in self._shared]:
                del self._torch_frames[old]
                self._first_class.pop(old, None)
        if len(seen) < self.max_frames:
            seen.add(tf)
        return stream, gen

    def _before(self, rec: CompileRecord, key: tuple[Any, ...], tf: TorchFrame | None) -> int:
        """This frame's compiles before ``rec`` in its generation, counted from torch's frame compile id: less those of
        the summary's other frames in the same torch frame (all of them are this one's where several classes share it)."""
        cid = rec.compile_id
        if cid is None or tf is None or not cid.frame_compile_id:
            return 0
        if rec.shared_frame:
            return cid.frame_compile_id
        others = sum(n for k, n in self._torch_frames.get(tf, {}).items() if k != key)
        return max(0, cid.frame_compile_id - others)

    def _count(self, tf: TorchFrame | None, key: tuple[Any, ...], frame_class: str | None) -> None:
        if tf is None:
            return
        seen = self._torch_frames.get(tf)
        if seen is None:
            if len(self._torch_frames) >= self.max_frames:
                return
            seen = self._torch_frames[tf] = {}
            self._first_class[tf] = frame_class
        if key in seen or len(seen) < 64:
            seen[key] = seen.get(key, 0) + 1

    def add(self, rec: CompileRecord, key: tuple[Any, ...]) -> None:
        stream, gen = self._generation(rec)
        cid = rec.compile_id
        if rec.kind == "backward":  # what the frame's recompiles cost includes their backwards
            f = self.frames.get(key)
            if f is not None and (cid is None or self._fresh.get((stream, key)) != (gen, cid)):
                f.cost_ns += rec.duration_ns
            return
        if rec.kind != "frame":
            return
        reason = rec.recompile_reason or (rec.recompile_reasons[0] if rec.recompile_reasons else None)
        limit_hit = rec.recompile_limit_hit
        tf = None if cid is None else (stream, gen, cid.compiled_autograd_id, cid.frame_id)
        f = self.frames.get(key)
        if f is None:
            if not (reason or limit_hit) or len(self.frames) >= self.max_frames:
                self._count(tf, key, rec.frame_class)
                return  # a frame is followed from its first recompile
            f = self.frames[key] = FrameRecompiles(frame_class=rec.frame_class)
            f.compiles = self._before(rec, key, tf)  # the ones before
        self._count(tf, key, rec.frame_class)
        if rec.shared_frame and tf is not None and len(self._shared) < self.max_frames:
            self._shared.setdefault(tf, key)
        last = f.gens.get(stream)
        if last is not None and last != gen:  # a reset emptied torch's cache of it since its last compile
            f.entries, f.near = 0, False
        known = stream in f.gens or len(f.gens) < MAX_ROW_STREAMS
        if known:
            f.gens[stream] = gen
        if known and gen and last != gen and not (reason or limit_hit) and cid is not None:
            # its first compile since a reset: a fresh compile of an empty cache, not a recompile (nor its backward)
            if len(self._fresh) >= self.max_frames and (stream, key) not in self._fresh:
                del self._fresh[next(iter(self._fresh))]
            self._fresh[(stream, key)] = (gen, cid)
        else:
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
            first = self._first_class.get(tf) if tf is not None and not f.classes else None
            if first and first != rec.frame_class:  # the class torch compiled the frame for first, before it was shared
                f.classes.append(first)
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
            was = f.hit_gens.get(stream)
            if was is not None or len(f.hit_gens) < MAX_ROW_STREAMS:  # else counted as a hit of now, as before
                if was is not None and was[0] != gen:
                    f.hits_past += was[1]
                f.hit_gens[stream] = (gen, was[1] + 1 if was is not None and was[0] == gen else 1)
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

    def _now(self, f: FrameRecompiles) -> tuple[int, int]:
        """A frame's cache entries now (none where a reset in every process since its last compile emptied its cache),
        and its limit hits before a reset (it no longer runs in eager for them)."""
        past = f.hits_past + sum(n for s, (g, n) in f.hit_gens.items() if self._gens.get(s, 0) > g)
        gone = bool(f.gens) and all(self._gens.get(s, 0) > g for s, g in f.gens.items())
        return (0 if gone else f.entries), past

    def to_dict(self) -> list[dict[str, Any]]:
        """The frames that recompiled, the costliest first: the facts, the guards' lines and the hints."""
        out = []
        for key, f in sorted(self._rows().items(), key=lambda kv: (-kv[1].cost_ns, -kv[1].recompiles, str(kv[0][0]))):
            entries, past = self._now(f)
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
            left = None if f.limit is None else max(0, f.limit - entries)
            hit = f.limit_hits > past  # a hit since the last reset: it runs in eager
            status = "hit" if hit else "unknown" if f.limit is None else "near" if left is not None and left <= NEAR else "ok"
            pressed = bool(f.limit_hits) or status == "near"
            # near the limit is not by itself a frame that keeps recompiling: with a low limit, one recompile that
            # made a dimension dynamic is near it, and the frame compiles no more
            keeps = bool(f.limit_hits) or any(g["failures"] >= 2 for g in guards) or f.unparsed >= 2
            ctx = FrameContext(fn, path, f.call_site, f.called_directly, f.automatic_dynamic)
            reasons = sorted(f.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            hints = advise(guards, ctx, pressed, [f"{c}: {t}" for (c, t), _ in reasons[:1]])
            fixes = [h.to_dict() for h in hints if h.fix]
            unclear = next((h.why for h in hints if not h.fix), None)
            stopped = None
            if not keeps and f.recompiles:
                kinds = {g["kind"] for g in guards}
                auto = f.automatic_dynamic is not False
                stopped = (
                    "automatic dynamic shapes: each changed dimension became dynamic after one recompile"
                    if kinds and kinds <= {"size", "int"} and auto
                    else "automatic dynamic shapes made a dimension dynamic, then a size of 0 or 1 fell outside its range "
                    "(torch compiles those as constants); none came back"
                    if "size_range" in kinds and kinds <= {"size", "int", "size_range"} and auto
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
                    "cache_entries": entries or None,
                    "limit": f.limit,
                    "limit_name": f.limit_kind or "recompile_limit",
                    "classes": [c.rsplit(".", 1)[-1] for c in f.classes],
                    "more_classes": f.more_classes,
                    "left_before_limit": left,
                    "limit_hits": f.limit_hits,
                    "limit_hits_before_reset": past,
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
    # a hit before torch._dynamo.reset(): the reset emptied the frame's cache, it compiles again
    past = f.get("limit_hits_before_reset") or 0
    hit = hits > past
    before = "hit before a reset" if past and not hit else ""
    if limit is None:
        return f"hit the {which} (runs in eager)" if hit else "limit unknown (the log does not say)" + (before and f"; {before}")
    if hit:
        return f"hit the {which} ({limit}): runs in eager"
    left = f.get("left_before_limit")
    notes = "; ".join(n for n in ("near" if left is not None and left <= NEAR else "", before) if n)
    tail = f" ({notes})" if notes else ""
    if short:
        return f"{left} more before eager{tail}"
    return f"{entries or '?'} of {limit} frame compiles, {left} more before eager{tail}"


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
