"""The start-up's figures: from what the recorder saw to every second in one phase or the rest.

The recorder (torch_otel._features.startup.recorder) gives a :class:`Timeline`: the process's start as the kernel says,
the end and what fired it, the intervals its hooks timed (each a phase and a label: ``weights`` /
``from_pretrained``), and the compiles the bridge recorded (:class:`CompileSpan`). :func:`build` attributes it:

- **Nothing overlaps.** Each instant between the start and the end goes to one phase: the innermost interval that
  covers it (a phase's self time: an import inside a weight load is ``imports``; a compile inside the first forward is
  ``compile``), except that an :data:`OPAQUE` interval claims all of itself, the outermost of them: torch counts an
  import inside a compile as compile time; a barrier inside ``init_process_group`` is the rendezvous; what the bridge
  imports as it arms is the bridge's cost; a forward inside a CUDA graph capture is the capture.
- **The rest is named.** Time no interval covers is ``unattributed`` (plain user code: model construction, a sleep),
  never spread over the phases. The phases' nanoseconds and the rest add up to the whole exactly.

The result, :class:`Startup`, is the JSON contract's ``startup``, and is read back from it. All pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENDS",
    "OPAQUE",
    "PHASES",
    "CacheShare",
    "CompileSpan",
    "PhaseSpan",
    "Startup",
    "Timeline",
    "attribute",
    "build",
    "compile_span",
]

PHASES = (
    "interpreter",
    "bridge",
    "imports",
    "distributed_init",
    "weights",
    "data",
    "compile",
    "cuda_init",
    "cudagraph_capture",
    "waiting_for_ranks",
    "first_step",
)
OPAQUE = frozenset({"compile", "distributed_init", "bridge", "cudagraph_capture"})  # claim all of their interval
ENDS = ("step", "forward", "ready", "exit")  # what ended a start-up
MAX_SPANS = 256  # phase spans kept for the trace (the longest); the phases' sums hold every interval
MAX_PACKAGES = 12  # top packages named in imports; the rest is "other"
_NS = 1_000_000_000

# (start ns, end ns, phase, label): one timed interval on the recorder's clock
Interval = tuple[int, int, str, str]


@dataclass(frozen=True, slots=True)
class CompileSpan:
    """A compile the bridge recorded, as the start-up reads it: its times on the wall clock (torch's own record's
    ``start_time_us``/``end_time_us`` where it has them, else its root span's) and the cache's part of it."""

    start_unix_ns: int
    end_unix_ns: int
    compile_id: str = "-/-"
    kind: str = "frame"
    hits: int = 0
    misses: int = 0
    saved_ns: int = 0  # what torch says its FX graph cache hits saved (remote_cache_time_saved_s)
    mega_cache_hits: int = 0  # hits on entries a torch.compiler.load_cache_artifacts put there
    trace_id: int | None = None
    span_id: int | None = None


def compile_span(record: Any) -> CompileSpan | None:
    """The start-up's view of a compile record (torch_otel._model.record.CompileRecord); None: not a compile."""
    if record.kind == "runtime" or record.root.end_ns is None:
        return None
    m = record.metrics or {}
    s_us, e_us = m.get("start_time_us"), m.get("end_time_us")
    if isinstance(s_us, int) and isinstance(e_us, int) and e_us >= s_us > 0:
        start, end = s_us * 1000, e_us * 1000
    else:
        start, end = record.root.start_ns, record.root.end_ns
    counts = record.cache_counts()
    saved = m.get("remote_cache_time_saved_s")
    return CompileSpan(
        start,
        end,
        record.id_str,
        record.kind,
        sum(n for (_, _, result), n in counts.items() if result == "hit"),
        sum(n for (_, _, result), n in counts.items() if result == "miss"),
        int(saved * _NS) if isinstance(saved, (int, float)) and saved > 0 else 0,
        sum(record.mega_cache_hits.values()),
        record.trace_id,
        record.span_id,
    )


@dataclass(frozen=True)
class Timeline:
    """What the recorder saw, on its clock (``perf_counter`` nanoseconds): the input of :func:`build`.

    ``clock_pairs`` are (clock ns, unix ns) read together, at least one: compile spans are on the wall clock and are
    placed by them (two pairs far apart also correct the drift between the clocks over a long start-up)."""

    start_ns: int
    end_ns: int
    end: str
    started_unix_ns: int
    process_start: str  # where the start came from: proc, psutil, or bridge (none better known)
    intervals: Sequence[Interval] = ()
    compiles: Sequence[CompileSpan] = ()
    clock_pairs: Sequence[tuple[int, int]] = ()
    interpreter: str = "interpreter"  # what the interpreter phase covers
    second_step_ns: int | None = None
    rank: int | None = None
    host: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheShare:
    """The compile cache's part in the start-up's compiles."""

    compiles: int = 0
    hits: int = 0
    misses: int = 0
    saved_s: float = 0.0
    mega_cache_hits: int = 0


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """An interval of a phase for the start-up's trace: seconds from the process's start, and its own time."""

    phase: str
    label: str
    start_s: float
    end_s: float
    self_s: float
    trace_id: int | None = None  # a compile's trace, to link to
    span_id: int | None = None


@dataclass(frozen=True)
class Startup:
    """One process's start-up: the JSON contract's ``startup`` (``first_step_s``, ``end``, ``phases``,
    ``unattributed_s``; the phases and the rest add up to ``first_step_s``) and its detail."""

    first_step_s: float
    end: str
    phases: Mapping[str, float]
    unattributed_s: float
    second_step_s: float | None = None
    started_unix_s: float = 0.0
    process_start: str = "proc"
    interpreter: str = "interpreter"
    imports: Mapping[str, float] = field(default_factory=dict)  # top package -> seconds of its own
    waits: Mapping[str, float] = field(default_factory=dict)  # collective -> seconds waited in it
    cache: CacheShare = CacheShare()
    rank: int | None = None
    host: str | None = None
    spans: tuple[PhaseSpan, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        c = self.cache
        return {
            "first_step_s": self.first_step_s,
            "end": self.end,
            "phases": dict(self.phases),
            "unattributed_s": self.unattributed_s,
            "second_step_s": self.second_step_s,
            "started_unix_s": self.started_unix_s,
            "process_start": self.process_start,
            "interpreter": self.interpreter,
            "imports": dict(self.imports),
            "waits": dict(self.waits),
            "cache": {
                "compiles": c.compiles,
                "hits": c.hits,
                "misses": c.misses,
                "saved_s": c.saved_s,
                "mega_cache_hits": c.mega_cache_hits,
            },
            "rank": self.rank,
            "host": self.host,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Startup:
        """A start-up read back from a summary's JSON (missing detail left at its default)."""
        c = d.get("cache") or {}
        return cls(
            _num(d.get("first_step_s")),
            str(d.get("end") or "exit"),
            {str(k): _num(v) for k, v in (d.get("phases") or {}).items()},
            _num(d.get("unattributed_s")),
            _num(d["second_step_s"]) if isinstance(d.get("second_step_s"), (int, float)) else None,
            _num(d.get("started_unix_s")),
            str(d.get("process_start") or "proc"),
            str(d.get("interpreter") or "interpreter"),
            {str(k): _num(v) for k, v in (d.get("imports") or {}).items()},
            {str(k): _num(v) for k, v in (d.get("waits") or {}).items()},
            CacheShare(
                int(_num(c.get("compiles"))),
                int(_num(c.get("hits"))),
                int(_num(c.get("misses"))),
                _num(c.get("saved_s")),
                int(_num(c.get("mega_cache_hits"))),
            ),
            d["rank"] if isinstance(d.get("rank"), int) else None,
            d.get("host") if isinstance(d.get("host"), str) else None,
            notes=tuple(str(n) for n in d.get("notes") or ()),
        )


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


# -- attribution ---------------------------------------------------------------------------------------------------


def attribute(start_ns: int, end_ns: int, intervals: Sequence[Interval]) -> list[int]:
    """Each interval's own nanoseconds within ``[start_ns, end_ns)``: every instant goes to the innermost interval
    covering it (latest start; of two with one start, the shorter; of two alike, the first recorded, which closed
    first), unless an :data:`OPAQUE` interval covers it: then to the outermost of those."""
    own = [0] * len(intervals)
    events: list[tuple[int, int, int]] = []  # (time, 0: end / 1: start, index)
    for i, (s, e, _, _) in enumerate(intervals):
        s, e = max(s, start_ns), min(e, end_ns)
        if e > s:
            events.append((s, 1, i))
            events.append((e, 0, i))
    events.sort()
    active: dict[int, tuple[int, int, bool]] = {}
    prev = start_ns
    for t, starting, i in events:
        if t > prev and active:
            own[_winner(active)] += t - prev
        prev = max(prev, t)
        if starting:
            s, e, phase, _ = intervals[i]
            active[i] = (max(s, start_ns), min(e, end_ns), phase in OPAQUE)
        else:
            active.pop(i, None)
    return own


def _winner(active: dict[int, tuple[int, int, bool]]) -> int:
    opaque = [i for i, v in active.items() if v[2]]
    if opaque:  # the outermost opaque interval: earliest start, then the longest, then the first recorded
        return min(opaque, key=lambda i: (active[i][0], -active[i][1], i))
    return max(active, key=lambda i: (active[i][0], -active[i][1], -i))


def _to_clock(tl: Timeline, unix_ns: int) -> int:
    """A wall-clock time on the recorder's clock, by the clock pairs (interpolated between the first and last)."""
    pairs = sorted(tl.clock_pairs)
    if not pairs:
        return unix_ns - tl.started_unix_ns + tl.start_ns
    (c0, u0), (c1, u1) = pairs[0], pairs[-1]
    if c1 - c0 < _NS or u1 == u0:
        return c0 + unix_ns - u0
    return c0 + round((unix_ns - u0) * (c1 - c0) / (u1 - u0))


def build(tl: Timeline) -> Startup:
    """Attribute a timeline: :class:`Startup`, its phases and the rest adding up to the whole to the nanosecond."""
    intervals: list[Interval] = list(tl.intervals)
    n_own = len(intervals)
    compiles = sorted(tl.compiles, key=lambda c: c.start_unix_ns)
    for c in compiles:
        intervals.append((_to_clock(tl, c.start_unix_ns), _to_clock(tl, c.end_unix_ns), "compile", c.compile_id))
    total = max(0, tl.end_ns - tl.start_ns)
    own = attribute(tl.start_ns, tl.start_ns + total, intervals)
    by_phase = dict.fromkeys(PHASES, 0)
    imports: dict[str, int] = {}
    waits: dict[str, int] = {}
    for (_, _, phase, label), ns in zip(intervals, own, strict=True):
        if phase not in by_phase or not ns:
            continue
        by_phase[phase] += ns
        if phase == "imports":
            imports[label] = imports.get(label, 0) + ns
        elif phase == "waiting_for_ranks":
            waits[label] = waits.get(label, 0) + ns
    rest = total - sum(by_phase.values())
    inside = [c for c in compiles if c.start_unix_ns <= c.end_unix_ns and _to_clock(tl, c.start_unix_ns) < tl.end_ns]
    cache = CacheShare(
        len(inside),
        sum(c.hits for c in inside),
        sum(c.misses for c in inside),
        round(sum(c.saved_ns for c in inside) / _NS, 6),
        sum(c.mega_cache_hits for c in inside),
    )
    spans = []
    for i in sorted(range(len(intervals)), key=lambda i: -own[i])[:MAX_SPANS]:
        s, e, phase, label = intervals[i]
        if own[i] <= 0:
            break
        linked = compiles[i - n_own] if i >= n_own else None
        spans.append(
            PhaseSpan(
                phase,
                label,
                _s(max(s, tl.start_ns) - tl.start_ns),
                _s(min(e, tl.end_ns) - tl.start_ns),
                _s(own[i]),
                linked.trace_id if linked else None,
                linked.span_id if linked else None,
            )
        )
    spans.sort(key=lambda p: (p.start_s, -p.end_s))
    return Startup(
        _s(total),
        tl.end,
        {p: _s(ns) for p, ns in by_phase.items()},
        _s(rest),
        _s(tl.second_step_ns) if tl.second_step_ns is not None else None,
        tl.started_unix_ns / _NS,
        tl.process_start,
        tl.interpreter,
        _top(imports),
        {k: _s(v) for k, v in sorted(waits.items(), key=lambda kv: -kv[1])},
        cache,
        tl.rank,
        tl.host,
        tuple(spans),
        tl.notes,
    )


def _s(ns: int) -> float:
    return ns / _NS


def _top(by_label: dict[str, int]) -> dict[str, float]:
    ranked = sorted(by_label.items(), key=lambda kv: -kv[1])
    out = {k: _s(v) for k, v in ranked[:MAX_PACKAGES]}
    if len(ranked) > MAX_PACKAGES:
        out["other"] = _s(sum(v for _, v in ranked[MAX_PACKAGES:]))
    return out
