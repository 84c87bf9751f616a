"""The one builder of pipelines: what live capture, ``torch-otel replay`` and ``torch-otel diff`` each need.

Each describes what it needs in a :class:`PipelineSpec`; :func:`build_pipeline` is the one place that makes the
features' live states (each feature's ``state``, torch_otel._features) and the sinks from it, and
:func:`metrics_backends` the one that builds metrics backends. The :class:`~torch_otel._pipeline.pipeline.Pipeline` it
returns owns them all and their lifecycle.

Sinks are listed so that what is written on this machine comes before what waits on the network: the run summary (or
replay's report) first, then the delivery of spans and metrics.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from .._analysis.recompile_guards import live_recompile_limit
from .._assemble.assembler import Tracing
from .._capture.mega_cache import LOADED
from .._core.errors import record_error
from .._core.settings import Settings
from .._features.feature import Feature, FeatureState, StateContext
from .._features.registry import features_or_default
from .._model.record import CompileRecord, Sink
from .._parse.trace_log import LOG_FILES, ReplayStats
from .._sinks.late_spans import EVERY, LateSpans
from .._sinks.logs import LogSink
from .._sinks.metrics import Backend, CompileMetrics, PrometheusBackend, series_store, series_table
from .._sinks.near_limit import NearLimitWarning
from .._sinks.otel_metrics import OTelBackend
from .._sinks.replay_report import ReplayReport
from .._sinks.summary import RunSummary, SummariesByRank
from .._version import __version__
from .pipeline import DEFAULT_TIMEOUT_MS, Pipeline

__all__ = [
    "MetricsSpec",
    "Pipeline",
    "PipelineSpec",
    "feature_states",
    "Push",
    "ReportSpec",
    "build_pipeline",
    "metrics_backends",
]


@dataclass(frozen=True)
class Push:
    """Replay: the registry pushed to a Prometheus Pushgateway at shutdown, when ``when()`` (the replay succeeded)."""

    url: str
    run: str
    when: Callable[[], bool]
    out: IO[str]
    err: IO[str]
    job: str = "torch_compile_replay"


@dataclass(frozen=True)
class MetricsSpec:
    """Where the metrics go: a prometheus_client ``registry`` and/or an OpenTelemetry ``meter_provider``.

    ``scope`` and ``scope_version`` name the meter; ``run_id`` labels the rank fingerprints (None: torchrun's
    ``TORCHELASTIC_RUN_ID``). ``owned``: the pipeline shuts the meter provider down (replay's own).
    """

    registry: Any = None
    meter_provider: Any = None
    scope: str = "torch_otel"
    scope_version: str | None = __version__
    run_id: str | None = None
    owned: bool = False
    push: Push | None = None


@dataclass(frozen=True)
class ReportSpec:
    """Replay's report: where its text, ``--json`` and ``--html`` go, and the reader's stats it tells of."""

    stats: ReplayStats
    text: IO[str]
    err: IO[str]
    json_path: str | None = None
    html: str | None = None
    capture_payloads: bool = False  # --payloads: recompile reasons as torch wrote them


@dataclass(frozen=True)
class PipelineSpec:
    """One pipeline, described: which source feeds it and what each sink needs (None or False: not built).

    ``source`` is ``"live"`` (the bridge: the near-limit warning comes with it, and a run summary when
    ``settings.summary`` names destinations or ``summary`` is given), ``"replay"`` (``report``: the summary, the
    divergence report and the reader's text) or ``"diff"`` (one run summary, and with ``per_rank`` one per rank;
    ``summary_source`` says what the summaries call their source). ``tracing`` builds each compile's trace in the
    derive step; ``spans`` (replay) delivers it. ``sinks`` are the caller's own, after the built ones.

    Each feature's live state is made with what the spec gives (torch_otel._features.feature.StateContext):
    ``baseline``, a previous run the user named (``replay --baseline``); ``previous``, by feature name, what the
    states of the pipeline before handed over (``Pipeline.handover``: the base side's, for a diff's new side); ``say``,
    where a state's one-line problems go (replay: its stderr). ``features``: the registry's table unless given.
    """

    source: str
    settings: Settings = field(default_factory=Settings)
    tracing: Tracing | None = None
    spans: Any = None  # replay's tracers (torch_otel._otel.replay_tracers.ReplayTracers)
    metrics: MetricsSpec | None = None
    logger_provider: Any = None
    summary: RunSummary | None = None  # live: the caller's, filled with every compile (instrument(summary=...))
    report: ReportSpec | None = None
    per_rank: bool = False
    summary_source: str = "replay"
    sinks: tuple[Sink, ...] = ()
    baseline: str | None = None
    previous: Mapping[str, Any] | None = None
    say: Callable[[str], None] | None = None
    features: tuple[Feature, ...] | None = None
    # live: the tracer provider's force_flush, and the late spans written between two (torch_otel._sinks.late_spans)
    flush_spans: Callable[[int], object] | None = None
    flush_every: int = EVERY


# -- the sinks the builder adds around the others' ---------------------------------------------------------------


class SpanDelivery(Sink):
    """Replay's spans, on their way: replay makes spans faster than an exporter sends them, so the batch queue is
    drained before it can overflow; at shutdown, an endpoint's TLS or protocol mix-up is one line, then the tracers'
    processors flush and stop."""

    def __init__(self, tracers: Any, every_spans: int = 1000) -> None:
        self.tracers = tracers
        self.every = every_spans
        self.pending = 0
        self.spans = 0  # every span the replay made (a compile's phases and its root)

    def on_finish(self, record: CompileRecord) -> None:
        n = len(record.phase_nodes())
        self.spans += n
        self.pending += n
        if self.pending >= self.every:
            self.pending = 0
            self.tracers.force_flush()

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        self.tracers.force_flush()
        return True

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        from .._otel.delivery import problems_at_exit, targets

        problems_at_exit(sorted(targets()))  # a TLS or protocol mix-up: one line now, not after the retries
        self.tracers.shutdown()


class MetricsDelivery(Sink):
    """Replay's metrics, on their way at shutdown: the meter provider it made, stopped (its last export), and the
    registry pushed to the Pushgateway when the replay succeeded."""

    def __init__(self, spec: MetricsSpec) -> None:
        self.spec = spec
        self._done = False

    def on_finish(self, record: CompileRecord) -> None:
        pass

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        if self._done:
            return
        self._done = True
        spec, push = self.spec, self.spec.push
        if spec.owned and spec.meter_provider is not None:
            spec.meter_provider.shutdown()
        if push is None or spec.registry is None or not push.when():
            return
        from prometheus_client import push_to_gateway

        try:
            push_to_gateway(push.url, push.job, spec.registry, grouping_key={"run": push.run}, timeout=10)
            print(f"metrics pushed to {push.url} (job {push.job}, run {push.run})", file=push.out)
        except Exception as exc:  # noqa: BLE001
            print(f"torch-otel replay: cannot push metrics to {push.url} ({exc}); check --pushgateway", file=push.err)


# -- the one place backends are built, and the one place sinks are listed ------------------------------------------

_backends: weakref.WeakKeyDictionary[Any, Backend] = weakref.WeakKeyDictionary()
_backends_lock = threading.Lock()


def metrics_backends(spec: MetricsSpec) -> list[Backend]:
    """The backends of ``spec``: prometheus_client's series on its registry, OpenTelemetry's instruments on a meter of
    its meter provider. One set per registry and per meter provider, whoever asks (prometheus_client refuses a
    second metric of one name), so instrumenting again reuses them. A registry and a meter provider first asked for
    together serve one store of numbers (torch_otel._sinks.store): each compile's observations are applied once for
    both."""
    from .._otel.meter_histograms import owned_histograms

    out: list[Backend] = []
    series = series_table()  # the record's own series and each added feature's, as the features' table stands
    with _backends_lock:
        prometheus = _backends.get(spec.registry) if spec.registry is not None else None
        otel = _backends.get(spec.meter_provider) if spec.meter_provider is not None else None
        # both new: one store for the two (a backend asked for before keeps its own, which others may serve)
        shared = (
            series_store(series)
            if spec.registry is not None and spec.meter_provider is not None and prometheus is None and otel is None
            else None
        )
        if spec.registry is not None:
            if prometheus is None:
                prometheus = _backends[spec.registry] = PrometheusBackend(spec.registry, series, store=shared)
            out.append(prometheus)
        if spec.meter_provider is not None:
            if otel is None:
                meter = spec.meter_provider.get_meter(spec.scope, spec.scope_version)
                histograms = owned_histograms(spec.meter_provider)
                otel = _backends[spec.meter_provider] = OTelBackend(meter, series, histograms, store=shared)
            out.append(otel)
    return out


def feature_states(spec: PipelineSpec, features: tuple[Feature, ...]) -> dict[str, FeatureState]:
    """Each feature's live state for the pipeline ``spec`` describes (a feature with none, or whose state could not be
    made, has none: counted and logged once, never raised)."""
    ctx = StateContext(
        spec.source,
        spec.settings,
        tracer=getattr(spec.tracing, "tracer", None),
        baseline=spec.baseline,
        logs=LOG_FILES,
        **({"say": spec.say} if spec.say is not None else {}),
    )
    previous = spec.previous or {}
    states: dict[str, FeatureState] = {}
    for f in features:
        if f.state is None:
            continue
        try:
            state = f.state(dataclasses.replace(ctx, previous=previous.get(f.name)))
        except Exception as exc:  # noqa: BLE001 - the pipeline goes on without it
            record_error(f"{f.name} state", exc)
            continue
        if state is not None:
            states[f.name] = state
    return states


def build_pipeline(spec: PipelineSpec) -> Pipeline:
    """The pipeline ``spec`` describes: the features' states, every sink, in the order their ``shutdown`` runs
    (module docstring)."""
    settings = spec.settings
    features = features_or_default(spec.features)
    if spec.source not in ("live", "replay", "diff"):
        raise ValueError(f"no such pipeline source: {spec.source!r}; use live, replay or diff")
    if spec.source == "replay" and spec.report is None:
        raise ValueError("a replay's pipeline needs its report (ReportSpec)")
    states = feature_states(spec, features)
    sinks: list[Sink] = []
    cache_loads, recompile_limit = None, None
    summary: RunSummary | None = None
    by_rank: SummariesByRank | None = None
    report: ReplayReport | None = None
    if spec.source == "live":
        cache_loads, recompile_limit = LOADED, live_recompile_limit
        summary = spec.summary
        if summary is None and settings.summary:
            summary = RunSummary("live", settings.capture_payloads, features=features)
        if summary is not None:
            summary.bind(states)  # the features' parts read their states (a summary the caller made has none yet)
            if settings.summary:
                summary.destinations = settings.summary  # TORCH_OTEL_SUMMARY: written at shutdown
            sinks.append(summary)
    elif spec.source == "replay":
        r = spec.report
        assert r is not None
        report = ReplayReport(r.stats, r.text, r.err, r.json_path, r.html, r.capture_payloads, states=states)
        summary = report.summary
        sinks.append(report)
    else:
        summary = RunSummary(spec.summary_source, features=features, states=states)
        sinks.append(summary)
        if spec.per_rank:
            by_rank = SummariesByRank(spec.summary_source)
            sinks.append(by_rank)
    spans = None
    if spec.spans is not None:
        spans = SpanDelivery(spec.spans)
        sinks.append(spans)
    metrics = None
    if spec.metrics is not None:
        backends = metrics_backends(spec.metrics)
        if backends:
            metrics = CompileMetrics(backends, run_id=spec.metrics.run_id, detail_ranks=settings.detail_ranks)
            sinks.append(metrics)
        if spec.metrics.owned or spec.metrics.push is not None:
            sinks.append(MetricsDelivery(spec.metrics))
    if spec.logger_provider is not None:
        sinks.append(
            LogSink(spec.logger_provider, settings.attribute_max_length, settings.redact_paths, not settings.capture_payloads)
        )
    if spec.source == "live":
        sinks.append(NearLimitWarning())  # one line per frame near the recompile limit
        tracer = getattr(spec.tracing, "tracer", None)
        if tracer is not None:  # the features' spans written at exit (each compiled graph's calls), in the compile's trace
            sinks.append(LateSpans(tracer, features, flush=spec.flush_spans, every=spec.flush_every))
    sinks.extend(spec.sinks)
    pipeline = Pipeline(
        sinks,
        tracing=spec.tracing,
        states=states,
        cache_loads=cache_loads,
        recompile_limit=recompile_limit,
        features=features,
    )
    pipeline.summary, pipeline.by_rank, pipeline.report, pipeline.metrics = summary, by_rank, report, metrics
    pipeline.spans = spans
    return pipeline
