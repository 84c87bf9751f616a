"""What a feature shows, one view per place: spans, metrics, the run summary, log records, ``torch-otel diff``, pages.

Every view is optional and declared beside its feature (torch_otel._features.feature.Feature). The sinks read the
views of the features in the registry (torch_otel._features.registry) and know none of them by name:

- :class:`SpanView`: events on a compile's root span, spans written after its trace (at exit), and how
  ``torch-otel diff`` reads both back from a traces file;
- :class:`MetricsView`: the feature's series, and what each compile observes of them (a series its live state
  stands at is collected from the state instead: torch_otel._features.feature.FeatureState.collect);
- :class:`SummaryView`: its part of the run summary (the JSON, the text, what it adds to each compile listed, and how
  its part adds up over a job's ranks);
- log records (``Feature.logs``: records correlated with the compile's trace);
- :class:`DiffView`: its comparison in ``torch-otel diff`` (the JSON, the text, each rank's row, and the gate's
  conditions on it, :class:`Condition`);
- :class:`PageView`: its part of the HTML pages (a script that registers drawing functions with the pages' kit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .._core.merge import Merge
from .._model.record import CompileRecord

__all__ = [
    "Condition",
    "DiffView",
    "Instrument",
    "LateSpan",
    "LogView",
    "MetricsView",
    "Observation",
    "PageView",
    "Series",
    "SpanEvent",
    "SpanView",
    "SummaryPart",
    "SummaryView",
    "Text",
]

# -- metrics -------------------------------------------------------------------------------------------------------

# What a series records: OpenTelemetry's instrument (an ``info`` is a gauge of which each rank serves one series)
Instrument = Literal["counter", "histogram", "updown", "gauge", "info"]


@dataclass(frozen=True, slots=True)
class Series:
    """One metric series: ``name`` is the Prometheus name without ``_total``; ``info``: a gauge of which each rank
    serves one series at a time (a new label set replaces the rank's last)."""

    name: str
    instrument: Instrument
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    buckets: tuple[float, ...] | None = None


# (series name, label values in the series' order, value, exemplar trace/span ids)
Observation = tuple[str, tuple[str, ...], float, "tuple[int, int] | None"]


@dataclass(frozen=True)
class MetricsView:
    """A feature's series, and what one compile observes of them (given the record and its ``rank`` label). A series
    read from the feature's live state instead is collected from it (``FeatureState.collect``): a counter there says
    its total, and the metrics add its growth since the last read."""

    series: tuple[Series, ...]
    observations: Callable[[CompileRecord, str], Iterable[Observation]] = lambda rec, rank: ()


# -- spans ---------------------------------------------------------------------------------------------------------

# an event on the compile's root span: (name, attributes, time; None: the compile's end)
SpanEvent = tuple[str, dict[str, Any], "int | None"]
# a span written after the compile's trace: (name, attributes, start, end)
LateSpan = tuple[str, dict[str, Any], int, int]


class Text(Protocol):
    """How the span mapper writes text into an attribute: capped at the attribute limit; paths as the settings say."""

    def text(self, value: object) -> str: ...

    def path(self, value: object) -> str | None: ...


@dataclass(frozen=True)
class SpanView:
    """A feature's events on the compile's root span, and how ``torch-otel diff`` reads them back into a record.

    ``names`` lists every event and attribute name it writes: docs/span-model.md must name each
    (tests/fast/test_span_model.py)."""

    events: Callable[[CompileRecord, Text], list[SpanEvent]] = lambda rec, fmt: []
    read: Callable[[str, Mapping[str, Any], CompileRecord], bool] | None = None  # True: the event was this feature's
    names: tuple[str, ...] = ()
    # Spans the feature writes after its compile's trace was sent (a compiled graph's calls, at exit), each a child of
    # the compile's root: their names; how ``torch-otel diff`` reads one back into its compile's record (its
    # attributes, start and end); and what a record read back from a trace holds before such a span arrives (a trace
    # file has them after the root they belong to).
    late_spans: tuple[str, ...] = ()
    write_late: Callable[[Any], list[LateSpan]] | None = None  # given the feature's derived fact, at exit
    read_late: Callable[[str, Mapping[str, Any], int, int, CompileRecord], None] | None = None
    await_late: Callable[[CompileRecord], None] | None = None
    # Traces the feature writes of its own, not a compile's (a process's start-up), by their roots' names; and how
    # ``torch-otel diff`` reads one back from a traces file: its part of the run summary (under ``SummaryView.key``),
    # given the root's attributes, its resource's, and its start and end (None: not readable)
    own_roots: tuple[str, ...] = ()
    read_own: Callable[[Mapping[str, Any], Mapping[str, Any], int, int], Any] | None = None


# -- log records ---------------------------------------------------------------------------------------------------

# a log record: (time, level, logger name, message, attributes)
LogView = tuple[int, int, str, str, dict[str, Any]]

# -- the run summary -----------------------------------------------------------------------------------------------


class SummaryPart(Protocol):
    """A feature's part of one run summary: it adds each compile, and says its facts (``facts``: the summary's own;
    None: it has nothing to say, written as null, or left out where its view is ``optional``)."""

    def add(self, record: CompileRecord) -> None: ...

    def to_dict(self, facts: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class SummaryView:
    """A feature's part of the run summary.

    - ``key``: its key in the JSON; ``part``: one per summary, given the feature's live state in the summary's
      pipeline (None where there is none: a summary of its own, a replay);
    - ``text``: its lines in the body of the text (given the summary's facts and the width); ``head``: lines that
      lead the text, before everything else;
    - ``merge``: how its key adds up over a job's ranks;
    - ``compile_facts``: what it adds to each compile the summary lists (the slowest, the picture's), read when the
      summary is written (given the record as it finished; None: nothing for this compile);
    - ``finish``: its last word on the whole document, once every part is in (a feature may add to what another
      part of the document says: the evidence of a recompiling frame's graphs' calls);
    - ``gives_way``: where its lines stand in the order the text's blocks give way on a full screen (lower first;
      the slowest compiles give way at 1, the reasons at 8);
    - ``optional``: where its part says None (nothing to say: a replay of logs that hold none of it), the key is left
      out rather than written as null (its merge rule then takes ``when_all``, or reads a missing key as None).
    """

    key: str
    part: Callable[[Any], SummaryPart]
    text: Callable[[Mapping[str, Any], int], list[str]]
    merge: Merge
    head: Callable[[Mapping[str, Any], int], list[str]] | None = None
    compile_facts: Callable[[CompileRecord], Callable[[], Mapping[str, Any]] | None] | None = None
    finish: Callable[[dict[str, Any]], None] | None = None
    gives_way: int = 5
    optional: bool = False


# -- torch-otel diff -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """A condition of ``torch-otel diff --fail-on`` on a feature's comparison.

    ``flags`` says what of the comparison (``DiffView.compare``'s) passes the thresholds, one line each. ``defaults``:
    the thresholds used where none are given (percent, seconds; None: not used); ``units``: the thresholds it takes
    (``%``, ``s``; none: it takes none), and ``units_hint`` what to write instead of a wrong one; ``aliases``: other
    names it answers to.
    """

    name: str
    flags: Callable[[Any, tuple[float | None, float | None]], list[str]]
    defaults: tuple[float | None, float | None] = (None, None)
    units: tuple[str, ...] = ()
    units_hint: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiffView:
    """A feature's comparison in ``torch-otel diff``: two run summaries' facts (``compare(base, new)``: its value under
    ``key`` in the diff's JSON, after the record's own comparisons, before the one named ``before`` where given), its
    lines of the text (``text``, of which at least ``keep`` stay when the screen is full), what a rank's row keeps of it
    (``per_rank``), what it says it cannot compare (``notes``), and its gate ``conditions``."""

    key: str
    compare: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
    text: Callable[[Any, int], list[str]]
    keep: int = 1
    before: str | None = None
    per_rank: Callable[[Any], Any] | None = None
    notes: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]] | None = None
    conditions: tuple[Condition, ...] = ()


# -- the pages -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageView:
    """A feature's part of the HTML pages: ``script``, a file of ``package`` (package data), inlined into both pages
    after the pages' kit (torch_otel/_assets/page-kit.js). It registers what it draws with
    ``TorchOtelPage.part({summary: {tiles, sections}, diff: {sections}})``; a section is
    ``[name, draw(P), the page's own section it comes before]`` (none: after the page's own)."""

    package: str
    script: str
