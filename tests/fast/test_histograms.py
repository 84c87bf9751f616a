"""The bridge's own Prometheus histograms (torch_otel._sinks.histograms: the cells every backend reads, served by
``PrometheusHistograms``) against prometheus_client's ``Histogram``: the same observations give the same samples,
exemplars and exposition (only the times they were taken differ), values OpenTelemetry refuses (negative, infinite,
NaN) among them."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from torch_otel._sinks.histograms import HistogramCells, PrometheusHistograms
from torch_otel._sinks.metrics import DURATION_BUCKETS, GUARD_BUCKETS

HISTOGRAMS = (
    ("torch_compile_phase_duration_seconds", "Time in a phase.", "s", ("rank", "phase"), DURATION_BUCKETS),
    ("torch_compile_guards", "Guards.", "1", ("rank",), GUARD_BUCKETS),
)
LABELS = {"torch_compile_phase_duration_seconds": [("0", "dynamo"), ("1", "inductor")], "torch_compile_guards": [("0",), ("3",)]}
_bound = st.sampled_from([*DURATION_BUCKETS, *GUARD_BUCKETS])
values = st.one_of(
    _bound, st.floats(allow_nan=False, min_value=-5, max_value=1e5), st.sampled_from([math.inf, -math.inf, -0.0, -1.0])
)
observation = st.tuples(
    st.sampled_from([h[0] for h in HISTOGRAMS]), st.integers(0, 1), values, st.none() | st.integers(1, 2**128 - 1)
)


def _both() -> tuple[CollectorRegistry, dict[str, Any], CollectorRegistry, HistogramCells]:
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    theirs = {name: Histogram(name, doc, labels, buckets=b, registry=theirs_registry) for name, doc, _, labels, b in HISTOGRAMS}
    ours = HistogramCells(iter(HISTOGRAMS))  # as the store gives them: once through
    ours_registry.register(PrometheusHistograms(ours))
    return theirs_registry, theirs, ours_registry, ours


def _samples(registry: CollectorRegistry) -> list[Any]:
    """Every sample, the times masked: ``_created``'s value and each exemplar's timestamp."""
    out = []
    for fam in registry.collect():
        for s in fam.samples:
            ex = (s.exemplar.labels, s.exemplar.value) if s.exemplar else None
            value = None if s.name.endswith("_created") else ("nan" if s.value != s.value else s.value)
            out.append((fam.name, fam.type, fam.documentation, s.name, s.labels, value, ex))
    return out


def _masked_exposition(registry: CollectorRegistry) -> list[str]:
    lines = openmetrics_latest(registry).decode().splitlines()
    return [ln.split(" ")[0] if "_created" in ln else ln.rsplit(" ", 1)[0] if " # {" in ln else ln for ln in lines]


@settings(max_examples=150, deadline=None)
@given(st.lists(observation, max_size=40))
def test_the_same_observations_are_the_same_samples_exemplars_and_exposition(observations):
    theirs_registry, theirs, ours_registry, ours = _both()
    for name, which, value, trace in observations:
        labels = LABELS[name][which]
        hex_id = f"{trace:032x}" if trace is not None else None
        theirs[name].labels(*labels).observe(value, {"trace_id": hex_id} if hex_id else None)
        ours.observe(name, labels, value, (trace, 7) if trace is not None else None)
    assert _samples(ours_registry) == _samples(theirs_registry)
    assert _masked_exposition(ours_registry) == _masked_exposition(theirs_registry)


def test_nan_is_summed_and_counted_in_no_bucket_as_prometheus_client_does():
    theirs_registry, theirs, ours_registry, ours = _both()
    for v in (0.3, math.nan):
        theirs["torch_compile_guards"].labels("0").observe(v)
        ours.observe("torch_compile_guards", ("0",), v, None)
    assert _samples(ours_registry) == _samples(theirs_registry)


def test_the_registry_knows_every_name_before_the_first_observation():
    """A second metric of one of these names is refused, as it is for prometheus_client's own histograms."""
    registry = CollectorRegistry()
    registry.register(PrometheusHistograms(HistogramCells(HISTOGRAMS)))
    try:
        Histogram("torch_compile_guards", "again", registry=registry)
    except ValueError as exc:
        assert "Duplicated timeseries" in str(exc)
    else:
        raise AssertionError("a second torch_compile_guards was registered")


def test_a_forked_child_observes_and_scrapes_though_a_parents_thread_held_the_locks():
    """At a fork a parent's thread (the bridge's worker) may hold a backend's lock: the child's metrics take fresh
    ones (CompileMetrics.after_fork_in_child, which the pipeline calls in a forked child), and never wait on it."""
    import threading

    from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend

    registry = CollectorRegistry()
    backend = PrometheusBackend(registry)
    metrics = CompileMetrics([backend])
    for lock in (backend.store.numbers._lock, backend.store.histograms.lock, metrics._sampled_lock):
        lock.acquire()  # held, as a thread that no longer exists in the child would leave it
    metrics.after_fork_in_child()
    done = threading.Event()

    def child_work() -> None:
        backend.apply("torch_compile_phase_duration_seconds", ("0", "dynamo"), 0.5, (1, 2))
        backend.apply("torch_compile_compiles", ("0", "frame", "ok"), 1, None)
        metrics.apply_collected([])
        assert registry.get_sample_value("torch_compile_phase_duration_seconds_count", {"rank": "0", "phase": "dynamo"}) == 1
        done.set()

    threading.Thread(target=child_work, daemon=True).start()
    assert done.wait(10), "the child waited on a lock its parent's thread held"
