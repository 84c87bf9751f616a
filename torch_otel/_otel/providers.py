"""Build OpenTelemetry providers from the standard ``OTEL_*`` variables (for auto-activation).

Only used when the application has not set a global provider itself: the
bridge never replaces providers it did not create.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from .._core.errors import warn_once
from .._core.import_watch import sdk_disabled
from .._core.ranks import env_rank
from .._core.settings import SDK_SAMPLERS, Settings, bad_sdk_values_hidden, batch_sizes, load_settings, url_problem
from .._version import __version__, torch_version
from .ids import UrandomIdGenerator
from .nothing_configured import ClosingLine, nothing_configured
from .otlp_json import OTLPJsonFileSpanExporter

TRACE_EXPORTERS = ("otlp", "console", "none")
METRIC_EXPORTERS = ("prometheus", "otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")


def exporter_names(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> list[str]:
    """The exporters an ``OTEL_*_EXPORTER`` variable names; an unknown one is a line and left out."""
    raw = env.get(name)
    # an empty value means unset, as the OpenTelemetry specification has it: the default
    values = [v.strip().lower() for v in (raw if raw and raw.strip() else default).split(",") if v.strip()]
    out = []
    for v in values:
        if v in allowed:
            out.append(v)
        else:
            warn_once(f"{name}:{v}", "%s=%r: unknown exporter %r; use one of %s (ignoring it)", name, raw, v, ", ".join(allowed))
    return out


class HashedOnce(Resource):
    """A resource whose hash is worked out once. The OTLP encoder groups the spans of each export by resource, so it
    hashes the resource of every span it sends, and the SDK's hash JSON-encodes every attribute each time (26 µs
    here, more than the rest of a span's encoding). A resource never changes after it is made."""

    _hash: int | None = None

    @classmethod
    def of(cls, resource: Resource) -> HashedOnce:
        return cls(resource.attributes, resource.schema_url)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = super().__hash__()
        return self._hash


def job_resource(env: Mapping[str, str] | None = None) -> Resource:
    """Service name, host, process, rank/world size (torchrun), the elastic run id and the torch version."""
    env = os.environ if env is None else env
    attrs: dict[str, Any] = {
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "telemetry.distro.name": "torch-otel",
        "telemetry.distro.version": __version__,
    }
    found = torch_version()
    if found != "unknown":  # torch not installed: replay needs none
        attrs["torch.version"] = found
    rank = env_rank(env, default=-1)
    if rank >= 0:
        attrs["torch.distributed.rank"] = rank
    for var, key in (
        ("LOCAL_RANK", "torch.distributed.local_rank"),
        ("WORLD_SIZE", "torch.distributed.world_size"),
    ):
        v = env.get(var, "").strip()
        if v.isdigit():
            attrs[key] = int(v)
    if env.get("TORCHELASTIC_RUN_ID"):
        attrs["torch.elastic.run_id"] = env["TORCHELASTIC_RUN_ID"]
    # The SDK logs each malformed OTEL_RESOURCE_ATTRIBUTES entry at every call; it is reported once
    # by the settings check instead.
    quiet = [logging.getLogger(n) for n in ("opentelemetry.sdk.resources", "opentelemetry.attributes")]
    for lg in quiet:
        lg.addFilter(_drop_all)
    try:
        return HashedOnce.of(Resource.create(attrs))
    finally:
        for lg in quiet:
            lg.removeFilter(_drop_all)


def _drop_all(record: logging.LogRecord) -> bool:
    return False


_EXPORTER_CLASSES = {
    ("traces", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("traces", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    ("metrics", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
    ("metrics", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
    ("logs", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    ("logs", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
}
_HEADER_KEY = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


def _var(env: Mapping[str, str], signal: str, what: str) -> tuple[str, str | None]:
    """The per-signal variable if set, else the generic one: (name, value)."""
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_{what}"
    if env.get(specific):
        return specific, env[specific]
    generic = f"OTEL_EXPORTER_OTLP_{what}"
    return generic, env.get(generic)


def otlp_named(env: Mapping[str, str], signal: str) -> bool:
    """Whether the user asked for OTLP for ``signal``: its ``OTEL_<SIGNAL>_EXPORTER`` or an OTLP endpoint variable is set.

    Otherwise an OTLP exporter goes to OpenTelemetry's default endpoint (``localhost:4317``) because nothing else
    was said, and finding no collector there is not an error (docs/configuration.md#with-nothing-configured).
    """
    names = (f"OTEL_{signal.upper()}_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return any((env.get(n) or "").strip() for n in names)


def otlp_problem(env: Mapping[str, str], signal: str) -> tuple[str, str] | tuple[None, str]:
    """(a one-line problem, or None; the endpoint) for the OTLP settings of one signal. Never quotes header values."""
    name, proto = _var(env, signal, "PROTOCOL")
    proto = (proto or "grpc").strip().lower()
    if proto not in PROTOCOLS:
        return f"{name}={proto!r} is not an OTLP protocol; use grpc or http/protobuf", ""
    name, endpoint = _var(env, signal, "ENDPOINT")
    default = "http://localhost:4317" if proto == "grpc" else "http://localhost:4318"
    endpoint = (endpoint or default).strip()
    # a bare word ("notaurl") is no endpoint: a URL has a scheme, or at least a host and a port
    why = url_problem(endpoint)
    if why is None and (" " in endpoint or ("://" not in endpoint and ":" not in endpoint)):
        why = "is not a URL"
    if why is not None:
        return f"{name}={endpoint!r} {why}; use e.g. {default}", endpoint
    name, headers = _var(env, signal, "HEADERS")
    for pair in (headers or "").split(","):
        if not pair.strip():
            continue
        key, sep, _value = pair.partition("=")
        if not sep or not _HEADER_KEY.match(key.strip()):
            return f"{name} is not a list of key=value pairs (value not shown); use e.g. authorization=Bearer%20TOKEN", endpoint
    name, timeout = _var(env, signal, "TIMEOUT")
    if timeout:
        try:
            ok = float(timeout) > 0
        except ValueError:
            ok = False
        if not ok:
            return f"{name}={timeout!r} is not a positive number", endpoint
    name, compression = _var(env, signal, "COMPRESSION")
    if compression and compression.strip().lower() not in ("gzip", "deflate", "none"):
        return f"{name}={compression!r} is not a compression; use gzip, deflate or none", endpoint
    for what in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"):
        name, path = _var(env, signal, what)
        if path and not os.access(path, os.R_OK):
            return f"{name}={path!r} is not a readable file; give the path of a PEM file", endpoint
    return None, endpoint


def otlp_exporter(env: Mapping[str, str], signal: str) -> Any:
    """The OTLP exporter for ``signal`` (traces, metrics, logs), wrapped to count what it drops; None if misconfigured."""
    import importlib

    from .delivery import GuardedMetricExporter, GuardedSpanExporter, guarded_log_exporter, quiet_exporter_logs
    from .wire import use_fast_encoding

    problem, endpoint = otlp_problem(env, signal)
    if problem is not None:
        warn_once(f"otlp:{problem}", "%s; not exporting over OTLP until it is fixed", problem)
        return None
    proto_var, proto = _var(env, signal, "PROTOCOL")
    proto = (proto or "grpc").strip().lower()
    module, cls = _EXPORTER_CLASSES[(signal, proto)]
    cafile = _var(env, signal, "CERTIFICATE")[1] or None
    target, kwargs = _transport(env, signal, proto, proto_var, endpoint, cafile)
    try:
        if proto == "grpc":
            _import_grpc_quietly()
        exporter_class = getattr(importlib.import_module(module), cls)

        def factory() -> Any:  # a new session per exporter: a forked child must not share its parent's sockets
            if cafile and proto == "http/protobuf":
                return exporter_class(session=_ca_respecting_session(), **kwargs)
            made = exporter_class(**kwargs)
            if signal == "traces" and proto == "grpc":
                use_fast_encoding(made)  # the same message, encoded in a quarter of the time (torch_otel._otel.wire)
            return made

        exporter: Any
        if signal == "traces":
            exporter = GuardedSpanExporter(factory, target)
        elif signal == "metrics":
            exporter = GuardedMetricExporter(factory, target)
        else:
            exporter = guarded_log_exporter(factory, target)
    except Exception as exc:  # noqa: BLE001 - anything the exporter itself rejects: one line, go on
        warn_once(f"otlp:{signal}:{exc}", "cannot set up the OTLP %s exporter (%s); check OTEL_EXPORTER_OTLP_*", signal, exc)
        return None
    quiet_exporter_logs()
    return exporter


_SIGNAL_PATHS = {"traces": "v1/traces", "metrics": "v1/metrics", "logs": "v1/logs"}


def _transport(
    env: Mapping[str, str], signal: str, proto: str, proto_var: str, endpoint: str, cafile: str | None
) -> tuple[Any, dict[str, Any]]:
    """How the exporter reaches ``endpoint``: its :class:`Target`, and the arguments the exporter needs for it.

    ``host:port`` (no scheme) means plaintext, as ``http://host:port`` (docs/configuration.md). The OTLP gRPC
    exporter alone would speak TLS to it, so it gets ``insecure=True``, unless an ``OTEL_EXPORTER_OTLP_*INSECURE``
    variable says otherwise or a CA file is given (both ask for TLS); the OTLP/HTTP exporter gets the ``http://``
    URL (alone it could not send to an address without a scheme).
    """
    from .delivery import Target

    kwargs: dict[str, Any] = {}
    scheme = endpoint.split("://", 1)[0].lower() if "://" in endpoint else ""
    insecure_var = None
    if proto == "grpc":
        tls = scheme == "https"
        if not scheme:
            insecure_var, insecure = _var(env, signal, "INSECURE")
            if insecure is not None and insecure.strip():
                tls = insecure.strip().lower() != "true"
            elif cafile:
                tls = True
            else:
                kwargs["insecure"] = True
            if not tls or insecure is None or not insecure.strip():
                insecure_var = None  # the fix to name is http://, not the variable
    else:
        tls = scheme == "https"
        if not scheme:
            name = _var(env, signal, "ENDPOINT")[0]
            base = f"http://{endpoint}"
            kwargs["endpoint"] = (
                base if name != "OTEL_EXPORTER_OTLP_ENDPOINT" else f"{base.removesuffix('/')}/{_SIGNAL_PATHS[signal]}"
            )
    named = otlp_named(env, signal)
    return Target(endpoint, cafile, proto, proto_var, tls, insecure_var, _headers(env, signal), named), kwargs


def _headers(env: Mapping[str, str], signal: str) -> tuple[tuple[str, str], ...]:
    """The exporter's headers as the SDK reads them (``key=value`` pairs, comma-separated, URL-encoded values)."""
    from urllib.parse import unquote

    out = []
    for pair in (_var(env, signal, "HEADERS")[1] or "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            out.append((key.strip().lower(), unquote(value.strip())))
    return tuple(out)


def _import_grpc_quietly() -> None:
    """Import grpc with its C core's own log lines off, unless the application imported it or set GRPC_VERBOSITY.

    gRPC's C core prints each failed connection attempt to stderr itself (a TLS handshake with a plaintext
    collector: a ``Handshake failed`` line per retry), unless ``GRPC_VERBOSITY`` says otherwise, and reads that
    variable once, as grpc is first imported. The bridge reports a failed export in one line, so when it is the one
    importing grpc it does so with ``GRPC_VERBOSITY=NONE``, then removes the variable again (the processes the
    application starts get its environment as it was).
    """
    import importlib
    import sys

    if "grpc" in sys.modules or "GRPC_VERBOSITY" in os.environ:
        return
    os.environ["GRPC_VERBOSITY"] = "NONE"
    try:
        importlib.import_module("grpc")
    finally:
        os.environ.pop("GRPC_VERBOSITY", None)


def _ca_respecting_session() -> Any:
    """A requests session that keeps the CA file the OTLP/HTTP exporter sets on it.

    requests lets ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` from the environment
    replace a session's ``verify`` (requests issue 3829), so on machines that
    set them OTEL_EXPORTER_OTLP_CERTIFICATE would be silently ignored.
    """
    import requests

    class Session(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if isinstance(self.verify, str) and verify in (None, True):
                settings["verify"] = self.verify
            return settings

    return Session()


def build_tracer_provider(env: Mapping[str, str] | None = None, traces_file: str | None = None) -> TracerProvider | None:
    """A TracerProvider with the exporters ``OTEL_TRACES_EXPORTER`` names, or None if there are none."""
    env = os.environ if env is None else env
    processors = build_span_processors(env, traces_file)
    if not processors:
        return None
    provider = TracerProvider(
        resource=job_resource(env), id_generator=UrandomIdGenerator(), shutdown_on_exit=False, sampler=sampler_from_env(env)
    )
    for p in processors:
        provider.add_span_processor(p)
    return provider


def sampler_from_env(env: Mapping[str, str]) -> Any:
    """The sampler ``OTEL_TRACES_SAMPLER`` names when it is not one of the SDK's own (``torch_otel_rank``), else None.

    Found, as ``opentelemetry-instrument`` finds it, under the ``opentelemetry_traces_sampler`` entry point and built
    with ``OTEL_TRACES_SAMPLER_ARG``. None leaves the SDK to read the setting itself.
    """
    name = (env.get("OTEL_TRACES_SAMPLER") or "").strip()
    if not name or name.lower() in SDK_SAMPLERS:
        return None
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="opentelemetry_traces_sampler") if ep.name == name]
    if not found:
        return None  # reported with the other bad SDK values (_config.sdk_env_problems)
    try:
        return found[0].load()(env.get("OTEL_TRACES_SAMPLER_ARG"))
    except Exception as exc:  # noqa: BLE001 - a broken sampler must not stop tracing
        message = f"OTEL_TRACES_SAMPLER={name!r} could not be built ({type(exc).__name__}: {exc}); using the SDK's default"
        warn_once(message, "%s", message)
        return None


def build_span_processors(env: Mapping[str, str] | None = None, traces_file: str | None = None) -> list[BatchSpanProcessor]:
    """One batch processor per exporter ``OTEL_TRACES_EXPORTER`` names (a traces file first)."""
    env = os.environ if env is None else env
    exporters: list[SpanExporter] = []
    if traces_file:  # first: flushed (in order) before a network exporter that may be down or slow
        exporters.append(OTLPJsonFileSpanExporter(traces_file))
    for name in exporter_names(env, "OTEL_TRACES_EXPORTER", "otlp", TRACE_EXPORTERS):
        if name == "otlp":
            e = otlp_exporter(env, "traces")
            if e is not None:
                exporters.append(e)
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
    queue, batch = batch_sizes(env, "OTEL_BSP")
    return [BatchSpanProcessor(e, max_queue_size=queue, max_export_batch_size=batch) for e in exporters]


def build_meter_provider(
    env: Mapping[str, str],
    exporters: list[str],
    extra_resource: Mapping[str, str] | None = None,
    resource: Resource | None = None,
) -> Any:
    """A MeterProvider pushing to the ``otlp``/``console`` exporters named, or None if none are.

    ``prometheus`` needs no reader: the bridge serves its prometheus_client
    registry directly (with exemplars), see :func:`start_prometheus_server`.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    from .meter_histograms import HistogramExporter, own, owned_histograms_for

    made = []
    for name in exporters:
        exporter = otlp_exporter(env, "metrics") if name == "otlp" else ConsoleMetricExporter() if name == "console" else None
        if exporter is not None:
            made.append(exporter)
    if not made:
        return None
    # the histograms kept by the bridge and added to each export, where that gives what the SDK's would
    histograms = owned_histograms_for(made)
    if histograms is not None:
        made = [HistogramExporter(e, histograms) for e in made]
    readers = [PeriodicExportingMetricReader(e) for e in made]
    resource = HashedOnce.of((resource or job_resource(env)).merge(Resource(dict(extra_resource or {}))))
    provider = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)
    if histograms is not None:
        own(provider, histograms)
    return provider


def global_meter_provider_is_set() -> bool:
    from opentelemetry.metrics import _internal as metrics_internal

    return not isinstance(metrics.get_meter_provider(), metrics_internal._ProxyMeterProvider)


def global_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


LOG_EXPORTERS = ("otlp", "console", "none")


def build_logger_provider(env: Mapping[str, str]) -> Any:
    """A LoggerProvider for the exporters ``OTEL_LOGS_EXPORTER`` names, or None."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    processors = []
    for name in exporter_names(env, "OTEL_LOGS_EXPORTER", "none", LOG_EXPORTERS):
        exporter = otlp_exporter(env, "logs") if name == "otlp" else _console_log_exporter() if name == "console" else None
        if exporter is not None:
            queue, batch = batch_sizes(env, "OTEL_BLRP")
            processors.append(BatchLogRecordProcessor(exporter, max_queue_size=queue, max_export_batch_size=batch))
    if not processors:
        return None
    provider = LoggerProvider(resource=job_resource(env), shutdown_on_exit=False)
    for p in processors:
        provider.add_log_record_processor(p)
    return provider


def _console_log_exporter() -> Any:
    """The SDK's console log exporter: ``ConsoleLogRecordExporter`` where the SDK has it (``ConsoleLogExporter``,
    the name older SDKs have, is deprecated there and warns when built)."""
    from opentelemetry.sdk._logs import export

    cls = getattr(export, "ConsoleLogRecordExporter", None)
    if cls is None:  # an SDK from before the rename
        cls = export.ConsoleLogExporter
    return cls()


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
        self.closing_line: Any = (
            None  # nothing configured: the ClosingLine that says where things went (torch_otel._otel.nothing_configured)
        )


_configured: Configured | None = None


def configure_providers(env: Mapping[str, str] | None = None, settings: Settings | None = None) -> Configured:
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
    env = os.environ if env is None else env
    c = _configured = Configured()
    if sdk_disabled(env):
        return c
    settings = settings or load_settings(env)
    if settings.capture == "off":
        return c
    with bad_sdk_values_hidden(env):
        _build(env, settings, c)
    return c


def _build(env: Mapping[str, str], settings: Settings, c: Configured) -> None:
    from .exposition import LazyPrometheusServer, PushAtExit

    if not global_provider_is_set():
        c.tracer_provider = build_tracer_provider(env, settings.traces_file)
        if c.tracer_provider is not None:
            trace.set_tracer_provider(c.tracer_provider)
            c.owned.append(c.tracer_provider)
    metric_exporters = exporter_names(env, "OTEL_METRICS_EXPORTER", "otlp", METRIC_EXPORTERS) if settings.metrics else []
    # While OTEL_METRICS_EXPORTER is unset, its standard default (otlp) stands and /metrics is served on 127.0.0.1
    # as well: what makes a run with nothing configured show its metrics (docs/configuration.md#with-nothing-configured)
    metrics_unset = not (env.get("OTEL_METRICS_EXPORTER") or "").strip()
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
    server = None
    if "prometheus" in metric_exporters or (metrics_unset and settings.metrics):
        # asked for: a busy port is a warning; served by default: said in the closing line instead
        quiet = "prometheus" not in metric_exporters and not (env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or "").strip()
        server = LazyPrometheusServer(env, quiet=quiet)
        c.on_first_compile.append(server.start)
        c.owned.append(server)
    if c.tracer_provider is not None and nothing_configured(env):
        problem, endpoint = otlp_problem(env, "traces")
        c.closing_line = ClosingLine(env, endpoint if problem is None else None, server, summary_on_stderr=False)
    if settings.pushgateway_url and settings.metrics:
        push = PushAtExit(settings.pushgateway_url, settings.pushgateway_job, env)
        c.on_first_compile.append(push.arm)
        c.owned.append(push)
