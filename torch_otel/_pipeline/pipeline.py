"""The pipeline: its sinks, its features' live states, the assemblers that feed them, and their one lifecycle.

A :class:`Pipeline` (made by torch_otel._pipeline.build.build_pipeline) owns its sinks and its features' live states
(torch_otel._features.feature.FeatureState) as the OpenTelemetry SDK's tracer provider owns its span processors:

- it makes the assemblers that feed them (:meth:`Pipeline.assembler`: one for live capture, one per replayed log, one
  per side of a diff), each handing its compiles to the pipeline's one loop (torch_otel._assemble.fanout), with the
  derive step's parts (the tracing, the states, the mega-cache loads, the live recompile limit);
- :meth:`Pipeline.collect` reads what the states' series stand at into the metrics: before each scrape, every
  :attr:`Pipeline.collect_every_s` seconds, and first thing at shutdown;
- ``force_flush(timeout)`` and ``shutdown(timeout)`` call each sink in order, then each state, under one shared
  deadline, each call guarded: an exception is caught, counted and logged once, and the next one still runs.
  ``shutdown`` gives every one its turn (one past the deadline gets 0 ms) and is safe twice; ``force_flush`` stops when
  time runs out, as the SDK's does; ``after_fork`` lets each state (and the metrics) start afresh in a forked child.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._assemble.assembler import Assembler, CacheLoads, Tracing
from .._assemble.fanout import Fanout
from .._core.errors import record_error
from .._features.feature import Feature, FeatureState
from .._features.registry import features_or_default
from .._model.record import CompileRecord, Sink

if TYPE_CHECKING:
    from .._sinks.metrics import CompileMetrics
    from .._sinks.replay_report import ReplayReport
    from .._sinks.summary import RunSummary, SummariesByRank

__all__ = ["DEFAULT_TIMEOUT_MS", "Pipeline"]

DEFAULT_TIMEOUT_MS = 30_000


class Pipeline:
    """See the module. What a caller reads back is kept by name: ``summary``, ``by_rank`` (diff), ``report``
    (replay), ``metrics``, ``spans`` (replay's delivery: the spans it made), ``states`` (by feature name)."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        tracing: Tracing | None = None,
        states: Mapping[str, FeatureState] | None = None,
        cache_loads: CacheLoads | None = None,
        recompile_limit: Callable[[], int | None] | None = None,
        features: tuple[Feature, ...] | None = None,
    ) -> None:
        self.sinks: tuple[Sink, ...] = tuple(sinks)
        self.states: dict[str, FeatureState] = dict(states or {})
        self.features = features_or_default(features)
        self.tracing = tracing
        self.cache_loads = cache_loads
        self.recompile_limit = recompile_limit
        self.out = Fanout(self.sinks, tuple(self.states.values()))
        self.summary: RunSummary | None = None
        self.by_rank: SummariesByRank | None = None
        self.report: ReplayReport | None = None
        self.metrics: CompileMetrics | None = None
        self.spans: Any = None
        self._lock = threading.Lock()
        self._shut_down = False

    def assembler(
        self, max_open: int = 256, stamp: Callable[[CompileRecord, bool], None] | None = None, recent: int | None = None
    ) -> Assembler:
        """An assembler that hands its finished compiles to this pipeline, deriving their facts with its parts."""
        return Assembler(
            max_open=max_open,
            tracing=self.tracing,
            cache_loads=self.cache_loads,
            features=self.features,
            feature_states=self.states,
            stamp=stamp,
            recent=recent,
            recompile_limit=self.recompile_limit,
            out=self.out,
        )

    def finish(self, record: CompileRecord) -> None:
        """A record made elsewhere (diff rebuilds them from spans): on, as an assembler hands its records."""
        self.out.on_finish(record)

    def state(self, name: str) -> Any:
        """The live state of the feature ``name`` (None: it has none in this pipeline)."""
        return self.states.get(name)

    # -- the states' lifecycle -----------------------------------------------------------------------------------
    @property
    def collect_every_s(self) -> float | None:
        """How often the states ask to be collected while the process runs (None: only at scrapes and shutdown)."""
        every = [s.collect_every_s for s in self.states.values() if s.collect_every_s]
        return min(every) if every else None

    def collect(self) -> None:
        """Each state's series as they stand now, into the metrics (a counter by its growth). Never raises."""
        out = list(self._collected())
        if out and self.metrics is not None:
            try:
                self.metrics.apply_collected(out)
            except Exception as exc:  # noqa: BLE001 - never into a scrape
                record_error("metrics: collected series", exc)

    def _collected(self) -> Iterator[Any]:
        for state in self.states.values():
            try:
                yield from list(state.collect())
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(state).__name__}.collect", exc)

    def handover(self) -> dict[str, Any]:
        """What each state hands the states of the next pipeline (``torch-otel diff``: the base side's to the new's)."""
        out = {}
        for name, state in self.states.items():
            try:
                out[name] = state.handover()
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(state).__name__}.handover", exc)
        return out

    def after_fork(self) -> None:
        """In a forked child: each state, and the metrics, start afresh (the parent's threads may hold their locks)."""
        for state in self.states.values():
            try:
                state.after_fork()
            except Exception as exc:  # noqa: BLE001 - never into the fork
                record_error(f"{type(state).__name__}.after_fork", exc)
        if self.metrics is not None:
            self.metrics.after_fork_in_child()

    # -- flush and shut down: the sinks, then the states, under one deadline ---------------------------------------------
    def _owned(self) -> tuple[Any, ...]:
        return (*self.sinks, *self.states.values())

    def force_flush(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> bool:
        """Each sink, then each state, delivers what it holds, in order, within what is left of ``timeout_millis``;
        False when one did not, or time ran out before every one had its turn (as the SDK's span processors flush)."""
        deadline = time.monotonic() + timeout_millis / 1000
        done = True
        for part in self._owned():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                done = bool(part.force_flush(int(left * 1000))) and done
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(part).__name__}.force_flush", exc)
                done = False
        return done

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        """The states collected a last time; then each sink, then each state, writes and delivers what it holds and
        lets go, in order; every one has its turn, with what is left of ``timeout_millis`` (none once it is spent). A
        second call does nothing."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        deadline = time.monotonic() + timeout_millis / 1000
        self.collect()  # what the states stand at: the late spans and the metrics' last export read it
        for part in self._owned():
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                part.shutdown(left)
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(part).__name__}.shutdown", exc)
