"""The rank sampler (OTEL_TRACES_SAMPLER=torch_otel_rank) on real compiles, in process: what it keeps, and why.

The same sampler on a real 3-rank torchrun job is in tests/test_divergence.py.
"""

from __future__ import annotations

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import torch_otel
from torch_otel._core.health import not_sampled
from torch_otel._otel.providers import build_tracer_provider
from torch_otel.sampling import SAMPLED_BECAUSE, RankSampler


@pytest.fixture
def sampled(monkeypatch):  # type: ignore[no-untyped-def]
    """The bridge on a provider whose sampler keeps rank 0's compiles, in a process that is rank 1."""
    monkeypatch.setenv("RANK", "1")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RankSampler("0"))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    torch_otel.instrument(provider, registry=registry)
    yield provider, exporter, registry
    torch_otel.uninstrument()
    provider.shutdown()


def test_a_further_rank_keeps_only_its_recompiles_and_failures_and_counts_the_rest(sampled):
    provider, exporter, registry = sampled
    before = sum(not_sampled().values())
    torch._dynamo.config.automatic_dynamic_shapes = False
    try:
        f = torch.compile(lambda x: x.sin() + 1, backend="eager")
        f(torch.randn(4))
        f(torch.randn(5))  # a recompile: kept

        def broken(gm, example_inputs):  # noqa: ANN001, ANN202
            raise RuntimeError("a backend that fails")

        with pytest.raises(Exception, match="a backend that fails"):
            torch.compile(lambda x: x.cos() * 3, backend=broken)(torch.randn(4))
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = True
    with provider.get_tracer("user").start_as_current_span("train_step"):
        pass  # the user's own spans: sampled as the SDK's default would
    torch_otel.force_flush()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.attributes and "torch.compile.kind" in s.attributes]
    assert sorted(s.attributes[SAMPLED_BECAUSE] for s in roots) == ["failed", "recompile"]
    assert {s.attributes["torch.compile.id"] for s in roots} == {"0/1", "1/0"}
    assert "train_step" in {s.name for s in spans}
    # the dropped compile built no span at all, and is counted
    kept = {r.context.trace_id for r in roots}
    # the process's one start-up trace is no compile's: the sampler leaves it to the SDK's default, as the user's spans,
    # and it is there only where this process's start-up ended during the test
    own = ("train_step", "torch.startup")
    stray = [(s.name, dict(s.attributes or {})) for s in spans if not s.name.startswith(own) and s.context.trace_id not in kept]
    assert not stray, stray
    assert sum(not_sampled().values()) - before == 1
    assert registry.get_sample_value("torch_otel_compiles_not_sampled_total", {"kind": "frame"}) >= 1
    # metrics cover every compile, sampled or not
    assert registry.get_sample_value("torch_compile_compiles_total", {"rank": "1", "kind": "frame", "status": "ok"}) == 2


def test_with_traces_off_no_compile_counts_as_not_sampled_and_a_sampler_that_drops_one_does():
    """torch_otel_compiles_not_sampled_total counts what a sampler dropped, which a user can act on (lower the sampling);
    with no tracer provider at all (traces off, OTEL_TRACES_EXPORTER=none) no trace was to be made: nothing counts."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    for provider, dropped in ((None, 0), (TracerProvider(sampler=ALWAYS_OFF), 1)):
        registry = CollectorRegistry()
        before = sum(not_sampled().values())
        torch_otel.instrument(provider, registry=registry)  # None: the global provider, which nobody set (traces off)
        try:
            torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.randn(3))
            torch_otel.force_flush()
            assert sum(not_sampled().values()) - before == dropped, provider
            compiled = registry.get_sample_value("torch_compile_compiles_total", {"rank": "0", "kind": "frame", "status": "ok"})
            assert compiled == 1  # the metrics count the compile either way
        finally:
            torch_otel.uninstrument()
            torch._dynamo.reset()


def test_slow_compiles_of_any_rank_are_kept():
    sampler = RankSampler("0", slow_factor=3.0, slow_min_s=1.0)

    def why(seconds: float, rank: int = 5) -> str | None:
        return sampler.reason(
            {"torch.compile.kind": "frame", "torch.compile.duration_s": seconds, "torch.distributed.rank": rank}
        )

    assert [why(s) for s in (0.8, 0.9, 1.0, 1.1)] == [None] * 4  # usual compiles of a further rank
    assert why(2.0) is None  # slower, but not 3x the median
    assert why(3.5) == "slow"
    assert why(0.5, rank=0) == "rank"
    assert sampler.reason(
        {"torch.compile.kind": "frame", "error.type": "Unsupported", "torch.compile.recompile_limit_exceeded": True}
    ) == ("recompile_limit")


def test_the_sampler_is_named_in_the_standard_setting(monkeypatch, caplog):
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "torch_otel_rank", "OTEL_TRACES_SAMPLER_ARG": "0,%8"}
    provider = build_tracer_provider(env)
    assert isinstance(provider.sampler, RankSampler) and 8 in provider.sampler.ranks and 9 not in provider.sampler.ranks
    provider.shutdown()
    env["OTEL_TRACES_SAMPLER_ARG"] = "zero"
    with caplog.at_level("WARNING", logger="torch_otel"):
        provider = build_tracer_provider(env)
    assert not isinstance(provider.sampler, RankSampler)
    (line,) = [r.getMessage() for r in caplog.records if "OTEL_TRACES_SAMPLER" in r.getMessage()]
    assert line.startswith("OTEL_TRACES_SAMPLER='torch_otel_rank' could not be built") and "'zero'" in line
    provider.shutdown()
