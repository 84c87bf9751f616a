"""The histograms of a meter provider the bridge built (torch_otel._otel.meter_histograms) against the OpenTelemetry
SDK's own ``Histogram`` instruments: the same observations, exported at the same moments, give the same points (counts,
sum, min, max, bounds, exemplars and their ids); only the clock's readings differ. And where a reader wants what the
bridge does not keep (delta, exponential buckets, exemplars always on), the SDK's instruments stay."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, ExponentialBucketHistogramAggregation

from tests.fast.fastkit import KeptMetrics
from torch_otel._otel.meter_histograms import HistogramExporter, owned_histograms_for
from torch_otel._sinks.metrics import DURATION_BUCKETS, GUARD_BUCKETS, SERIES
from torch_otel._sinks.otel_metrics import OTelBackend

NAMES = ("torch_compile_phase_duration_seconds", "torch_compile_frame_duration_seconds", "torch_compile_guards")
LABELS = {
    "torch_compile_phase_duration_seconds": [("0", "dynamo"), ("1", "inductor")],
    "torch_compile_frame_duration_seconds": [("0", "frame", "ok"), ("0", "backward", "failed")],
    "torch_compile_guards": [("0",), ("3",)],
}
_bound = st.sampled_from([*DURATION_BUCKETS, *GUARD_BUCKETS])
values = st.one_of(
    _bound,
    st.floats(allow_nan=False, min_value=-5, max_value=1e5),
    st.integers(0, 60_000),
    st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0]),
)
ids = st.none() | st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1))
step = st.one_of(st.tuples(st.just("observe"), st.sampled_from(NAMES), st.integers(0, 1), values, ids), st.just(("export",)))


Kept = KeptMetrics


def _provider(exporter: Any) -> MeterProvider:
    return MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)])


def _both() -> tuple[tuple[MeterProvider, OTelBackend, Kept], tuple[MeterProvider, OTelBackend, Kept]]:
    sdk_kept, ours_kept = Kept(), Kept()
    sdk_mp = _provider(sdk_kept)
    table = owned_histograms_for([ours_kept], {})
    assert table is not None
    ours_mp = _provider(HistogramExporter(ours_kept, table))
    sdk = OTelBackend(sdk_mp.get_meter("torch_otel", "1.0"), SERIES)
    ours = OTelBackend(ours_mp.get_meter("torch_otel", "1.0"), SERIES, table)
    for b in (sdk, ours):  # the first compile's build info, as the metrics sink applies it before any histogram
        b.apply("torch_compile_build_info", ("0", "2.13.0", "1.0"), 1, None)
    return (sdk_mp, sdk, sdk_kept), (ours_mp, ours, ours_kept)


def _histograms(metrics_data: Any) -> dict[str, Any]:
    """Each histogram of the torch_otel scope: its metadata and points, the clock's readings left out."""
    out: dict[str, Any] = {}
    for rm in metrics_data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if not hasattr(m.data, "aggregation_temporality") or m.name not in NAMES:
                    continue
                points = {}
                for p in m.data.data_points:
                    assert p.start_time_unix_nano <= p.time_unix_nano
                    exemplars = sorted((e.value, e.span_id, e.trace_id, e.filtered_attributes) for e in p.exemplars)
                    points[tuple(sorted(p.attributes.items()))] = (
                        p.count,
                        p.sum,
                        tuple(p.bucket_counts),
                        tuple(p.explicit_bounds),
                        p.min,
                        p.max,
                        exemplars,
                    )
                out[m.name] = (sm.scope.name, sm.scope.version, m.description, m.unit, m.data.aggregation_temporality, points)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_the_same_observations_are_the_same_points_and_exemplars_at_each_export(steps):
    (sdk_mp, sdk, sdk_kept), (ours_mp, ours, ours_kept) = _both()
    try:
        for s in [*steps, ("export",)]:
            if s[0] == "export":
                sdk_mp.force_flush()
                ours_mp.force_flush()
                continue
            _, name, which, value, exemplar = s
            for b in (sdk, ours):
                b.apply(name, LABELS[name][which], value, exemplar)
        assert len(sdk_kept.exports) == len(ours_kept.exports)
        for theirs, mine in zip(sdk_kept.exports, ours_kept.exports, strict=True):
            assert _histograms(mine) == _histograms(theirs)
    finally:
        sdk_mp.shutdown()
        ours_mp.shutdown()


def test_a_reader_that_wants_what_the_bridge_does_not_keep_keeps_the_sdks_histograms():
    assert owned_histograms_for([Kept()], {}) is not None
    assert owned_histograms_for([Kept(preferred_aggregation={Histogram: ExplicitBucketHistogramAggregation()})], {})
    delta = Kept(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    assert owned_histograms_for([Kept(), delta], {}) is None
    assert owned_histograms_for([Kept(preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()})], {}) is None
    bounds = ExplicitBucketHistogramAggregation(boundaries=(1.0, 2.0))
    assert owned_histograms_for([Kept(preferred_aggregation={Histogram: bounds})], {}) is None
    assert owned_histograms_for([Kept()], {"OTEL_METRICS_EXEMPLAR_FILTER": "always_on"}) is None
    off = owned_histograms_for([Kept()], {"OTEL_METRICS_EXEMPLAR_FILTER": "always_off"})
    assert off is not None and not off._exemplars


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"]
)
def test_the_otlp_exporters_settings_decide(monkeypatch, variable):
    """The OTLP exporter's own environment settings: its default keeps the bridge's histograms, delta or exponential
    buckets the SDK's."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    assert owned_histograms_for([OTLPMetricExporter(endpoint="127.0.0.1:9", insecure=True)], {}) is not None
    monkeypatch.setenv(variable, "delta" if "TEMPORALITY" in variable else "base2_exponential_bucket_histogram")
    assert owned_histograms_for([OTLPMetricExporter(endpoint="127.0.0.1:9", insecure=True)], {}) is None
