"""The one loop that hands compiles on: to the features' live states, then to the sinks, each call guarded.

Every assembler (live capture's, each replayed log's, each side of a diff's) hands its compiles to its pipeline's
:class:`Fanout`, and a record made elsewhere (diff rebuilds records from a traces file) goes through the same one: an
exception is caught, counted and logged once, and the next state or sink still gets the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
        # each receiver's method, looked up once (the receivers are fixed): two calls per compile, per receiver
        receivers = (*self.states, *self.sinks)
        self._on_start = tuple(r.on_start for r in receivers)
        self._on_finish = tuple(r.on_finish for r in receivers)

    def on_start(self, record: CompileRecord) -> None:
        _notify(self._on_start, record)

    def on_finish(self, record: CompileRecord) -> None:
        _notify(self._on_finish, record)

    def on_orphan_log(self, event: LogEvent) -> None:
        for sink in self.sinks:
            try:
                sink.on_orphan_log(event)
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(sink).__name__}.on_orphan_log", exc)


def _notify(methods: tuple[Callable[[CompileRecord], Any], ...], record: CompileRecord) -> None:
    for method in methods:
        try:
            method(record)
        except Exception as exc:  # noqa: BLE001 - one sink must not starve the others
            record_error(f"{type(getattr(method, '__self__', method)).__name__}.{getattr(method, '__name__', '?')}", exc)
