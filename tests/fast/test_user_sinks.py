"""Fast tier: the public extension point. A sink of the user's own (``torch_otel.Sink``) gets every finished compile as
the public record (``torch_otel.Compile``), typed, versioned and JSON-able; one that raises is counted once and stops
no other; the entry points' loader says in one line a sink ``TORCH_OTEL_SINKS`` names that is not installed. The slow
tier installs a real one as a package (tests/test_extending.py)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import torch_otel
from tests.fast.fastkit import cid, frame, metrics
from torch_otel._core import errors
from torch_otel._core.graph_breaks import graph_break_code
from torch_otel._core.settings import Settings, load_settings
from torch_otel._model.events import GraphBreakEvent
from torch_otel._pipeline.build import PipelineSpec, build_pipeline
from torch_otel._pipeline.installed_sinks import installed_sinks
from torch_otel._sinks.user_sinks import UserSinks

QUIET = Settings(metrics=False, cache_index="off")
GB_TYPE = "Call to `torch._dynamo.graph_break()`"


class Keep(torch_otel.Sink):
    def __init__(self, calls: list[str], name: str, fail: str | None = None) -> None:
        self.calls, self.name, self.fail = calls, name, fail
        self.records: list[torch_otel.Compile] = []

    def _call(self, what: str) -> None:
        self.calls.append(f"{self.name}.{what}")
        if self.fail == what:
            raise RuntimeError(f"{self.name} cannot {what}")

    def on_compile(self, record: torch_otel.Compile) -> None:
        self._call("on_compile")
        self.records.append(record)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._call("force_flush")
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        self._call("shutdown")


def _compiles(pipeline: Any) -> None:
    """A frame compile with a graph break; its recompile, which failed."""
    asm = pipeline.assembler()
    for ev in [
        *frame("0/0", 1_000, 9_000, ("bytecode_tracing", 1_500, 4_000), ("inductor_compile", 4_500, 8_500)),
        GraphBreakEvent(cid("0/0"), "graph_break()", GB_TYPE, "/w/model.py", 37, ts_ns=2_000),
        metrics("0/0", co_name="fwd", co_filename="/w/model.py", co_firstlineno=30, duration_us=7, inductor_fx_local_cache_hit_count=2),
        *frame("0/1", 10_000, 12_000),
        metrics("0/1", co_name="fwd", co_filename="/w/model.py", co_firstlineno=30, fail_type="TorchRuntimeError",
                recompile_reason="0/0: scale == 0.5  # y = x * scale  # model.py:31 in fwd"),
    ]:  # fmt: skip
        asm.feed(ev)  # type: ignore[arg-type]


def test_each_sink_gets_every_compile_as_the_public_record_and_a_failing_one_stops_no_other():
    calls: list[str] = []
    first, broken, last = Keep(calls, "first"), Keep(calls, "broken", fail="on_compile"), Keep(calls, "last")
    pipeline = build_pipeline(PipelineSpec("live", QUIET, sinks=(UserSinks([first, broken, last]),)))
    before = errors.internal_errors().get("sink Keep.on_compile:RuntimeError", 0)
    _compiles(pipeline)
    assert calls == ["first.on_compile", "broken.on_compile", "last.on_compile"] * 2
    assert errors.internal_errors()["sink Keep.on_compile:RuntimeError"] == before + 2  # counted, never raised
    ok, failed = last.records
    assert isinstance(ok, torch_otel.Compile) and ok == first.records[0]
    assert (ok.schema_version, ok.id, ok.kind, ok.attempt, ok.status, ok.error_type) == (1, "0/0", "frame", 0, "ok", None)
    assert (ok.function, ok.file, ok.line, ok.duration_s) == ("fwd", "/w/model.py", 30, 7e-6)
    assert [(p.name, p.start_unix_nano, p.end_unix_nano) for p in ok.phases] == [
        ("bytecode_tracing", 1_500, 4_000),
        ("inductor_compile", 4_500, 8_500),
    ]
    assert (ok.start_unix_nano, ok.end_unix_nano) == (1_000, 9_000)
    assert [(g.code, g.type, g.file, g.line, g.handled) for g in ok.graph_breaks] == [
        (graph_break_code(GB_TYPE), GB_TYPE, "/w/model.py", 37, True)
    ]
    assert [(c.cache, c.location, c.result, c.count) for c in ok.cache_requests] == [("fx_graph", "local", "hit", 2)]
    assert ok.torch_metrics["inductor_fx_local_cache_hit_count"] == 2 and "co_filename" not in ok.torch_metrics
    assert (failed.id, failed.status, failed.error_type) == ("0/1", "error", "TorchRuntimeError")
    # the reason as the spans carry it: without its value and source line (TORCH_OTEL_CAPTURE_PAYLOADS lets them out)
    assert failed.recompile_reason == "scale == <value>"
    doc = json.loads(json.dumps(ok.to_dict()))
    assert doc["phases"][1]["name"] == "inductor_compile" and doc["graph_breaks"][0]["line"] == 37
    with pytest.raises(AttributeError):
        ok.status = "error"  # type: ignore[misc]  # frozen
    calls.clear()
    assert pipeline.force_flush(1_000) is True
    pipeline.shutdown(1_000)
    assert calls == ["first.force_flush", "broken.force_flush", "last.force_flush"] + [
        "first.shutdown",
        "broken.shutdown",
        "last.shutdown",
    ]


def test_the_setting_chooses_the_installed_sinks_and_a_name_not_installed_is_one_line(caplog):
    assert load_settings({}).sinks is None and load_settings({"TORCH_OTEL_SINKS": "all"}).sinks is None
    assert load_settings({"TORCH_OTEL_SINKS": "none"}).sinks == ()
    assert load_settings({"TORCH_OTEL_SINKS": "jsonl, parquet"}).sinks == ("jsonl", "parquet")
    assert installed_sinks(()) == []
    with caplog.at_level(logging.WARNING, logger="torch_otel"):
        assert installed_sinks(("no_such_sink",)) == []
        assert installed_sinks(("no_such_sink",)) == []
    lines = [r.getMessage() for r in caplog.records if "no_such_sink" in r.getMessage()]
    assert len(lines) == 1 and "no installed package provides" in lines[0], lines


def test_a_feature_torch_otel_features_names_that_is_not_installed_is_one_line_and_the_others_load(caplog, monkeypatch):
    """The features' loader shares the sinks' scan of entry points: a name no package provides is one line naming the
    variable, and ``none`` loads none."""
    from torch_otel._features import registry

    monkeypatch.setenv("TORCH_OTEL_FEATURES", "none")
    assert registry._find_installed() == ()
    monkeypatch.setenv("TORCH_OTEL_FEATURES", "no_such_feature")
    with caplog.at_level(logging.WARNING, logger="torch_otel"):
        assert registry._find_installed() == ()
        assert registry._find_installed() == ()
    lines = [r.getMessage() for r in caplog.records if "no_such_feature" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("TORCH_OTEL_FEATURES names no_such_feature, which no installed"), lines
