"""The bridge's lifecycle: instrument / uninstrument / force_flush / shutdown."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from ._assembler import Assembler, Sink
from ._config import Settings, load_settings
from ._internal import logger, record_error
from ._live import LiveCapture
from ._metrics import Backend, CompileMetrics, OTelBackend, PrometheusBackend
from ._spans import SpanMapper, SpanSink
from ._version import __version__

_backends: weakref.WeakKeyDictionary[Any, Backend] = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def prometheus_backend(registry: CollectorRegistry) -> Backend:
    """One set of series per registry (prometheus_client refuses duplicates)."""
    with _lock:
        b = _backends.get(registry)
        if b is None:
            b = _backends[registry] = PrometheusBackend(registry)
        return b


def otel_backend(meter_provider: MeterProvider) -> Backend:
    """One set of instruments per meter provider."""
    with _lock:
        b = _backends.get(meter_provider)
        if b is None:
            b = _backends[meter_provider] = OTelBackend(meter_provider.get_meter("torch_otel", __version__))
        return b


@dataclass
class Bridge:
    settings: Settings
    assembler: Assembler
    capture: LiveCapture
    tracer_provider: Any
    metrics: CompileMetrics | None
    owned: list[Any] = field(default_factory=list)  # providers/servers we created and must shut down


_bridge: Bridge | None = None
_atexit_registered = False


def instrument(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    *,
    registry: CollectorRegistry | None = REGISTRY,
    capture: str | None = None,
    settings: Settings | None = None,
    _owned: list[Any] | None = None,
) -> Bridge | None:
    """Start turning torch.compile compiles into traces and metrics.

    ``tracer_provider`` and ``meter_provider`` default to the global ones
    (never replaced). The metrics go both to ``registry`` (prometheus_client;
    ``None`` for none) and to the meter provider's readers (OTLP).
    ``capture`` is ``"default"``, ``"full"`` or ``"off"`` (default:
    ``TORCH_OTEL_CAPTURE``). Instrumenting twice is a no-op.
    """
    global _bridge, _atexit_registered
    with _lock:
        if _bridge is not None:
            return _bridge
        settings = settings or load_settings()
        level = capture or settings.capture
        if level not in ("off", "default", "full"):
            logger.warning("capture=%r is not a capture level; use off, default or full (using default)", level)
            level = "default"
        if level == "off":
            return None
        provider = tracer_provider or trace.get_tracer_provider()
        tracer = provider.get_tracer("torch_otel", __version__)
        sinks: list[Sink] = [SpanSink(SpanMapper(tracer, settings, live=True))]
        metrics = None
        if settings.metrics:
            backends = [prometheus_backend(registry)] if registry is not None else []
            backends.append(otel_backend(meter_provider or otel_metrics.get_meter_provider()))
            metrics = CompileMetrics(backends)
            sinks.append(metrics)
        assembler = Assembler(sinks, max_open=settings.max_open_compiles)
        cap = LiveCapture(assembler, level)
        try:
            cap.install()
        except Exception as exc:  # noqa: BLE001 - never break the user's program
            record_error("instrument", exc)
            return None
        _bridge = Bridge(settings, assembler, cap, provider, metrics, list(_owned or []))
        if not _atexit_registered:
            atexit.register(shutdown)
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _atexit_registered = True
        return _bridge


def is_instrumented() -> bool:
    return _bridge is not None


def current() -> Bridge | None:
    return _bridge


def uninstrument() -> None:
    """Remove every hook and leave torch's loggers exactly as they were."""
    global _bridge
    with _lock:
        b = _bridge
        if b is None:
            return
        _bridge = None
        try:
            b.capture.uninstall()
        except Exception as exc:  # noqa: BLE001
            record_error("uninstrument", exc)
        try:
            b.assembler.flush("the bridge was uninstrumented during the compile")
        except Exception as exc:  # noqa: BLE001
            record_error("uninstrument flush", exc)
        _shutdown_owned(b)


def _shutdown_owned(b: Bridge) -> None:
    for obj in b.owned:
        try:
            if hasattr(obj, "shutdown"):
                obj.shutdown()
        except Exception as exc:  # noqa: BLE001
            record_error("shutdown", exc)
    b.owned.clear()


def force_flush(timeout_millis: int = 10_000) -> bool:
    """Export everything finished so far. Compiles still running are not cut short."""
    b = _bridge
    provider = b.tracer_provider if b is not None else trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is None:
        return True
    try:
        return bool(flush(timeout_millis))
    except Exception as exc:  # noqa: BLE001
        record_error("force_flush", exc)
        return False


def shutdown(timeout_millis: int = 5_000) -> None:
    """Finish compiles in flight (as incomplete), flush, and stop what the bridge started. Safe twice."""
    b = _bridge
    if b is None:
        return
    try:
        b.assembler.flush()
    except Exception as exc:  # noqa: BLE001
        record_error("shutdown flush", exc)
    force_flush(timeout_millis)
    uninstrument()


def _after_fork_in_child() -> None:
    b = _bridge
    if b is None:
        return
    # The parent's compiles in flight are the parent's to report.
    b.assembler._open.clear()
    b.assembler._lock = threading.RLock()
