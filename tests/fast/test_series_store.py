"""One store of numbers for both metrics backends (torch_otel._sinks.store): a registry and a meter provider the
bridge built together serve one store, and a compile's observations are applied to it once. What each exposition
serves is what it served with a store of its own: the same Prometheus samples, the same OpenTelemetry points,
histograms with their exemplars among them. A backend asked for again keeps its store; a new partner gets its own."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from tests.fast.fastkit import KeptMetrics
from torch_otel._core.settings import Settings
from torch_otel._otel.meter_histograms import HistogramExporter, own, owned_histograms, owned_histograms_for
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.build import MetricsSpec, metrics_backends
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks import histograms as histograms_module
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
from torch_otel._sinks.otel_metrics import OTelBackend
from torch_otel._sinks.spans import SpanMapper

LOG = Path(__file__).resolve().parents[1] / "data" / "tlparse-corpus" / "multi_rank_runtime_rank_0.log.gz"


def _meter_provider() -> tuple[MeterProvider, KeptMetrics]:
    """A meter provider as the bridge builds its own: its histograms exported by the bridge."""
    kept = KeptMetrics()
    table = owned_histograms_for([kept], {})
    assert table is not None
    mp = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(HistogramExporter(kept, table), export_interval_millis=math.inf)]
    )
    own(mp, table)
    return mp, kept


def _replay(backends: list[Any]) -> None:
    """A real log's compiles (tlparse's corpus: 12 of them, runtime ones too) into the backends, with root spans (the
    histograms' exemplars)."""
    mapper = SpanMapper(TracerProvider().get_tracer("t"), Settings(), live=False)
    replay_file(LOG, [CompileMetrics(backends, run_id="r")], ReplayStats(), tracing=mapper)


def _prometheus(registry: CollectorRegistry) -> list[Any]:
    """Every sample of the compile series, the clock's readings and the exemplars' trace ids left out."""
    out = []
    for fam in registry.collect():
        if not fam.name.startswith("torch_compile_"):
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out.append((s.name, tuple(sorted(s.labels.items())), s.value, s.exemplar.value if s.exemplar else None))
    return sorted(out, key=repr)


def _otel(mp: MeterProvider, kept: KeptMetrics) -> dict[str, Any]:
    """Every point of the last export, the clock's readings and the exemplars' ids left out."""
    mp.force_flush()
    out: dict[str, Any] = {}
    for rm in kept.exports[-1].resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    key = (m.name, tuple(sorted(p.attributes.items())))
                    if hasattr(p, "bucket_counts"):
                        ex = sorted(e.value for e in p.exemplars)
                        out[repr(key)] = (p.count, p.sum, tuple(p.bucket_counts), p.min, p.max, ex)
                    else:
                        out[repr(key)] = p.value
    return out


def test_both_backends_built_together_serve_one_store_and_each_serves_what_it_would_alone(monkeypatch):
    registry, (mp, kept) = CollectorRegistry(), _meter_provider()
    prometheus, otel = metrics_backends(MetricsSpec(registry=registry, meter_provider=mp))
    assert isinstance(prometheus, PrometheusBackend) and isinstance(otel, OTelBackend)
    assert prometheus.store is otel.store and otel.record is None  # one store; the histograms exported from its cells

    observed = []
    observe_all = histograms_module.HistogramCells.observe_all

    def counted(self: Any, observations: Any) -> None:
        observed.extend(observations)
        observe_all(self, observations)

    monkeypatch.setattr(histograms_module.HistogramCells, "observe_all", counted)
    _replay([prometheus, otel])
    shared = len(observed)

    # the same log, each backend with a store of its own: the reference
    alone_registry, (alone_mp, alone_kept) = CollectorRegistry(), _meter_provider()
    alone = [
        PrometheusBackend(alone_registry),
        OTelBackend(alone_mp.get_meter("torch_otel", "1"), None, owned_histograms(alone_mp)),
    ]
    assert alone[0].store is not alone[1].store
    observed.clear()
    _replay(alone)
    assert shared and len(observed) == 2 * shared  # counted once for both, where two stores counted it twice

    assert _prometheus(registry) == _prometheus(alone_registry)
    served = _otel(mp, kept)
    assert served == _otel(alone_mp, alone_kept)
    phases = [v for k, v in served.items() if "torch_compile_phase_duration_seconds" in k]
    assert phases and all(p[5] for p in phases)  # exemplars: each histogram's from the compiles' root spans
    mp.shutdown()
    alone_mp.shutdown()


def test_a_backend_asked_for_again_keeps_its_store_and_a_new_meter_provider_gets_its_own():
    registry, (mp, _) = CollectorRegistry(), _meter_provider()
    first = metrics_backends(MetricsSpec(registry=registry, meter_provider=mp))
    mp2, kept2 = _meter_provider()
    again = metrics_backends(MetricsSpec(registry=registry, meter_provider=mp2))
    assert again[0] is first[0]  # the registry's backend, reused: prometheus_client refuses a second of a name
    assert again[1].store is not first[0].store
    _replay(first)
    _replay(again)
    key = {"rank": "0", "kind": "frame", "status": "ok"}
    both = registry.get_sample_value("torch_compile_compiles_total", key)
    second = _otel(mp2, kept2)[repr(("torch_compile_compiles", tuple(sorted(key.items()))))]
    assert both and second and both == 2 * second  # the registry served both replays, the new meter provider its own
    mp.shutdown()
    mp2.shutdown()
