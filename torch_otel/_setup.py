"""Build OpenTelemetry providers from the standard ``OTEL_*`` variables (for auto-activation).

Only used when the application has not set a global provider itself: the
bridge never replaces providers it did not create.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from ._file_exporter import OTLPJsonFileSpanExporter
from ._ids import UrandomIdGenerator
from ._internal import warn_once
from ._version import __version__

TRACE_EXPORTERS = ("otlp", "console", "none")
METRIC_EXPORTERS = ("prometheus", "otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
_TRUE = {"1", "true", "yes", "on"}


def sdk_disabled(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE


def _list(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> list[str]:
    raw = env.get(name)
    values = [v.strip().lower() for v in (raw if raw is not None else default).split(",") if v.strip()]
    out = []
    for v in values:
        if v in allowed:
            out.append(v)
        else:
            warn_once(f"{name}:{v}", "%s=%r: unknown exporter %r; use one of %s (ignoring it)", name, raw, v, ", ".join(allowed))
    return out


def job_resource(env: Mapping[str, str] | None = None) -> Resource:
    """Service name, host, process, rank/world size (torchrun), the elastic run id and the torch version."""
    env = os.environ if env is None else env
    attrs: dict[str, Any] = {
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "telemetry.distro.name": "torch-otel",
        "telemetry.distro.version": __version__,
    }
    try:
        from importlib.metadata import version

        attrs["torch.version"] = version("torch")
    except Exception:  # noqa: BLE001 - torch not installed (replay needs no torch)
        pass
    for var, key in (
        ("RANK", "torch.distributed.rank"),
        ("LOCAL_RANK", "torch.distributed.local_rank"),
        ("WORLD_SIZE", "torch.distributed.world_size"),
    ):
        v = env.get(var, "").strip()
        if v.isdigit():
            attrs[key] = int(v)
    if env.get("TORCHELASTIC_RUN_ID"):
        attrs["torch.elastic.run_id"] = env["TORCHELASTIC_RUN_ID"]
    return Resource.create(attrs)


def _otlp_span_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    proto = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip().lower()
    if proto not in PROTOCOLS:
        var = (
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
            if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            else "OTEL_EXPORTER_OTLP_PROTOCOL"
        )
        warn_once(
            f"proto:{proto}", "%s=%r is not supported; use grpc or http/protobuf (traces not exported over OTLP)", var, proto
        )
        return None
    try:
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            return GrpcExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    except Exception as exc:  # noqa: BLE001 - bad endpoint/headers/certificate: one line, go on
        warn_once(
            f"otlp:{exc}",
            "cannot set up the OTLP span exporter (%s); check OTEL_EXPORTER_OTLP_* (traces not exported over OTLP)",
            exc,
        )
        return None


def build_tracer_provider(env: Mapping[str, str] | None = None, traces_file: str | None = None) -> TracerProvider | None:
    """A TracerProvider with the exporters ``OTEL_TRACES_EXPORTER`` names, or None if there are none."""
    env = os.environ if env is None else env
    exporters: list[SpanExporter] = []
    for name in _list(env, "OTEL_TRACES_EXPORTER", "otlp", TRACE_EXPORTERS):
        if name == "otlp":
            e = _otlp_span_exporter(env)
            if e is not None:
                exporters.append(e)
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
    if traces_file:
        exporters.append(OTLPJsonFileSpanExporter(traces_file))
    if not exporters:
        return None
    provider = TracerProvider(resource=job_resource(env), id_generator=UrandomIdGenerator())
    for e in exporters:
        provider.add_span_processor(BatchSpanProcessor(e))
    return provider


def _otlp_metric_exporter(env: Mapping[str, str]) -> Any:
    var = (
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL" if env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") else "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    proto = (env.get(var) or "grpc").strip().lower()
    if proto not in PROTOCOLS:
        warn_once(
            f"proto:{proto}", "%s=%r is not supported; use grpc or http/protobuf (metrics not exported over OTLP)", var, proto
        )
        return None
    try:
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

            return GrpcExporter()
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return HttpExporter()
    except Exception as exc:  # noqa: BLE001 - bad endpoint/headers/certificate: one line, go on
        warn_once(
            f"otlpm:{exc}",
            "cannot set up the OTLP metric exporter (%s); check OTEL_EXPORTER_OTLP_* (metrics not exported over OTLP)",
            exc,
        )
        return None


def build_meter_provider(env: Mapping[str, str], exporters: list[str]) -> Any:
    """A MeterProvider pushing to the ``otlp``/``console`` exporters named, or None if none are.

    ``prometheus`` needs no reader: the bridge serves its prometheus_client
    registry directly (with exemplars), see :func:`start_prometheus_server`.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    readers = []
    for name in exporters:
        exporter = _otlp_metric_exporter(env) if name == "otlp" else ConsoleMetricExporter() if name == "console" else None
        if exporter is not None:
            readers.append(PeriodicExportingMetricReader(exporter))
    if not readers:
        return None
    return MeterProvider(metric_readers=readers, resource=job_resource(env))


def global_meter_provider_is_set() -> bool:
    from opentelemetry.metrics import _internal as metrics_internal

    return not isinstance(metrics.get_meter_provider(), metrics_internal._ProxyMeterProvider)


def global_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


LOG_EXPORTERS = ("otlp", "console", "none")


def _otlp_log_exporter(env: Mapping[str, str]) -> Any:
    var = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL" if env.get("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL") else "OTEL_EXPORTER_OTLP_PROTOCOL"
    proto = (env.get(var) or "grpc").strip().lower()
    if proto not in PROTOCOLS:
        warn_once(f"proto:{proto}", "%s=%r is not supported; use grpc or http/protobuf (logs not exported over OTLP)", var, proto)
        return None
    try:
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter

            return GrpcExporter()
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter

        return HttpExporter()
    except Exception as exc:  # noqa: BLE001
        warn_once(f"otlpl:{exc}", "cannot set up the OTLP log exporter (%s); check OTEL_EXPORTER_OTLP_* (logs not exported)", exc)
        return None


def build_logger_provider(env: Mapping[str, str]) -> Any:
    """A LoggerProvider for the exporters ``OTEL_LOGS_EXPORTER`` names, or None."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogExporter

    processors = []
    for name in _list(env, "OTEL_LOGS_EXPORTER", "none", LOG_EXPORTERS):
        exporter = _otlp_log_exporter(env) if name == "otlp" else ConsoleLogExporter() if name == "console" else None
        if exporter is not None:
            processors.append(BatchLogRecordProcessor(exporter))
    if not processors:
        return None
    provider = LoggerProvider(resource=job_resource(env))
    for p in processors:
        provider.add_log_record_processor(p)
    return provider


def global_logger_provider() -> Any:
    from opentelemetry._logs import _internal as logs_internal
    from opentelemetry._logs import get_logger_provider

    p = get_logger_provider()
    return None if isinstance(p, (logs_internal.ProxyLoggerProvider, logs_internal.NoOpLoggerProvider)) else p


def set_logger_provider(provider: Any) -> None:
    from opentelemetry._logs import set_logger_provider as _set

    _set(provider)


class Configured:
    """Providers and servers built from the environment, handed to the bridge (which shuts them down)."""

    def __init__(self) -> None:
        self.tracer_provider: Any = None
        self.meter_provider: Any = None
        self.logger_provider: Any = None
        self.owned: list[Any] = []
        self.on_first_compile: list[Any] = []


_configured: Configured | None = None


def configure_providers(env: Mapping[str, str] | None = None) -> Configured:
    """Set the global tracer and meter providers from ``OTEL_*``, unless the application already set them.

    Also prepares the Prometheus endpoint and the Pushgateway push. Both start
    working at the first compile, so a process that never compiles (a torchrun
    launcher, a helper script) binds no port and pushes nothing. Runs once per
    process: the ``opentelemetry-instrument`` configurator and
    ``torch_otel.auto`` share it.
    """
    global _configured
    if _configured is not None:
        return _configured
    from ._config import load_settings
    from ._exposition import LazyPrometheusServer, PushAtExit

    env = os.environ if env is None else env
    c = _configured = Configured()
    if sdk_disabled(env):
        return c
    settings = load_settings(env)
    if settings.capture == "off":
        return c
    if not global_provider_is_set():
        c.tracer_provider = build_tracer_provider(env, settings.traces_file)
        if c.tracer_provider is not None:
            trace.set_tracer_provider(c.tracer_provider)
            c.owned.append(c.tracer_provider)
    metric_exporters = _list(env, "OTEL_METRICS_EXPORTER", "otlp", METRIC_EXPORTERS) if settings.metrics else []
    if not global_meter_provider_is_set():
        c.meter_provider = build_meter_provider(env, metric_exporters)
        if c.meter_provider is not None:
            metrics.set_meter_provider(c.meter_provider)
            c.owned.append(c.meter_provider)
    if env.get("OTEL_LOGS_EXPORTER"):  # asked for explicitly: torch's compile warnings as log records
        c.logger_provider = global_logger_provider() or build_logger_provider(env)
        if c.logger_provider is not None and global_logger_provider() is None:
            set_logger_provider(c.logger_provider)
            c.owned.append(c.logger_provider)
    if "prometheus" in metric_exporters:
        server = LazyPrometheusServer(env)
        c.on_first_compile.append(server.start)
        c.owned.append(server)
    if settings.pushgateway_url and settings.metrics:
        push = PushAtExit(settings.pushgateway_url, settings.pushgateway_job, env)
        c.on_first_compile.append(push.arm)
        c.owned.append(push)
    return c


def configure_from_env(env: Mapping[str, str] | None = None, tracer_provider: Any = None, meter_provider: Any = None) -> Any:
    """Configure from ``OTEL_*``/``TORCH_OTEL_*`` and instrument. Returns the bridge, or None."""
    from ._bridge import flush_on_sigterm, instrument
    from ._config import load_settings

    env = os.environ if env is None else env
    if sdk_disabled(env):
        return None
    settings = load_settings(env)
    if settings.capture == "off":
        return None
    c = configure_providers(env)
    bridge = instrument(
        tracer_provider or c.tracer_provider,
        meter_provider or c.meter_provider,
        logger_provider=c.logger_provider,
        settings=settings,
        _owned=c.owned,
        _on_first_compile=c.on_first_compile,
    )
    if bridge is not None and settings.flush_on_sigterm:
        flush_on_sigterm()
    return bridge
