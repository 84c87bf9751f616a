"""A kind of event, declared once: how it joins its compile, the facts derived for it, and what each sink shows.

The record's own features (phases, metrics, starts, recompile reasons, graph breaks, artifacts, logs, schedules, debug
directories) shape the compile record and every sink's core. A kind added to them is one :class:`Feature`, in a module
of this folder, and one row of :data:`torch_otel._features.registry.FEATURES`; the parser's tables turn torch's records into
its events (torch_otel._parse.records), and live capture's attach table taps torch for them where it needs a new
point (torch_otel._capture.sources). Nothing else changes: the assembler keeps its events on the record
(``record.attached[kind.name]``), its derive step puts its facts there (``record.derived[kind.name]``), and the sinks
show what its views say:

- spans: events on the compile's root span (and how ``torch-otel diff`` reads them back from an exported trace);
- metrics: its series and each compile's observations of them;
- the run summary: its part of the JSON (its key, how it adds up over ranks) and its lines of the text;
- log records: records correlated with the compile's trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .._core.merge import Merge
from .._model.record import CompileRecord

__all__ = [
    "Attach",
    "Feature",
    "LateSpan",
    "MetricsView",
    "Observation",
    "Series",
    "SpanView",
    "SummaryPart",
    "SummaryView",
    "Text",
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


SeriesKind = Literal["counter", "histogram", "updown", "gauge", "info"]


@dataclass(frozen=True, slots=True)
class Series:
    """One metric series: ``name`` is the Prometheus name without ``_total``; ``info``: a gauge of which each rank
    serves one series at a time (a new label set replaces the rank's last)."""

    name: str
    kind: SeriesKind
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    buckets: tuple[float, ...] | None = None


# (series name, label values in the series' order, value, exemplar trace/span ids)
Observation = tuple[str, tuple[str, ...], float, "tuple[int, int] | None"]
# an event on the compile's root span: (name, attributes, time; None: the compile's end)
SpanEvent = tuple[str, dict[str, Any], "int | None"]
# a span written after the compile's trace: (name, attributes, start, end)
LateSpan = tuple[str, dict[str, Any], int, int]
# a log record: (time, level, logger name, message, attributes)
LogView = tuple[int, int, str, str, dict[str, Any]]


class Text(Protocol):
    """How the span mapper writes text into an attribute: capped at the attribute limit; paths as the settings say."""

    def text(self, value: object) -> str: ...

    def path(self, value: object) -> str | None: ...


@dataclass(frozen=True)
class SpanView:
    """A kind's events on the compile's root span, and how ``torch-otel diff`` reads them back into a record.

    ``names`` lists every event and attribute name it writes: docs/span-model.md must name each
    (tests/fast/test_span_model.py)."""

    events: Callable[[CompileRecord, Text], list[SpanEvent]]
    read: Callable[[str, Mapping[str, Any], CompileRecord], bool] | None = None  # True: the event was this kind's
    names: tuple[str, ...] = ()
    # Spans the kind writes after its compile's trace was exported (a compiled graph's calls, at exit), each a child of
    # the compile's root: their names; how ``torch-otel diff`` reads one back into its compile's record (its
    # attributes, start and end); and what a record read back from a trace holds before such a span arrives (a trace
    # file has them after the root they belong to).
    late_spans: tuple[str, ...] = ()
    write_late: Callable[[Any], list[LateSpan]] | None = None  # given the kind's derived fact, at exit
    read_late: Callable[[str, Mapping[str, Any], int, int, CompileRecord], None] | None = None
    await_late: Callable[[CompileRecord], None] | None = None


@dataclass(frozen=True)
class MetricsView:
    """A kind's series, and what one compile observes of them (given the record and its ``rank`` label); ``sampled``:
    those read from live state instead."""

    series: tuple[Series, ...]
    observations: Callable[[CompileRecord, str], Iterable[Observation]]
    # Series read from live state rather than observed per compile (how often each compiled graph ran): what they
    # stand at now, given the rank label and whether it is a detail rank. The metrics sink reads them before each
    # scrape and export, and adds a counter's growth since its last read.
    sampled: Callable[[str, bool], Iterable[Observation]] | None = None


class SummaryPart(Protocol):
    """A kind's part of one run summary: it adds each compile, and says its facts (``facts``: the summary's own)."""

    def add(self, record: CompileRecord) -> None: ...

    def to_dict(self, facts: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class SummaryView:
    """A kind's part of the run summary: its ``key`` in the JSON, one ``part`` per summary, its ``text`` lines
    (given the summary's facts and the width), and how its key adds up over a job's ranks (``merge``)."""

    key: str
    part: Callable[[], SummaryPart]
    text: Callable[[Mapping[str, Any], int], list[str]]
    merge: Merge


@dataclass(frozen=True, eq=False)
class Feature:
    """One kind of event (see the module): its ``name`` keys it on the record; ``event`` is its event class.

    ``derive`` puts its facts into ``record.derived[name]``, given the part the pipeline has for it (replay's and the
    live bridge's key history for cache lookups; None when there is none)."""

    name: str
    event: type
    attach: Attach
    derive: Callable[[CompileRecord, Any], None] | None = None
    spans: SpanView | None = None
    metrics: MetricsView | None = None
    summary: SummaryView | None = None
    logs: Callable[[CompileRecord], Iterable[LogView]] | None = None

    def events(self, record: CompileRecord) -> list[Any]:
        """This kind's events on ``record``, in the order they came."""
        return record.attached.get(self.name, [])
