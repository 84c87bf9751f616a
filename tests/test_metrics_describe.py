"""The bridge's Prometheus collectors name their families when registered (``describe``), not only when scraped.

prometheus_client learns a collector's names from ``describe()`` at registration: that is how it refuses a second
metric of the same name, and how ``/metrics?name[]=...`` finds the collector of a name. Each collector's
``describe()`` is every family its ``collect()`` can yield (name, type, help, no samples), before any compile.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, Counter, Gauge

import torch_otel
from torch_otel._sinks.metrics import PrometheusBackend, SelfMetrics, TorchCounters, series_store
from torch_otel._sinks.store import _SeriesTable


def _compile_some() -> None:
    """A compile, a recompile and a graph break: the counters of a run that did something."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin() + 1
        torch._dynamo.graph_break()
        return y * 2

    fn = torch.compile(f, backend="eager", dynamic=False)
    fn(torch.ones(3))
    fn(torch.ones(5))
    torch_otel.force_flush()


def _collectors(registry: CollectorRegistry) -> list[Any]:
    return list(registry._collector_to_names)  # prometheus_client keeps no public list of them


def _shape(families: Any) -> dict[str, tuple[str, str]]:
    return {f.name: (f.type, f.documentation) for f in families}


def test_describe_is_every_family_collect_yields_after_real_compiles(cap) -> None:  # type: ignore[no-untyped-def]
    _compile_some()
    assert cap.sample("torch_compile_compiles_total", rank="0", kind="frame", status="ok")
    assert cap.sample("torch_compile_graph_breaks_total", rank="0", reason="GB0025")  # torch._dynamo.graph_break()
    ours = [c for c in _collectors(cap.registry) if isinstance(c, (_SeriesTable, SelfMetrics, TorchCounters))]
    assert sorted(type(c).__name__ for c in ours) == ["SelfMetrics", "TorchCounters", "_SeriesTable"]
    for c in ours:
        described = list(c.describe())
        assert all(not f.samples for f in described), type(c).__name__
        assert _shape(described) == _shape(c.collect()), type(c).__name__
        assert len(described) == len(_shape(described))  # no family twice
    # every sample the registry serves after those compiles is under a name a collector described at registration,
    # so a query for that one name (/metrics?name[]=...) finds it
    samples = [s for fam in cap.registry.collect() for s in fam.samples]
    names = {s.name for s in samples}
    assert {"torch_compile_compiles_total", "torch_otel_dropped_total", "torch_compile_compiled_autograd_captures_total"} <= names
    for name in sorted(names):
        assert name in cap.registry._names_to_collectors, name
        served = [s for fam in cap.registry.restricted_registry([name]).collect() for s in fam.samples]
        assert served and {s.name for s in served} == {name}, name


def test_a_registry_that_saw_no_compile_already_knows_every_name_compiles_add(cap) -> None:  # type: ignore[no-untyped-def]
    fresh = CollectorRegistry()
    PrometheusBackend(fresh)
    known = set(fresh._names_to_collectors)
    _compile_some()
    served = {s.name for fam in cap.registry.collect() for s in fam.samples}
    assert served <= known, sorted(served - known)


@pytest.mark.parametrize(
    "second",
    [
        lambda r: Counter("torch_otel_dropped", "again", registry=r),
        lambda r: Counter("torch_otel_internal_errors", "again", registry=r),
        lambda r: Gauge("torch_compile_compiled_autograd_captures_total", "again", registry=r),
        lambda r: Counter("torch_compile_compiles", "again", ["rank"], registry=r),
        lambda r: Gauge("torch_compile_in_progress", "again", registry=r),
        lambda r: r.register(SelfMetrics()),
        lambda r: r.register(TorchCounters()),
        lambda r: r.register(series_store().numbers),
        lambda r: PrometheusBackend(r),
    ],
    ids=[
        "self-counter",
        "self-counter-unlabelled",
        "torch-counter",
        "table-counter",
        "table-gauge",
        "self",
        "torch",
        "table",
        "backend",
    ],
)
def test_a_second_metric_of_a_name_the_bridge_serves_is_refused_at_registration(second) -> None:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    PrometheusBackend(registry)
    before = set(registry._names_to_collectors)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        second(registry)
    assert set(registry._names_to_collectors) == before  # the refused one left nothing behind


def test_uninstrument_then_instrument_on_the_same_registry_registers_nothing_twice() -> None:
    registry = CollectorRegistry()
    provider = TracerProvider()
    ok = {"rank": "0", "kind": "frame", "status": "ok"}
    counts = []
    try:
        for _ in range(3):
            torch_otel.instrument(provider, registry=registry)
            _compile_some()
            torch_otel.uninstrument()
            torch._dynamo.reset()
            counts.append(registry.get_sample_value("torch_compile_compiles_total", ok))
        assert counts[0] and counts == [counts[0], 2 * counts[0], 3 * counts[0]], counts  # the same series, counting on
        assert [type(c).__name__ for c in _collectors(registry)].count("SelfMetrics") == 1
    finally:
        torch_otel.uninstrument()
        provider.shutdown()
