"""A feature: a fact the bridge adds to what torch's records say, declared once, as a plugin its pipeline owns.

The record's own facts (phases, metrics, starts, recompile reasons, graph breaks, artifacts, logs, schedules, debug
directories) shape the compile record and every sink's core. Every other fact is a feature: one :class:`Feature`, in a
module (or a package) of this folder, and one row of :data:`torch_otel._features.registry.ROWS`. Nothing outside
this folder names a feature (tests/fast/test_layers.py). A feature declares, each part optional:

- its events: how torch's records become them (:class:`ParseRows`, read by the parser's tables for replay and full
  capture), and how one joins its compile (:class:`Attach`: the assembler keeps it in ``record.attached[name]``);
- its rows of live capture's attach table (``hooks``: torch_otel._attach.points row types), whose hooks are its live
  state's own functions, queued off torch's path as every hook is;
- its live state (``state``): a :class:`FeatureState` each pipeline makes (:class:`StateContext`) and owns, with the
  lifecycle of the OpenTelemetry SDK's processors;
- ``derive``: its facts, worked out once into ``record.derived[name]`` before any sink sees the record, given its state;
- its views (torch_otel._features.views): spans, metrics, its part of the run summary, log records, its comparison in
  ``torch-otel diff``, its part of the HTML pages.

A feature need not join compiles: one with no event (a process's start-up, say) has its hooks, its state and its
views alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._attach.points import Source
from .._core.compile_id import CompileId
from .._core.errors import logger
from .._core.settings import Settings
from .._model.events import Event
from .._model.record import CompileRecord
from .views import DiffView, LogView, MetricsView, Observation, PageView, SpanView, SummaryView

__all__ = [
    "Attach",
    "Feature",
    "FeatureState",
    "LogReader",
    "ParseRows",
    "StateContext",
]


@dataclass(frozen=True, slots=True)
class Attach:
    """How an event that belongs to a compile joins its record: one row per event type in the assembler's table.

    The event's compile is found by its id (``prefer``: the kind of compile an id names first, for ids a frame
    and its lazy backward share). It is appended to ``field`` of the record, at most ``bound`` of them (the rest
    counted in ``dropped``); with no compile open it is counted as ``orphan_<field>``. ``dated``: an event
    without a time gets the compile's latest (replay; a dated copy is kept, the event itself is left as its source
    made it); ``raises_attempt``: its attempt is the record's too.
    """

    field: str
    bound: int
    prefer: str | None = None
    dated: bool = False
    raises_attempt: bool = False
    value: Callable[[Any], Any] | None = None  # what is kept (default: the event itself)
    merge: Callable[[CompileRecord, Any], bool] | None = None  # True: the event was merged into what is kept


# (name, ts_ns, args, compile id, attempt, rank) -> events, or None when the instant is not the row's
InstantHandler = Callable[[str, "int | None", Any, "CompileId | None", int, "int | None"], "list[Event] | None"]
# (payload, compile id, attempt, rank) -> events
ArtifactHandler = Callable[["str | None", "CompileId | None", int, "int | None"], "list[Event]"]


@dataclass(frozen=True)
class ParseRows:
    """How torch's structured-trace records become a feature's events (torch_otel._parse.records reads these rows).

    ``instants``: torch's instant events by name prefix, each with its handler; replay reads them from the log's
    chromium events, full live capture from ``torch.__trace``. ``artifacts``: artifact names whose payload is kept,
    each with its handler, or None: an ``ArtifactEvent`` with its payload (replay offers each to the states,
    :meth:`FeatureState.observe`).
    """

    instants: tuple[tuple[str, InstantHandler], ...] = ()
    artifacts: tuple[tuple[str, ArtifactHandler | None], ...] = ()


class LogReader(Protocol):
    """Reads ``TORCH_TRACE`` logs for a state (a baseline given as a previous run's logs): the logs at ``path`` (a log,
    or the directory of a job's logs; what is not a log is left out), and one log's records as ``(record type,
    events)``, with what it could not read appended to ``problems``, one line each."""

    def files(self, path: str) -> list[str]: ...

    def records(self, file: str, problems: list[str]) -> Iterator[tuple[str, list[Any]]]: ...


def _warn(line: str) -> None:
    logger.warning("%s", line)


@dataclass(frozen=True)
class StateContext:
    """What a pipeline gives the live state it makes for a feature.

    ``source``: ``"live"`` (the bridge), ``"replay"`` or ``"diff"`` (one side of it). ``tracer``: the bridge's (a
    feature that writes a trace of its own); ``baseline``: a previous run the user named (``replay --baseline``: its
    logs, or a cache key index); ``previous``: what this feature's state of the pipeline before handed over
    (:meth:`FeatureState.handover`: the base side's, for the new side of a diff); ``logs``: reads ``TORCH_TRACE`` logs;
    ``say``: one line for a problem with what the state was given (replay: on its stderr; live: a warning, once).
    """

    source: str
    settings: Settings = field(default_factory=Settings)
    tracer: Any = None
    baseline: str | None = None
    previous: Any = None
    logs: LogReader | None = None
    say: Callable[[str], None] = _warn


class FeatureState:
    """A feature's live state: made by its pipeline, one per pipeline, and owned by it as the OpenTelemetry SDK's
    tracer provider owns its span processors. The pipeline calls, each call guarded (an exception is caught, counted
    and logged once, and never reaches torch):

    - ``on_start`` and ``on_finish``: each compile as it begins, and once it ended and its facts were derived, before
      the sinks see it;
    - ``observe``: an event that joins no compile (replay: each artifact, with the torch release its log was written
      by);
    - ``collect``: what its series stand at now (as prometheus_client reads a collector): before each scrape of
      ``/metrics``, every ``collect_every_s`` seconds where set, and at shutdown; the metrics apply them;
    - ``handover``: what this feature's state in the next pipeline starts from (``torch-otel diff``: the base side's
      for the new side, ``StateContext.previous``);
    - ``after_fork``: in a forked child, before it goes on (the parent's threads may hold its locks);
    - ``force_flush`` and ``shutdown``: after the sinks', under the same deadline; ``shutdown`` is safe twice.

    Its hooks (``Feature.hooks``) reach it through what they attach to (``cap.state(name)``).
    """

    collect_every_s: float | None = None

    def on_start(self, record: CompileRecord) -> None:  # noqa: B027 - optional, empty by design
        """A compile began."""

    def on_finish(self, record: CompileRecord) -> None:  # noqa: B027 - optional, empty by design
        """A compile ended, every fact derived."""

    def observe(self, event: Any, torch_version: str | None) -> None:  # noqa: B027 - optional, empty by design
        """An event that joins no compile, with the torch release its source ran (None: unknown)."""

    def collect(self) -> Iterable[Observation]:
        """What its series stand at now (a counter: its total)."""
        return ()

    def handover(self) -> Any:
        """What the state of this feature in the next pipeline starts from (None: nothing)."""
        return None

    def after_fork(self) -> None:  # noqa: B027 - optional, empty by design
        """In a forked child: locks made anew, counts the child's own."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:  # noqa: B027 - optional, empty by design
        """Write and let go of what it holds; safe to call twice."""


@dataclass(frozen=True, eq=False)
class Feature:
    """One feature (see the module): ``name`` keys its events and facts on the record (``attached``, ``derived``) and
    its state in its pipeline; ``event`` is its event class, joined to its compile as ``attach`` says.

    ``derive`` puts its facts into ``record.derived[name]``, given its state in the pipeline (None where it has none),
    for each compile that holds its events; a feature with no ``event`` derives from every compile's own facts."""

    name: str
    event: type | None = None
    attach: Attach | None = None
    parse: ParseRows = ParseRows()
    hooks: tuple[Source[Any], ...] = ()
    state: Callable[[StateContext], FeatureState | None] | None = None
    derive: Callable[[CompileRecord, Any], None] | None = None
    spans: SpanView | None = None
    metrics: MetricsView | None = None
    summary: SummaryView | None = None
    logs: Callable[[CompileRecord], Iterable[LogView]] | None = None
    diff: DiffView | None = None
    page: PageView | None = None

    def events(self, record: CompileRecord) -> list[Any]:
        """This feature's events on ``record``, in the order they came."""
        return record.attached.get(self.name, [])
