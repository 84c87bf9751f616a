"""The one loop that hands compiles on: to the features' live states, then to the sinks, each call guarded.

Every assembler (live capture's, each replayed log's, each side of a diff's) hands its compiles to its pipeline's
:class:`Fanout`, and a record made elsewhere (diff rebuilds records from a traces file) goes through the same one: an
exception is caught, counted and logged once, and the next state or sink still gets the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core.errors import record_error
from .._model.events import LogEvent
from .._model.record import CompileRecord, Sink

__all__ = ["Fanout"]


class Fanout:
    """Hands each compile, as it begins and once it ended with every fact derived, to ``states`` (the features' live
    states, torch_otel._features.feature.FeatureState) and then to ``sinks``, in order; a warning logged outside any
    compile to the sinks."""

    def __init__(self, sinks: Sequence[Sink] = (), states: Sequence[Any] = ()) -> None:
        self.sinks: tuple[Sink, ...] = tuple(sinks)
        self.states: tuple[Any, ...] = tuple(states)

    def on_start(self, record: CompileRecord) -> None:
        self._notify("on_start", record)

    def on_finish(self, record: CompileRecord) -> None:
        self._notify("on_finish", record)

    def on_orphan_log(self, event: LogEvent) -> None:
        for sink in self.sinks:
            try:
                sink.on_orphan_log(event)
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(sink).__name__}.on_orphan_log", exc)

    def _notify(self, what: str, record: CompileRecord) -> None:
        for receiver in (*self.states, *self.sinks):
            try:
                getattr(receiver, what)(record)
            except Exception as exc:  # noqa: BLE001 - one sink must not starve the others
                record_error(f"{type(receiver).__name__}.{what}", exc)
