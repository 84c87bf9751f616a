"""Typed events -> finished compiles (:class:`CompileRecord`), the one place both live and replay meet.

A compile is a root chromium event (``dynamo`` for a frame compile,
``entire_backward_compile`` for a lazily compiled backward, ``compiled_autograd``
for a compiled-autograd graph, and the standalone compiles: ``fullgraph_capture``
for a strict ``torch.export`` or an AOT precompile, ``compile_fx_aot`` for
AOTInductor, ``export`` for the live hook around ``torch.export``) with the phases
nested inside it, plus its ``CompilationMetrics`` record, graph breaks and (full
capture) artifacts.

A standalone compile's root carries no compile id: torch logs it outside any
compile context. It takes the id of the first phase that has one (a strict
export's ``0/0``), and records without an id (AOTInductor logs none at all) join
it while it is the only such compile in flight.
State is bounded: at most ``max_open`` compiles in flight, and a bounded number
of phases, graph breaks and artifacts per compile.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core.compile_id import CompileId
from .._features.feature import Attach, Feature
from .._features.registry import features_or_default
from .._model.events import (
    ArtifactEvent,
    DebugDirEvent,
    Event,
    FrameObjectsEvent,
    GraphBreakEvent,
    GraphScheduleEvent,
    LogEvent,
    MetricsEvent,
    PhaseEvent,
    RecompileReasonsEvent,
    StartEvent,
)
from .._model.record import ROOTS, RUNTIME, SOFT_FAIL_TYPES, STANDALONE, CompileRecord, PhaseNode, Sink
from .derive import RECENT, CacheLoads, Derive, Tracing, guard
from .fanout import Fanout
from .phase_tree import ATTRIBUTED, MAX_PHASES, place, place_phase

__all__ = ["ATTACH", "ATTRIBUTED", "MAX_PHASES", "RECENT", "Assembler", "Attach", "CacheLoads", "Tracing"]

# torch's functions on a standalone compile's stack that say what it is
_STACK_KINDS = (("aot_compile_fullgraph", "precompile"), ("draft_export", "export"), ("_export", "export"))

MAX_GRAPH_BREAKS = 256
MAX_ARTIFACTS = 512
MAX_LOGS = 32
MAX_RECOMPILE_REASONS = 32
MAX_SCHEDULES = 64  # inductor graphs per compile (DDP buckets, forward and backward)
MAX_FRAME_OBJECTS = 8  # guard dumps per compile naming the frame's objects (one per attempt)
MAX_EARLY_STARTS = 64  # dynamo_start records waiting for their compile's root


# A frame compile that failed softly (``SOFT_FAIL_TYPES``: torch runs the frame in eager) on an error raised with the
# user's stack (CompilationMetrics' ``fail_user_frame_filename``), whose skip its tracer did not log: torch's
# convert_frame logs that skip (``dynamo_graph_break_reason``, "torch.compile will skip tracing the frame ...") under
# the compile's id after the compile's metrics and its root's end (2.10 for each such failure; 2.13 only for one its
# tracer did not log), while its graph_breaks logger is on (the bridge's handler turns it on). A recompile limit's
# failure has no user stack, and no such skip.
def _ready(rec: CompileRecord) -> bool:
    """Whether a compile that has ended and has its metrics is finished: not while torch has that skip still to log.
    One held waits for it (``_attach``), the next compile's begin or a flush (``_finish_pending``, ``flush``), as a
    compile whose metrics have not come does; live, the end of its batch of events at the latest (``release_held``)."""
    if rec.kind != "frame" or rec.fail_type not in SOFT_FAIL_TYPES or rec.recompile_limit_hit:
        return True
    if not isinstance((rec.metrics or {}).get("fail_user_frame_filename"), str):
        return True
    return any(gb.skipped_frame for gb in rec.graph_breaks)


def _merge_schedule(rec: CompileRecord, ev: GraphScheduleEvent) -> bool:
    """Replay: torch logs a graph's tensor metadata (LOG_TLPARSE=1) just before its collective schedule."""
    last = rec.schedules[-1] if rec.schedules else None
    if ev.tensor_meta is None and last is not None and last.tensor_meta and not last.collectives:
        last.collectives = ev.collectives
        return True
    return False


def _debug_dir_path(ev: DebugDirEvent) -> str:
    return ev.path


# The table of the record's own events that attach to a compile (phases, metrics, starts and recompile reasons shape
# the record itself and have handlers of their own). The features added to them attach by their own row
# (torch_otel._features: ``Feature.attach``), into ``record.attached``.
ATTACH: dict[type, Attach] = {
    GraphBreakEvent: Attach("graph_breaks", MAX_GRAPH_BREAKS, prefer="frame", dated=True),
    ArtifactEvent: Attach("artifacts", MAX_ARTIFACTS, dated=True, raises_attempt=True),
    LogEvent: Attach("logs", MAX_LOGS, prefer="frame"),
    GraphScheduleEvent: Attach("schedules", MAX_SCHEDULES, merge=_merge_schedule),
    DebugDirEvent: Attach("debug_dirs", MAX_SCHEDULES, value=_debug_dir_path),
    FrameObjectsEvent: Attach("frame_objects", MAX_FRAME_OBJECTS, prefer="frame"),
}


class Assembler:
    """Feeds typed events in, hands finished :class:`CompileRecord` objects to the sinks.

    Before any sink sees a finished record, its derive step (``derive``, torch_otel._assemble.derive) works out
    what is not in torch's records for it, into the record: the code location, the backward's forward, the
    compiled-autograd graph, the recompile limit, the mega-cache hits, each added feature's facts (``features``; their
    parts in ``feature_states``, by kind name), then its trace identity from ``tracing`` (the span mapper, which builds
    the compile's trace). ``stamp`` is the source's own word on a record (replay: the process that wrote it),
    called as a record begins (``ended=False``) and as it ends (``ended=True``), before the derivation. Events are
    kept as their source made them.
    """

    def __init__(
        self,
        sinks: Sequence[Sink] = (),
        max_open: int = 256,
        *,
        tracing: Tracing | None = None,
        cache_loads: CacheLoads | None = None,
        features: tuple[Feature, ...] | None = None,
        feature_states: Mapping[str, Any] | None = None,
        stamp: Callable[[CompileRecord, bool], None] | None = None,
        recent: int | None = None,
        recompile_limit: Callable[[], int | None] | None = None,
        out: Fanout | None = None,
    ) -> None:
        self.out = Fanout(sinks) if out is None else out
        self.states: tuple[Any, ...] = tuple((feature_states or {}).values())
        self.max_open = max_open
        self.stamp = stamp
        features = features_or_default(features)
        self.derive = Derive(
            tracing=tracing,
            cache_loads=cache_loads,
            features=features,
            feature_states=feature_states,
            recent=recent,
            recompile_limit=recompile_limit,
        )
        # how each event type joins its compile: the record's own rows, then the added features' (kept in attached)
        self._attach_rows: dict[type, tuple[Attach, bool]] = {t: (row, False) for t, row in ATTACH.items()}
        self._attach_rows.update({f.event: (f.attach, True) for f in features if f.event is not None and f.attach is not None})
        self._open: OrderedDict[tuple[CompileId | None, str], CompileRecord] = OrderedDict()
        self._backwards: dict[CompileId | None, int] = {}  # lazy backwards seen per compile id
        self._next_reasons: dict[str, list[str]] = {}  # kind -> why the next compile of that kind happens
        self._early_starts: dict[CompileId, StartEvent] = {}  # dynamo_start logged before its compile's root
        self._lock = threading.RLock()
        self.stats: Counter[str] = Counter()
        # One handler per event type.
        self._handlers: dict[type, Any] = {
            PhaseEvent: self._phase,
            MetricsEvent: self._metrics,
            StartEvent: self._start,
            RecompileReasonsEvent: self._recompile_reasons,
            **{t: self._attach for t in self._attach_rows},
        }

    # -- public -----------------------------------------------------------
    @property
    def tracing(self) -> Tracing | None:
        return self.derive.tracing

    def feed(self, event: Event) -> None:
        with self._lock:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(event)

    def feed_phase(self, event: PhaseEvent) -> None:
        """A phase event (live capture's phase hook): ``feed``, less its lookup of the event's handler."""
        with self._lock:
            self._phase(event)

    def feed_frame_phase(self, name: str, ph: str, ts_ns: int, args: dict[str, Any], cid: CompileId) -> bool:
        """A phase's begin, end or instant (not a root's) from its fields, placed where it joins a frame compile that is
        still running (most of torch's events, live); False where it joins none, and nothing was done: the caller types
        it and feeds it (``feed_phase``), which finds where else it goes."""
        with self._lock:
            found = self._open.get((cid, "frame"))
            if found is None or found._ended:
                return False
            place(found, name, ph, ts_ns, args, 0, self.stats)  # a frame compile's phase never ends the compile
            return True

    def observe(self, event: Any, torch_version: str | None = None) -> None:
        """An event that joins no compile, offered to the features' live states (replay: each artifact it reads, with
        the torch release its log was written by)."""
        for state in self.states:
            guard(f"{type(state).__name__}.observe", state.observe, event, torch_version)

    def _attach(self, event: Any) -> None:
        row, added_kind = self._attach_rows[type(event)]
        rec = self._find(event.compile_id, prefer=row.prefer)
        if rec is None:
            self.stats[f"orphan_{row.field}"] += 1
            if isinstance(event, LogEvent):
                self._notify_orphan_log(event)
            return
        if row.merge is not None and row.merge(rec, event):
            return
        kept: list[Any] = rec.attached.setdefault(row.field, []) if added_kind else getattr(rec, row.field)
        if len(kept) >= row.bound:
            rec.dropped += 1
            return
        if row.dated and event.ts_ns is None:  # dated by its compile, a copy: the event stays as its source made it
            event = dataclasses.replace(event, ts_ns=rec.last_ts_ns)
        kept.append(event if row.value is None else row.value(event))
        if row.raises_attempt:
            rec.attempt = max(rec.attempt, event.attempt)
        if type(event) is GraphBreakEvent and rec._ended and rec.metrics is not None and _ready(rec):
            self._finish(rec)  # the skip torch logs after a frame compile that failed softly: the last of it

    def _recompile_reasons(self, event: RecompileReasonsEvent) -> None:
        if event.for_next:  # compiled autograd logs its cache miss before the graph's compile begins
            self._next_reasons[event.for_next] = event.reasons
            return
        rec = self._find(event.compile_id, prefer="frame")
        if rec is None:
            self.stats["orphan_recompile_reasons"] += 1
        else:
            self._set_reasons(rec, event.reasons)

    @staticmethod
    def _set_reasons(rec: CompileRecord, reasons: list[str]) -> None:
        if rec.kind == "compiled_autograd" and rec.compile_id is not None and not rec.compile_id.compiled_autograd_id:
            return  # the first compiled-autograd graph: a cache miss on an empty cache is no recompile
        rec.recompile_reasons = reasons[:MAX_RECOMPILE_REASONS]
        rec.dropped += max(0, len(reasons) - MAX_RECOMPILE_REASONS)

    def _join_early_start(self, rec: CompileRecord) -> None:
        """A frame compile whose dynamo_start came before it (older logs) takes it now."""
        if self._early_starts and rec.kind == "frame" and rec.compile_id is not None:
            early = self._early_starts.pop(rec.compile_id, None)
            if early is not None:
                self._start(early)

    def _start(self, event: StartEvent) -> None:
        rec = self._find(event.compile_id, prefer="frame")
        if rec is None:
            # older logs write dynamo_start before the compile's root event: it waits for its compile (bounded)
            if event.compile_id is not None and len(self._early_starts) < MAX_EARLY_STARTS:
                self._early_starts[event.compile_id] = event
            else:
                self.stats["orphan_starts"] += 1
        else:
            if rec.start_stack is None:
                rec.start_stack = event.stack
            rec.attempt = max(rec.attempt, event.attempt)

    def release_held(self) -> None:
        """Finish every compile held for the skip torch logs after it (``_ready``) that has not come: live capture calls
        this at the end of each batch of events, as torch logs that skip right after the compile, before the batch is
        taken; so a compile whose skip never comes (torch's graph_breaks logger off) is not held past its batch."""
        with self._lock:
            if self._open:
                for rec in [r for r in self._open.values() if r._ended and r.metrics is not None]:
                    self._finish(rec)

    def flush(self, reason: str = "the process exited before the compile ended", cut_ns: int | None = None) -> None:
        """Finish every compile in flight (ended ones normally, the rest as incomplete).

        ``cut_ns`` is when the cut was seen (live: now). A cut compile and its open phases end
        then; without it (replay of a truncated log) they end at the last time torch reported.
        """
        with self._lock:
            for rec in list(self._open.values()):
                if not rec._ended:
                    rec.incomplete = reason
                    if cut_ns is not None:
                        self._cut(rec, cut_ns)
                self._finish(rec)
            if self._early_starts:  # their compile never began
                self.stats["orphan_starts"] += len(self._early_starts)
                self._early_starts.clear()

    @staticmethod
    def _cut(rec: CompileRecord, cut_ns: int) -> None:
        open_nodes = list(rec._stack)  # the phases still open, the root among them
        for lane in (rec._lanes or {}).values():
            open_nodes.extend(lane)
        for node in open_nodes:
            if node.end_ns is None:
                node.end_ns = max(cut_ns, node.start_ns)

    @property
    def open_count(self) -> int:
        return len(self._open)

    # -- internals --------------------------------------------------------

    def _only_compile_in_flight(self, ev: PhaseEvent) -> CompileRecord | None:
        """A phase with no compile id: inductor's compile workers (``compile_file``) run on threads that carry none.

        When exactly one compile is in flight, they served it: the phase joins it and says so on its span
        (:data:`ATTRIBUTED`, on its node). Otherwise it cannot be known, and the phase is counted
        (``torch_otel_unattributed_phases_total``).
        """
        running = [r for r in self._open.values() if not r._ended and r.kind != RUNTIME]
        if not running:  # no compile: runtime work (GPU benchmarking inside runtime autotuning) of one graph
            running = [r for r in self._open.values() if not r._ended]
        if len(running) != 1:
            self.stats["unattributed_phases"] += 1
            return None
        return running[0]

    def _standalone(self, cid: CompileId | None) -> CompileRecord | None:
        """The standalone compile (export, AOTInductor) a record of id ``cid`` belongs to, if one can tell.

        The only one in flight that has no id yet, or whose id is ``cid``; a record with no id joins the only one in
        flight, whatever its id (torch's capture ends with no id inside a live export that took its phases' id). A
        record with an id gives the compile its id (a strict export's root has none; its phases say ``0/0``).
        """
        found = [
            r
            for r in self._open.values()
            if r.kind in STANDALONE and not r._ended and (cid is None or r.compile_id is None or r.compile_id == cid)
        ]
        if len(found) != 1:
            return None
        rec = found[0]
        if rec.compile_id is None and cid is not None:
            self._rekey(rec, cid, rec.kind)
        return rec

    def _rekey(self, rec: CompileRecord, cid: CompileId | None, kind: str) -> None:
        if rec._key is not None and self._open.get(rec._key) is rec:
            del self._open[rec._key]
        rec.compile_id, rec.kind = cid, kind
        self._place(rec, (cid, kind))

    def _place(self, rec: CompileRecord, key: tuple[CompileId | None, str]) -> None:
        """Put ``rec`` among the compiles in flight under ``key``; one already there is finished, cut short."""
        old = self._open.pop(key, None)
        if old is not None and old is not rec:
            old.incomplete = old.incomplete or "a new compile with the same id started"
            self._finish(old, pop=False)
        rec._key = key
        self._open[key] = rec

    def _find(self, cid: CompileId | None, prefer: str | None = None) -> CompileRecord | None:
        if cid is None:
            return self._standalone(None) if self._open else None
        if prefer is not None:
            rec = self._open.get((cid, prefer))
            if rec is not None:
                return rec
        for kind in ("frame", "backward", "compiled_autograd"):
            rec = self._open.get((cid, kind))
            if rec is not None and not rec._ended:
                return rec
        for kind in ("frame", "backward", "compiled_autograd"):
            rec = self._open.get((cid, kind))
            if rec is not None:
                return rec
        for kind in STANDALONE:
            rec = self._open.get((cid, kind))
            if rec is not None:
                return rec
        return self._standalone(cid) if self._open else None

    def _phase(self, ev: PhaseEvent) -> None:
        kind = ROOTS.get(ev.name)
        if kind is None:
            self._inner_phase(ev)
            return
        if kind == "export" and ev.origin is not None and ev.origin.root_kind:
            kind = ev.origin.root_kind
        if kind in STANDALONE and self._inside_standalone(ev):
            kind = None  # torch's fullgraph_capture inside the live export root: one of its phases
        if kind is not None and ev.ph == "B":
            self._finish_pending()
            rec = CompileRecord(
                kind,
                ev.compile_id,
                PhaseNode(ev.name, ev.ts_ns, args=dict(ev.args)),
                attempt=ev.attempt,
                rank=ev.rank,
                origin=ev.origin,
                last_ts_ns=ev.ts_ns,
            )
            rec._stack.append(rec.root)
            self._place(rec, (ev.compile_id, kind))
            self._join_early_start(rec)
            reasons = self._next_reasons.pop(kind, None) if self._next_reasons else None
            if reasons:
                self._set_reasons(rec, reasons)
            if kind == "backward":
                n = self._backwards.get(ev.compile_id, 0)
                rec.backward_index = n
                if n or len(self._backwards) < 100_000:
                    self._backwards[ev.compile_id] = n + 1
            while len(self._open) > self.max_open:
                _, oldest = next(iter(self._open.items()))
                oldest.incomplete = oldest.incomplete or "evicted: too many compiles in flight"
                self.stats["evicted"] += 1
                self._finish(oldest)
            self._began(rec)
            return
        if kind is not None and ev.ph == "E":
            ending = self._open.get((ev.compile_id, kind))
            if ending is None and kind in STANDALONE:
                ending = self._ending_standalone(ev.name, ev.compile_id)
            if ending is None:
                self.stats["orphan_phases"] += 1
                return
            ending.root.end_ns = ending.last_ts_ns = ev.ts_ns
            began = ending.origin.cpu_ns if ending.origin is not None else None
            if ev.cpu_ns is not None and began is not None:
                ending.cpu_ns = max(0, ev.cpu_ns - began)
                child_began = ending.origin.child_cpu_ns if ending.origin is not None else None
                if ev.child_cpu_ns is not None and child_began is not None:
                    ending.child_cpu_ns = min(ending.cpu_ns, max(0, ev.child_cpu_ns - child_began))
            ending.root.args.update(ev.args)
            ending.attempt = max(ending.attempt, ev.attempt)
            if ev.rank is not None:
                ending.rank = ev.rank
            ending._stack.clear()
            ending._ended = True
            if (ending.metrics is not None and _ready(ending)) or ending.kind == "compiled_autograd" or ev.final:
                self._finish(ending)
            return
        self._inner_phase(ev)

    def _inner_phase(self, ev: PhaseEvent) -> None:
        """A phase inside a compile (not a root's begin or end): a node of the compile it joins."""
        worker = False
        cid = ev.compile_id
        if cid is not None:
            found = self._open.get((cid, "frame"))  # where most phases go: as _find's first look
            if found is None or found._ended:
                found = self._find(cid)
        else:  # AOTInductor logs its phases without an id; inductor's compile workers carry none either
            found = self._standalone(None)
            if found is None:
                found = self._only_compile_in_flight(ev)
                worker = found is not None
        if found is None or found._ended:
            runtime = self._runtime(ev)
            if runtime is None:
                self.stats["orphan_phases"] += 1
                return
            found = runtime
        if place_phase(found, ev, worker, self.stats):  # a runtime record's outermost phase ended: so has it
            self._finish(found)

    def _metrics(self, ev: MetricsEvent) -> None:
        if ev.is_runtime:
            self.stats["runtime_metrics"] += 1
            return
        kind = "frame" if ev.is_forward else "backward"
        rec = self._open.get((ev.compile_id, kind))
        if rec is None:
            rec = self._standalone_for_metrics(ev)
        if rec is None:
            rec = self._synthesize(ev, kind)
        rec.metrics = ev.fields
        rec.attempt = max(rec.attempt, ev.attempt)
        if ev.rank is not None:
            rec.rank = ev.rank
        if rec._ended and _ready(rec):
            self._finish(rec)

    def _runtime(self, ev: PhaseEvent) -> CompileRecord | None:
        """The runtime record of a phase whose compile has ended (begun now, for a begin), or None."""
        if ev.compile_id is None:
            return None
        key = (ev.compile_id, RUNTIME)
        rec = self._open.get(key)
        if rec is None and ev.ph == "B":
            rec = CompileRecord(RUNTIME, ev.compile_id, PhaseNode(RUNTIME, ev.ts_ns), rank=ev.rank, last_ts_ns=ev.ts_ns)
            rec._stack.append(rec.root)
            self._place(rec, key)
            self._began(rec)
        return rec

    def _inside_standalone(self, ev: PhaseEvent) -> bool:
        """A standalone root's event inside a running standalone compile of the same id (or none) is its phase."""
        for r in self._open.values():
            if r.kind in STANDALONE and not r._ended and r.root.name != ev.name:
                if r.compile_id is None or ev.compile_id is None or r.compile_id == ev.compile_id:
                    return any(n.name == ev.name for n in r._stack) if ev.ph == "E" else True
        return False

    def _ending_standalone(self, name: str, cid: CompileId | None) -> CompileRecord | None:
        """The running standalone compile whose root this end closes (its id may have been given since it began)."""
        for r in reversed(self._open.values()):
            if r.kind in STANDALONE and not r._ended and r.root.name == name and (cid is None or r.compile_id in (None, cid)):
                return r
        return None

    def _standalone_for_metrics(self, ev: MetricsEvent) -> CompileRecord | None:
        """The standalone compile a CompilationMetrics record ends: torch logs an export's and a precompile's without id."""
        for r in reversed(self._open.values()):
            if r.kind in STANDALONE and r.metrics is None and (ev.compile_id is None or r.compile_id in (None, ev.compile_id)):
                stack = ev.stack_functions
                if r.kind == "export" and r.root.name == "fullgraph_capture" and stack:
                    for fn, kind in _STACK_KINDS:
                        if fn in stack:
                            if kind != r.kind:
                                self._rekey(r, r.compile_id, kind)
                            break
                return r
        return None

    def _synthesize(self, ev: MetricsEvent, kind: str) -> CompileRecord:
        """A metrics record with no chromium events around it (older logs, or lost events)."""
        f = ev.fields
        start_us = f.get("start_time_us")
        if not isinstance(start_us, (int, float)):
            st = f.get("start_time")
            start_us = st * 1e6 if isinstance(st, (int, float)) else 0
        dur_us = f.get("duration_us")
        if not isinstance(dur_us, (int, float)):
            secs = f.get("entire_frame_compile_time_s")
            dur_us = secs * 1e6 if isinstance(secs, (int, float)) else 0
        start_ns = int(start_us * 1000)
        root = PhaseNode("dynamo" if kind == "frame" else "entire_backward_compile", start_ns, start_ns + int(dur_us * 1000))
        rec = CompileRecord(kind, ev.compile_id, root, rank=ev.rank)
        rec._ended = True
        self.stats["synthesized"] += 1
        self._place(rec, (ev.compile_id, kind))
        self._join_early_start(rec)
        self._began(rec)
        return rec

    def _finish_pending(self) -> None:
        for rec in [r for r in self._open.values() if r._ended]:
            self._finish(rec)

    def _finish(self, rec: CompileRecord, pop: bool = True) -> None:
        if pop:
            key = rec._key if rec._key is not None else (rec.compile_id, rec.kind)
            if self._open.get(key) is rec:
                del self._open[key]
        nodes = rec.root.nodes()
        if rec.root.end_ns is None:
            rec.root.end_ns = max(n.end_ns or n.start_ns for n in nodes)
        for node in nodes:
            if node.end_ns is None:
                node.end_ns = rec.root.end_ns
                if rec.incomplete is None:  # a phase torch began in a compile that ended, and never ended
                    self.stats["unmatched_phase_begins"] += 1
        rec._stack.clear()
        rec._lanes = None
        if rec.kind == "export" and rec.root.name == "fullgraph_capture":
            # A strict export that torch logged on its own (replay): its tree is the live one's, torch.export around
            # torch's capture. The log holds nothing of the export call before and after the capture.
            capture = rec.root
            rec.root = PhaseNode("export", capture.start_ns, capture.end_ns, args={"strict": True}, children=[capture])
        else:
            rec._all_nodes = nodes  # the finished tree's nodes, listed once (CompileRecord.phase_nodes; seal lists a new root's)
        self.stats[f"compiles_{rec.kind}"] += 1
        if self.stamp is not None:
            self._guard("stamp", self.stamp, rec, True)
        self.derive(rec)
        self._notify("on_finish", rec)

    def _began(self, rec: CompileRecord) -> None:
        if self.stamp is not None:
            self._guard("stamp", self.stamp, rec, False)
        self._notify("on_start", rec)

    def _guard(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        return guard(what, fn, *args)

    def _notify_orphan_log(self, ev: LogEvent) -> None:
        self.out.on_orphan_log(ev)

    def _notify(self, what: str, rec: CompileRecord) -> None:
        if what == "on_finish":
            self.out.on_finish(rec)
        else:
            self.out.on_start(rec)
