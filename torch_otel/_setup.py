"""Build OpenTelemetry providers from the standard ``OTEL_*`` variables (for auto-activation).

Only used when the application has not set a global provider itself: the
bridge never replaces providers it did not create.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
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


def global_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def start_prometheus_server(env: Mapping[str, str] | None = None, registry: Any = None) -> tuple[Any, int] | None:
    """Serve ``/metrics`` on OTEL_EXPORTER_PROMETHEUS_HOST:PORT (default 127.0.0.1:9464).

    A port in use gives one warning line and no server; training goes on.
    """
    from prometheus_client import REGISTRY, start_http_server

    env = os.environ if env is None else env
    host = (env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or "127.0.0.1").strip()
    raw_port = (env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or "9464").strip()
    if not raw_port.isdigit() or not 0 <= int(raw_port) <= 65535:
        warn_once(f"promport:{raw_port}", "OTEL_EXPORTER_PROMETHEUS_PORT=%r is not a port; use 0-65535 (using 9464)", raw_port)
        raw_port = "9464"
    port = int(raw_port)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry or REGISTRY)
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
    metrics = _list(env, "OTEL_METRICS_EXPORTER", "otlp", METRIC_EXPORTERS)
    unsupported = [m for m in metrics if m in ("otlp", "console")]
    if unsupported and env.get("OTEL_METRICS_EXPORTER"):
        warn_once(
            "metrics-otlp",
            "OTEL_METRICS_EXPORTER=%s: this version serves metrics with 'prometheus' only; %s is not supported yet",
            env.get("OTEL_METRICS_EXPORTER"),
            ", ".join(unsupported),
        )
    if "prometheus" in metrics:
        started = start_prometheus_server(env)
        if started is not None:
            owned.append(_ServerHandle(started[0]))
    return instrument(provider, settings=settings, _owned=owned)
