"""Fast tier: the one pipeline builder and the lifecycle it owns, with toy sinks and toy states; no torch.compile.

A new sink is registered through the builder (``PipelineSpec.sinks``) and gets every finished compile, then
``force_flush`` and ``shutdown``, in the order the builder lists the sinks, under one deadline, each call guarded:
what this file shows for each of the three pipelines (live capture, replay, diff). The features' live states are the
pipeline's too: they see each compile before the sinks, are collected into the metrics, and flush and shut down after
the sinks, under the same deadline, each call guarded.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fast.fastkit import frame, metrics
from torch_otel._core import errors
from torch_otel._core.settings import Settings
from torch_otel._features.feature import FeatureState
from torch_otel._model.record import CompileRecord, Sink
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.build import PipelineSpec, ReportSpec, build_pipeline
from torch_otel._pipeline.pipeline import Pipeline
from torch_otel._sinks.replay_report import ReplayReport
from torch_otel._sinks.summary import RunSummary, SummariesByRank

QUIET = Settings(metrics=False, cache_index="off")


class Toy(Sink):
    """A sink of a kind the package does not know (say, one that writes Parquet): what the pipeline calls, in order."""

    def __init__(self, calls: list[str], name: str = "toy", flush_result: bool = True, fail: str | None = None) -> None:
        self.calls, self.name, self.flush_result, self.fail = calls, name, flush_result, fail
        self.records: list[CompileRecord] = []
        self.flush_timeouts: list[int] = []
        self.shutdown_timeouts: list[int] = []

    def on_finish(self, record: CompileRecord) -> None:
        self.records.append(record)
        self.calls.append(f"{self.name}.on_finish {record.id_str}")

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        self.calls.append(f"{self.name}.force_flush")
        self.flush_timeouts.append(timeout_millis)
        if self.fail == "force_flush":
            raise RuntimeError("a toy flush failed")
        return self.flush_result

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        self.calls.append(f"{self.name}.shutdown")
        self.shutdown_timeouts.append(timeout_millis)
        if self.fail == "shutdown":
            raise RuntimeError("a toy shutdown failed")


def _one_compile(pipeline: Pipeline) -> None:
    asm = pipeline.assembler()
    for ev in [*frame("0/0", 1_000, 5_000, ("entire_frame_compile", 1_500, 4_500)), metrics("0/0", co_name="f")]:
        asm.feed(ev)  # type: ignore[arg-type]


def _spec(source: str, *sinks: Sink, tmp_path: Path) -> PipelineSpec:
    if source == "replay":
        report = ReportSpec(ReplayStats(), io.StringIO(), io.StringIO(), json_path=str(tmp_path / "replay.json"))
        return PipelineSpec("replay", QUIET, report=report, sinks=sinks)
    return PipelineSpec(source, QUIET, per_rank=source == "diff", sinks=sinks)


@pytest.mark.parametrize("source", ["live", "replay", "diff"])
def test_a_toy_sink_registered_through_the_builder_gets_every_compile_then_flush_and_shutdown(source, tmp_path):
    calls: list[str] = []
    toy = Toy(calls)
    pipeline = build_pipeline(_spec(source, toy, tmp_path=tmp_path))
    assert pipeline.sinks[-1] is toy  # the caller's own, after the built ones
    _one_compile(pipeline)
    assert [r.id_str for r in toy.records] == ["0/0"] and toy.records[0].code.function == "f"
    assert pipeline.force_flush(5_000) is True
    pipeline.shutdown(5_000)
    assert calls == ["toy.on_finish 0/0", "toy.force_flush", "toy.shutdown"]
    assert 0 < toy.flush_timeouts[0] <= 5_000 and 0 < toy.shutdown_timeouts[0] <= 5_000


def test_each_pipeline_lists_its_sinks_in_one_place_reports_first():
    live = build_pipeline(PipelineSpec("live", Settings(metrics=False, cache_index="off", summary=("stderr",))))
    assert [type(s).__name__ for s in live.sinks] == ["RunSummary", "NearLimitWarning"]
    assert live.summary is live.sinks[0] and live.summary.destinations == ("stderr",)
    # the features' live states, beside the sinks: the key history (its index written at exit), the graph counters
    # and the start-up, where this process records one (an earlier test instrumented it)
    from torch_otel._features.startup import recorder

    assert {n: type(s).__name__ for n, s in live.states.items()} == {
        "cache_lookups": "CacheKeysState",
        "graph_calls": "GraphCallsState",
        **({"startup": "StartupState"} if recorder.current() is not None else {}),
    }
    report = ReportSpec(ReplayStats(), io.StringIO(), io.StringIO())
    replay = build_pipeline(PipelineSpec("replay", QUIET, report=report))
    assert [type(s).__name__ for s in replay.sinks] == ["ReplayReport"] and isinstance(replay.report, ReplayReport)
    assert list(replay.states) == ["cache_lookups"]  # a log holds no calls: graph calls has no state in a replay
    diff = build_pipeline(PipelineSpec("diff", QUIET, per_rank=True))
    assert [type(s).__name__ for s in diff.sinks] == ["RunSummary", "SummariesByRank"]
    assert isinstance(diff.by_rank, SummariesByRank) and list(diff.states) == ["cache_lookups"]
    with pytest.raises(ValueError, match="no such pipeline source"):
        build_pipeline(PipelineSpec("nowhere"))


def test_flush_and_shutdown_run_in_order_and_a_failing_sink_is_counted_once_and_stops_no_other():
    calls: list[str] = []
    first, broken, last = Toy(calls, "first"), Toy(calls, "broken", fail="shutdown"), Toy(calls, "last")
    pipeline = Pipeline([first, broken, last])
    before = errors.internal_errors().get("Toy.shutdown:RuntimeError", 0)
    pipeline.shutdown(1_000)
    assert calls == ["first.shutdown", "broken.shutdown", "last.shutdown"]
    assert errors.internal_errors()["Toy.shutdown:RuntimeError"] == before + 1
    pipeline.shutdown(1_000)  # safe twice: nothing more is called
    assert calls == ["first.shutdown", "broken.shutdown", "last.shutdown"]


def test_force_flush_says_false_when_a_sink_fails_or_does_not_finish():
    calls: list[str] = []
    assert Pipeline([Toy(calls, "a"), Toy(calls, "b", flush_result=False)]).force_flush(1_000) is False
    assert Pipeline([Toy(calls, "c", fail="force_flush"), Toy(calls, "d")]).force_flush(1_000) is False
    assert calls == ["a.force_flush", "b.force_flush", "c.force_flush", "d.force_flush"]  # a failure stops no other


class Slow(Toy):
    def shutdown(self, timeout_millis: int = 30_000) -> None:
        super().shutdown(timeout_millis)
        time.sleep(0.3)

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        super().force_flush(timeout_millis)
        time.sleep(0.3)
        return True


def test_the_deadline_is_shared_each_sink_has_what_is_left_and_every_one_still_shuts_down():
    calls: list[str] = []
    slow, after = Slow(calls, "slow"), Toy(calls, "after")
    Pipeline([slow, after]).shutdown(200)
    assert calls == ["slow.shutdown", "after.shutdown"]  # past the deadline, the next still writes what it holds
    assert slow.shutdown_timeouts[0] <= 200 and after.shutdown_timeouts == [0]
    calls.clear()
    assert Pipeline([Slow(calls, "slow"), Toy(calls, "after")]).force_flush(200) is False
    assert calls == ["slow.force_flush"]  # as the SDK's processors: time ran out before the next one's turn


class ToyState(FeatureState):
    """A feature's live state of a kind the package does not know: what the pipeline calls, in order."""

    collect_every_s = 5.0

    def __init__(self, calls: list[str], name: str = "state", fail: str | None = None) -> None:
        self.calls, self.name, self.fail = calls, name, fail
        self.shutdown_timeouts: list[int] = []

    def _call(self, what: str) -> None:
        self.calls.append(f"{self.name}.{what}")
        if self.fail == what:
            raise RuntimeError(f"a toy {what} failed")

    def on_start(self, record: CompileRecord) -> None:
        self._call("on_start")

    def on_finish(self, record: CompileRecord) -> None:
        self._call("on_finish")

    def observe(self, event: Any, torch_version: str | None) -> None:
        self._call(f"observe {event} {torch_version}")

    def collect(self) -> list[Any]:
        self._call("collect")
        return [("torch_compile_toy_things", ("0",), 3, None)]

    def handover(self) -> Any:
        self._call("handover")
        return "what the next one starts from"

    def after_fork(self) -> None:
        self._call("after_fork")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._call("force_flush")
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        self.shutdown_timeouts.append(timeout_millis)
        self._call("shutdown")


def test_the_run_summary_and_the_states_write_themselves_on_shutdown_after_a_last_collect(tmp_path):
    calls: list[str] = []
    out = tmp_path / "summary-{rank}.json"
    summary = RunSummary("live", destinations=(str(out),))
    pipeline = Pipeline([summary, Toy(calls)], states={"toy": ToyState(calls)})
    _one_compile(pipeline)
    assert not (tmp_path / "summary-0.json").exists()
    assert calls == ["state.on_start", "state.on_finish", "toy.on_finish 0/0"]  # a state sees a compile before the sinks
    calls.clear()
    pipeline.shutdown()
    assert json.loads((tmp_path / "summary-0.json").read_text())["compiles"] == 1
    assert calls == ["state.collect", "toy.shutdown", "state.shutdown"]  # collected first; the sinks, then the states


def test_a_state_is_collected_observes_hands_over_and_starts_afresh_after_a_fork_each_call_guarded():
    calls: list[str] = []
    broken, state = ToyState(calls, "broken", fail="collect"), ToyState(calls)
    pipeline = Pipeline([], states={"broken": broken, "toy": state})
    assert pipeline.state("toy") is state and pipeline.collect_every_s == 5.0
    before = errors.internal_errors().get("ToyState.collect:RuntimeError", 0)
    pipeline.collect()  # no metrics: read, and nothing applied; the broken one counted once, the next still read
    assert calls[-2:] == ["broken.collect", "state.collect"]
    assert errors.internal_errors()["ToyState.collect:RuntimeError"] == before + 1
    pipeline.assembler().observe("an artifact", "2.13.0")
    assert calls[-1] == "state.observe an artifact 2.13.0"
    assert pipeline.handover() == {"broken": "what the next one starts from", "toy": "what the next one starts from"}
    pipeline.after_fork()
    assert calls[-2:] == ["broken.after_fork", "state.after_fork"]
    assert pipeline.force_flush(1_000) is True and calls[-2:] == ["broken.force_flush", "state.force_flush"]


def test_the_states_share_the_sinks_deadline_and_each_still_shuts_down():
    calls: list[str] = []
    state = ToyState(calls)
    Pipeline([Slow(calls, "slow")], states={"toy": state}).shutdown(200)
    assert calls == ["state.collect", "slow.shutdown", "state.shutdown"] and state.shutdown_timeouts == [0]


def test_replay_s_report_writes_its_text_json_and_divergence_on_shutdown(tmp_path):
    text, err = io.StringIO(), io.StringIO()
    stats = ReplayStats(files=1, records=2)
    stats.record_types["chromium_event"] += 2
    stats.problems.append("x.log: cannot read (denied)")
    report = ReportSpec(stats, text, err, json_path=str(tmp_path / "r.json"), html=str(tmp_path / "r.html"))
    pipeline = build_pipeline(PipelineSpec("replay", QUIET, report=report))
    _one_compile(pipeline)
    assert text.getvalue() == "" and not (tmp_path / "r.json").exists()
    pipeline.shutdown()
    assert text.getvalue().startswith("replayed 1 file(s)") and "1 compile (1 frame)" in text.getvalue()
    assert err.getvalue().splitlines() == [
        "torch-otel replay: x.log: cannot read (denied)",
        f"compile time report written to {tmp_path / 'r.html'}",
    ]
    doc: dict[str, Any] = json.loads((tmp_path / "r.json").read_text())
    assert doc["compiles"] == 1 and doc["replay"]["records"] == 2 and doc["divergence"]["ranks"] == [0]
