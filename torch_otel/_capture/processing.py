"""Live capture's processing, off torch's path: each queued item of a hook turned into its events and fed to the
assembler, in the order the hooks queued them (on the capture's worker thread, or in ``drain``).

The hooks (torch_otel._capture.live_capture) take what must be read at the moment and queue it with one of these
functions; the parsing runs here, shared with replay (torch_otel._parse.records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._assemble.assembler import Assembler
from .._core.compile_id import CompileId, parse_compile_id
from .._core.graph_breaks import parse_graph_break
from .._model.events import ArtifactEvent, Event, GraphBreakEvent, GraphScheduleEvent, Origin, PhaseEvent
from .._parse.records import (
    PHASE_TYPES,
    RecordError,
    chromium_record_events,
    chromium_to_event,
    metrics_to_event,
    parse_record,
    record_context,
)

__all__ = ["Processing"]

_TIMES = frozenset((int, float))  # the types of a chromium event's ``ts`` placed as it is


class Processing:
    """The queue's items into events, into ``assembler``; ``tapped``: the event types a tap of the attach table
    delivers as torch makes them (full capture's trace records carry them once more: left out)."""

    def __init__(self, assembler: Assembler, tapped: set[type]) -> None:
        self.assembler = assembler
        self.tapped = tapped
        self._interned: dict[int, str] = {}

    def malformed(self, exc: RecordError) -> None:
        """A torch record of a shape the parser cannot use: torch's, not the bridge's error. Counted."""
        self.assembler.stats[f"malformed:{str(exc).split(':', 1)[0]}"] += 1

    def event(self, ev: Event, origin: Origin | None, rank: int | None) -> None:
        if origin is not None and isinstance(ev, PhaseEvent):
            ev.origin = origin
            if ev.rank is None:
                ev.rank = rank
        self.assembler.feed(ev)

    def phase_event(self, event: Any) -> PhaseEvent | None:
        try:
            return chromium_to_event(event)
        except RecordError as exc:
            self.malformed(exc)
            return None

    def events(self, convert: Callable[[], list[Event]], _b: None, _c: None) -> None:
        for ev in convert():
            self.assembler.feed(ev)

    def chromium(self, event: Any, origin: Origin | None, rank: int | None) -> None:
        ev = self.phase_event(event)
        if ev is not None:
            self.event(ev, origin, rank)

    def root_end(self, event: Any, _origin: None, cpu: tuple[int, int]) -> None:
        ev = self.phase_event(event)
        if ev is not None:
            ev.cpu_ns, ev.child_cpu_ns = cpu
            self.event(ev, None, None)

    def phase(self, event: Any, _origin: None, thread: int) -> None:
        """A phase's begin or end (never a root's: the hook sent those to ``chromium`` and ``root_end``).

        One that joins a frame compile still running (most) is placed from torch's dict as it is; any other is typed
        first (``chromium_to_event``), as replay's are, and fed like them."""
        try:
            name, ph, ts, args = event["name"], event["ph"], event["ts"], event["args"]
            text = args["compile_id"]
        except (KeyError, TypeError):  # not torch's usual shape: typed, as replay's are
            pass
        else:
            if type(name) is str and type(args) is dict and type(ts) in _TIMES and ph in PHASE_TYPES:
                cid = parse_compile_id(text)  # each text parsed once (its cache)
                if cid is not None and self.assembler.feed_frame_phase(name, ph, int(ts * 1000), args, cid):
                    return
        ev = self.phase_event(event)
        if ev is not None:
            ev.thread = thread
            self.assembler.feed_phase(ev)

    def metrics(self, fields: dict[str, Any], _b: None, _c: None) -> None:
        self.assembler.feed(metrics_to_event(fields))

    def graph_break(self, cid: CompileId | None, message: str, ts_ns: int) -> None:
        gb = parse_graph_break(message)
        self.assembler.feed(
            GraphBreakEvent(
                cid, gb.reason, gb.gb_type, gb.filename, gb.lineno, gb.skipped_frame, ts_ns=ts_ns, ends_frame=gb.ends_frame
            )
        )

    def trace_record(self, md: dict[str, Any], payload: str | None, ts_ns: int) -> None:
        try:
            record_type, events = parse_record(md, payload, self._interned)
        except RecordError as exc:
            self.malformed(exc)
            return
        if events is None:
            self.assembler.stats[f"unknown_kind:{record_type}"] += 1
            return
        self._feed_record(events, ts_ns)

    def chromium_record(self, md: dict[str, Any], event: Any, ts_ns: int) -> None:
        """A chromium event's record handed over as torch's dict (full capture's direct path): no JSON to parse."""
        try:
            events = chromium_record_events(event, *record_context(md))
        except RecordError as exc:
            self.malformed(exc)
            return
        self._feed_record(events, ts_ns)

    def _feed_record(self, events: list[Event], ts_ns: int) -> None:
        for ev in events:  # a phase begin or end gets here only if torch's chromium hook did not deliver it
            if isinstance(ev, GraphScheduleEvent) and ev.tensor_meta is None:
                continue  # the schedule hook delivered it, for every graph (this record only comes with collectives)
            if type(ev) in self.tapped:
                continue  # a tap delivered it as torch made it
            if isinstance(ev, (GraphBreakEvent, ArtifactEvent)):
                ev.ts_ns = ts_ns  # when torch logged it
            self.assembler.feed(ev)
