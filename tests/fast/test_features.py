"""Fast tier: a feature added through its module and one row of the registry reaches every place; no torch at all.

A synthetic feature, ``synthetic_things`` (torch would log it as an instant event ``synthetic_thing`` with a count),
is declared as the package declares its cache lookups (torch_otel._features.cache_lookups): a :class:`Feature` with its
event, how torch's records become it, how it joins its compile, a derived fact, and a view for each sink. It is added
by one row of the features' table (``registry.ROWS``), and a ``TORCH_TRACE`` log holding it is replayed through replay's
own pipeline (torch_otel._pipeline.build) with every sink on: the spans, the metrics, the run summary (text, JSON, its
merge across ranks), log records, replay's report, and a toy sink of the caller's. Read back from the trace file, as
``torch-otel diff`` reads one, it is there too. No other file of the package knows it.

A feature with live state (tests/fast/widget_calls: a counter of a library's calls, read when collected) is added the
same way, by its module and one row: its hook is attached by live capture's attach table, its counter is served at
each scrape of a real ``/metrics`` endpoint, and it has its lines, its JSON, its comparison in ``torch-otel diff``, a
gate condition and its part of the page.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import types
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry

from tests.fast import widget_calls
from tests.fast.fastkit import Collect
from tests.fast.test_replay_reader import chromium, log, record
from torch_otel._analysis.diff_compare import Side, compare
from torch_otel._analysis.diff_gate import parse_fail_on
from torch_otel._analysis.diff_text import format_text as format_diff
from torch_otel._attach.attaching import attach_all, detach_all
from torch_otel._capture.attach_table import rows
from torch_otel._capture.live_capture import LiveCapture
from torch_otel._core import errors
from torch_otel._core.compile_id import CompileId
from torch_otel._core.merge import Merge, sum_int
from torch_otel._core.settings import Settings
from torch_otel._features import registry
from torch_otel._features.feature import Attach, Feature, ParseRows
from torch_otel._features.views import MetricsView, Observation, Series, SpanEvent, SpanView, SummaryView, Text
from torch_otel._model.record import CompileRecord, PhaseNode
from torch_otel._otel.exposition import start_prometheus_server, sync_before_scrape
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.build import MetricsSpec, PipelineSpec, ReportSpec, build_pipeline
from torch_otel._pipeline.diff_command import read_side
from torch_otel._pipeline.replay import replay_paths
from torch_otel._sinks.html import render_html
from torch_otel._sinks.spans import SpanMapper
from torch_otel._sinks.summary import RunSummary
from torch_otel._sinks.summary_merge import merge_summaries
from torch_otel._sinks.summary_text import format_text

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogs
except ImportError:  # an SDK before the rename
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogs  # type: ignore[attr-defined,no-redef]

NAME = "synthetic_things"
EVENT = "torch.compile.synthetic_thing"
COUNT = "torch.compile.synthetic_thing.count"


@dataclass(slots=True)
class SyntheticEvent:
    compile_id: CompileId | None
    n: int
    ts_ns: int | None = None
    attempt: int = 0
    rank: int | None = None


def from_instant(name: str, ts_ns: int | None, args: Any, cid: CompileId | None, attempt: int, rank: int | None) -> list[Any]:
    n = args.get("n") if isinstance(args, dict) else None
    return [SyntheticEvent(cid, n if isinstance(n, int) else 0, ts_ns, attempt, rank)]


def derive(rec: CompileRecord, part: Any) -> None:
    rec.derived[NAME] = sum(ev.n for ev in rec.attached[NAME])  # a fact worked out once, into the record


def span_events(rec: CompileRecord, fmt: Text) -> list[SpanEvent]:
    return [(EVENT, {COUNT: ev.n}, ev.ts_ns) for ev in rec.attached.get(NAME, ())]


def read_span_event(name: str, attributes: Mapping[str, Any], rec: CompileRecord) -> bool:
    if name != EVENT:
        return False
    rec.attached.setdefault(NAME, []).append(SyntheticEvent(rec.compile_id, int(attributes[COUNT])))
    rec.derived[NAME] = rec.derived.get(NAME, 0) + int(attributes[COUNT])
    return True


def observations(rec: CompileRecord, rank: str) -> Iterator[Observation]:
    if NAME in rec.derived:
        yield "torch_compile_synthetic_things", (rank,), rec.derived[NAME], None


class Part:
    def __init__(self) -> None:
        self.total = 0

    def add(self, record: CompileRecord) -> None:
        self.total += record.derived.get(NAME, 0)

    def to_dict(self, facts: Mapping[str, Any]) -> Any:
        return {"total": self.total}


SYNTHETIC = Feature(
    NAME,
    SyntheticEvent,
    Attach(NAME, 8),
    parse=ParseRows(instants=(("synthetic_thing", from_instant),)),  # torch's instant events of it, by name prefix
    derive=derive,
    spans=SpanView(span_events, read_span_event, (EVENT, COUNT)),
    metrics=MetricsView((Series("torch_compile_synthetic_things", "counter", "Synthetic things.", ("rank",)),), observations),
    summary=SummaryView(
        NAME,
        lambda state: Part(),
        lambda facts, width: [f"synthetic things: {facts[NAME]['total']}"],
        Merge(section={"total": Merge(sum_int)}),
    ),
    logs=lambda rec: [(0, logging.WARNING, "torch._dynamo", f"{rec.derived[NAME]} synthetic things", {COUNT: 7})],
)
FEATURE = SYNTHETIC  # what the registry's row reads of this module


@pytest.fixture
def with_the_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one row that adds the feature: the features' table's (its module is this one: :data:`FEATURE`)."""
    monkeypatch.setattr(registry, "ROWS", (*registry.ROWS, registry.Row(__name__)))


def _instant(name: str, ts_us: float, args: dict[str, Any]) -> list[bytes]:
    md = {"chromium_event": {}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "0b302f70"}
    return record(md, {"name": name, "ts": ts_us, "args": {"compile_id": "0/0", **args}, "ph": "i", "tid": 0, "pid": 0})


def _the_log(tmp_path: Path) -> Path:
    metrics = {"compile_id": "0/0", "co_name": "fn", "co_filename": "/w/train.py", "co_firstlineno": 75, "is_forward": True}
    path = tmp_path / "dedicated_log_torch_trace_rank_0.log"
    path.write_bytes(
        log(
            chromium("dynamo", "B", 1_000_000.0),
            _instant("synthetic_thing", 1_200_000.0, {"n": 2}),
            _instant("synthetic_thing", 1_300_000.0, {"n": 5}),
            chromium("dynamo", "E", 2_000_000.0),
            record({"compilation_metrics": metrics, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}),
        )
    )
    return path


def test_a_feature_added_by_its_module_and_one_row_reaches_every_sink(with_the_feature: None, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(spans_file), setting="test")))
    logs = InMemoryLogs()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    registry_ = CollectorRegistry()
    toy = Collect()
    text, stats = io.StringIO(), ReplayStats()
    pipeline = build_pipeline(
        PipelineSpec(
            "replay",
            Settings(),
            tracing=SpanMapper(provider.get_tracer("t"), Settings(), live=False),
            metrics=MetricsSpec(registry_),
            logger_provider=logger_provider,
            report=ReportSpec(stats, text, io.StringIO(), json_path=str(tmp_path / "replay.json")),
            sinks=(toy,),
        )
    )
    assert replay_paths([str(_the_log(tmp_path))], pipeline, stats) == 0
    pipeline.shutdown()
    provider.shutdown()
    # the record: its events, kept as torch logged them, and its fact derived once
    rec = toy.only()
    assert [ev.n for ev in rec.attached[NAME]] == [2, 5] and rec.derived[NAME] == 7
    # the spans: an event each on the compile's root span
    roots = [json.loads(line) for line in spans_file.read_text().splitlines()]
    events = [
        e for r in roots for rs in r["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"] for e in sp["events"]
    ]
    assert [e["attributes"] for e in events if e["name"] == EVENT] == [
        [{"key": COUNT, "value": {"intValue": "2"}}],
        [{"key": COUNT, "value": {"intValue": "5"}}],
    ]
    # the metrics: its series, with the compile's observation
    assert registry_.get_sample_value("torch_compile_synthetic_things_total", {"rank": "0"}) == 7.0
    # the run summary: its part of the JSON (replay --json), its line of the text, and how it adds up over ranks
    doc = json.loads((tmp_path / "replay.json").read_text())
    assert doc[NAME] == {"total": 7}
    assert "synthetic things: 7" in text.getvalue() and "synthetic things: 7" in format_text(doc)
    assert merge_summaries([doc, doc])[NAME] == {"total": 14}
    # log records: correlated with the compile's trace
    (log_record,) = [r.log_record for r in logs.get_finished_logs() if r.log_record.attributes.get(COUNT) == 7]
    assert log_record.body == "7 synthetic things" and log_record.trace_id == rec.trace_id
    # read back from the exported trace, as torch-otel diff reads a traces file
    side, code, _ = read_side(str(spans_file), io.StringIO())
    assert side is not None and code == 0 and side.summary[NAME] == {"total": 7}


def test_without_its_row_the_feature_is_not_seen(tmp_path: Path) -> None:
    """The same log with the table as it ships: the instant is a plain one, nothing is attached or shown."""
    toy, stats = Collect(), ReplayStats()
    report = ReportSpec(stats, io.StringIO(), io.StringIO())
    pipeline = build_pipeline(PipelineSpec("replay", Settings(), report=report, sinks=(toy,)))
    assert replay_paths([str(_the_log(tmp_path))], pipeline, stats) == 0
    rec = toy.only()
    assert NAME not in rec.attached and NAME not in rec.derived
    assert [name for name, _, _ in rec.root.instants] == ["synthetic_thing", "synthetic_thing"]


# -- a feature with live state: a counter of a library's calls, read at scrape time -----------------------------------


class Factory:
    """The library the feature hooks (in place of torch, which the fast tier does not import)."""

    def make(self, n: int = 1) -> int:
        return n


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:  # noqa: S310 - loopback only
        return r.read().decode()


def _made(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("torch_compile_widgets_made_total")]


@pytest.fixture
def widgets(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """The library, importable as ``widgets``; the feature added by its one row of the registry."""
    lib = types.ModuleType("widgets")
    lib.Factory = Factory  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "widgets", lib)
    monkeypatch.setattr(registry, "ROWS", (*registry.ROWS, registry.Row(widget_calls.__name__)))
    yield lib


def test_a_feature_with_live_state_counts_through_its_own_hook_and_is_read_at_each_scrape(widgets, tmp_path):
    prom = CollectorRegistry()
    summary_file = tmp_path / "summary.json"
    settings = Settings(cache_index="off", summary=(str(summary_file), str(tmp_path / "summary.txt")))
    pipeline = build_pipeline(PipelineSpec("live", settings, metrics=MetricsSpec(prom)))
    state = pipeline.state(widget_calls.NAME)
    assert isinstance(state, widget_calls.WidgetState)  # made by the pipeline, for its source (live)
    # its row is in live capture's attach table, and attaches its state's own hook (torch's rows need torch: not here)
    row = next(r for r in rows() if r.name == "widget_calls")
    capture = LiveCapture(pipeline.assembler(), states=pipeline.states)
    attached = attach_all(capture, "2.13.0", [row])
    assert attached.rows == [row] and getattr(Factory.__dict__["make"], "__torch_otel_hook__", None) is row
    # the endpoint a live run serves, brought up to date before each scrape as the bridge does it
    started = start_prometheus_server({"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}, prom)
    assert not isinstance(started, str), started
    server, port = started
    unsync = sync_before_scrape(prom, pipeline.collect)
    try:
        factory = widgets.Factory()
        assert [factory.make(i) for i in range(3)] == [0, 1, 2]  # the library's answers, unchanged
        assert state.made == 3 and state.collected == 0  # counted on the call's path; nothing read yet
        assert _made(_scrape(port)) == ['torch_compile_widgets_made_total{rank="0"} 3.0'] and state.collected == 1
        factory.make()
        factory.make()
        assert _made(_scrape(port)) == ['torch_compile_widgets_made_total{rank="0"} 5.0'] and state.collected == 2
    finally:
        unsync()
        server.shutdown()
        server.server_close()
    detach_all(capture, attached)
    assert widgets.Factory().make(7) == 7 and state.made == 5  # its hook is gone: the library as it was
    # shut down: the run summary leads with its line, has its JSON part; its page part is in the page
    pipeline.shutdown()
    doc = json.loads(summary_file.read_text())
    assert doc[widget_calls.NAME] == {"made": 5}
    text = (tmp_path / "summary.txt").read_text().splitlines()
    assert text[0] == "widget calls lead the summary: 5 made"
    assert render_html(doc).count("Widgets made") == 1  # its script, inlined after the pages' kit
    # two ranks' parts add up; the diff compares it, says it, and its gate condition fails on fewer widgets
    assert merge_summaries([doc, doc])[widget_calls.NAME] == {"made": 10}
    fewer = dict(doc, **{widget_calls.NAME: {"made": 2}})
    gate, problems = parse_fail_on(["widgets"])
    assert problems == []
    d = compare(Side("a", "run summary", doc), Side("b", "run summary", fewer), gate)
    assert d[widget_calls.NAME] == {"base": 5, "new": 2}
    assert d["gate"]["failed"] == [{"kind": "widgets", "text": "fewer widgets made: 5 -> 2"}]
    assert "widgets made: 5 -> 2" in format_diff(d)


def test_without_its_row_the_feature_has_no_state_no_row_and_no_series(tmp_path):
    prom = CollectorRegistry()
    pipeline = build_pipeline(PipelineSpec("live", Settings(cache_index="off"), metrics=MetricsSpec(prom)))
    assert pipeline.state(widget_calls.NAME) is None
    assert "widget_calls" not in [r.name for r in rows()]
    pipeline.collect()
    assert prom.get_sample_value("torch_compile_widgets_made_total", {"rank": "0"}) is None
    gate, problems = parse_fail_on(["widgets"])
    assert problems and "no such condition" in problems[0]


def test_a_feature_can_begin_with_the_process_and_says_nothing_where_it_has_no_state(monkeypatch, tmp_path):
    """A row's ``starts_with_process``: every entry point calls it, the first call starts it, its state adopts it; a
    start that raises is counted, never raised. Where the feature has no state (a replay), its optional part writes
    no key and no line."""
    from tests.fast.widget_calls import at_start
    from torch_otel import internal_error_count

    row = registry.Row(widget_calls.__name__, starts_with_process=at_start.__name__)
    monkeypatch.setattr(registry, "ROWS", (*registry.ROWS, row))
    monkeypatch.setattr(registry, "_started", set())
    monkeypatch.setattr(at_start, "STARTED", [])
    registry.start_process({"WIDGETS_AT_START": "first"})
    registry.start_process({"WIDGETS_AT_START": "again"})  # torch_otel.auto, then instrument(): started once
    assert at_start.STARTED == ["first"]
    pipeline = build_pipeline(PipelineSpec("live", Settings(metrics=False, cache_index="off")))
    state = pipeline.state(widget_calls.NAME)
    assert isinstance(state, widget_calls.WidgetState) and state.started == ["first"]
    pipeline.shutdown()
    replayed = RunSummary("replay")  # no state: nothing to say, no key, no line
    replayed.on_finish(CompileRecord("frame", CompileId(0, 0), PhaseNode("dynamo", 0, 10**6)))
    doc = replayed.to_dict()
    assert doc["compiles"] == 1 and widget_calls.NAME not in doc
    assert "widget" not in format_text(doc) and "1 compile" in format_text(doc)
    monkeypatch.setattr(registry, "_started", set())
    errors = internal_error_count()
    registry.start_process({"WIDGETS_AT_START": "raise"})
    assert internal_error_count() == errors + 1


def test_a_feature_from_outside_the_package_that_is_no_feature_or_takes_a_taken_name_is_one_line_and_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """torch_otel.features.register() and the installed packages' entry points add rows after the bridge's own: one that
    declares no Feature, or one whose name is taken (here, the synthetic feature's twice), is one warning and is left
    out; the others load, in order."""
    bare = types.ModuleType("no_feature_here")
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    twin = types.ModuleType("synthetic_twin")
    twin.FEATURE = SYNTHETIC  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, twin.__name__, twin)
    monkeypatch.setattr(registry, "REGISTERED", [__name__, bare.__name__, twin.__name__])
    monkeypatch.setattr(registry, "_installed", ())
    errors.reset_for_tests()
    with caplog.at_level(logging.WARNING, logger="torch_otel"):
        names = [f.name for f in registry.features()]
    assert names == ["cache_lookups", "graph_calls", "startup", NAME]
    said = [r.getMessage() for r in caplog.records]
    assert sum("no_feature_here declares no FEATURE" in m for m in said) == 1, said
    assert sum("synthetic_twin takes a name already taken" in m for m in said) == 1, said
