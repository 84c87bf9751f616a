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


class PushAtExit:
    """Pushes the registry to a Prometheus Pushgateway when the bridge shuts down (short jobs).

    Grouping key: ``job`` and ``rank``. One bounded attempt; a failure is one
    warning line.
    """

    def __init__(self, url: str, job: str, env: Mapping[str, str], registry: Any = None, timeout_s: float = 5.0) -> None:
        from prometheus_client import REGISTRY

        rank = env.get("RANK", "0").strip()
        self.url, self.job, self.timeout_s = url, job, timeout_s
        self.grouping_key = {"rank": rank if rank.isdigit() else "0"}
        self.registry = registry or REGISTRY

    def shutdown(self) -> None:
        from prometheus_client import push_to_gateway

        try:
            push_to_gateway(self.url, self.job, self.registry, grouping_key=self.grouping_key, timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - an unreachable gateway never fails the job
            warn_once(
                f"push:{self.url}",
                "cannot push metrics to the Pushgateway at %s (%s); check TORCH_OTEL_PUSHGATEWAY_URL",
                self.url,
                exc,
            )


def global_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def prometheus_port(env: Mapping[str, str]) -> int:
    """OTEL_EXPORTER_PROMETHEUS_PORT (default 9464) plus torchrun's LOCAL_RANK: one port per rank on a node."""
    raw = (env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or "9464").strip()
    if not raw.isdigit() or not 0 <= int(raw) <= 65535:
        warn_once(f"promport:{raw}", "OTEL_EXPORTER_PROMETHEUS_PORT=%r is not a port; use 0-65535 (using 9464)", raw)
        raw = "9464"
    port = int(raw)
    local_rank = env.get("LOCAL_RANK", "").strip()
    if port and local_rank.isdigit():
        port = min(65535, port + int(local_rank))
    return port


def start_prometheus_server(env: Mapping[str, str] | None = None, registry: Any = None) -> tuple[Any, int] | None:
    """Serve ``/metrics`` on OTEL_EXPORTER_PROMETHEUS_HOST:PORT (default 127.0.0.1:9464, + LOCAL_RANK).

    A port in use gives one warning line and no server; training goes on.
    """
    from prometheus_client import REGISTRY, start_http_server

    env = os.environ if env is None else env
    host = (env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or "127.0.0.1").strip()
    port = prometheus_port(env)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry or REGISTRY)
    except OSError as exc:
        warn_once(
            f"promserve:{host}:{port}",
            "cannot serve metrics on %s:%d (%s); set OTEL_EXPORTER_PROMETHEUS_PORT to a free port. Tracing goes on.",
            host,
            port,
            exc.strerror or exc,
        )
        return None
    return server, server.server_address[1]


class _ServerHandle:
    """Lets the bridge shut the metrics HTTP server down with its other resources."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def shutdown(self) -> None:
        try:
            self._server.shutdown()
            self._server.server_close()
        except Exception:  # noqa: BLE001
            pass


def configure_from_env(env: Mapping[str, str] | None = None) -> Any:
    """Configure from ``OTEL_*``/``TORCH_OTEL_*`` and instrument. Returns the bridge, or None."""
    from ._bridge import instrument
    from ._config import load_settings

    env = os.environ if env is None else env
    if sdk_disabled(env):
        return None
    settings = load_settings(env)
    if settings.capture == "off":
        return None
    owned: list[Any] = []
    provider = None
    if not global_provider_is_set():
        provider = build_tracer_provider(env, settings.traces_file)
        if provider is not None:
            trace.set_tracer_provider(provider)
            owned.append(provider)
    metric_exporters = _list(env, "OTEL_METRICS_EXPORTER", "otlp", METRIC_EXPORTERS) if settings.metrics else []
    meter_provider = None
    if not global_meter_provider_is_set():
        meter_provider = build_meter_provider(env, metric_exporters)
        if meter_provider is not None:
            metrics.set_meter_provider(meter_provider)
            owned.append(meter_provider)
    if "prometheus" in metric_exporters:
        started = start_prometheus_server(env)
        if started is not None:
            owned.append(_ServerHandle(started[0]))
    if settings.pushgateway_url and settings.metrics:
        owned.append(PushAtExit(settings.pushgateway_url, settings.pushgateway_job, env))
    return instrument(provider, meter_provider, settings=settings, _owned=owned)
