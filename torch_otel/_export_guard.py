"""Exporters the bridge creates, wrapped so a dead, slow or rejecting collector costs one warning line.

Each wrapper counts what it could not deliver (``dropped()``, served as
``torch_otel_dropped_total{signal}``) and reports the first failure per signal
in one line. The OTLP exporters' own retry messages are folded into that line
(a filter on their loggers, added only when the bridge built the exporters).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._internal import record_error, warn_once

_R = TypeVar("_R")  # an exporter's result type
_lock = threading.Lock()
_dropped: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}

# Loggers of the OTLP exporters and the SDK's batch processors: their per-attempt messages.
EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.metrics._internal.export",
)


_targets: dict[str, str | None] = {}  # endpoint -> the CA file its certificate is checked with


def targets() -> set[str]:
    """The endpoints of the exporters the bridge built."""
    with _lock:
        return set(_targets)


def tls_problem(endpoint: str, timeout_s: float = 1.0) -> str | None:
    """For an https endpoint that accepts connections: why its certificate does not verify, if it does not."""
    import socket
    import ssl
    from urllib.parse import urlsplit

    with _lock:
        cafile = _targets.get(endpoint)
    try:
        u = urlsplit(endpoint)
        if u.scheme != "https" or not u.hostname:
            return None
        ctx = ssl.create_default_context(cafile=cafile)
        with socket.create_connection((u.hostname, u.port or 443), timeout=timeout_s) as sock:
            with ctx.wrap_socket(sock, server_hostname=u.hostname):
                return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message or exc.reason or exc)
    except ssl.SSLError as exc:
        return str(exc.reason or exc)
    except (OSError, ValueError):
        return None  # unreachable: reported as such by the caller


def reachable(endpoint: str, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at the endpoint's host and port (a dead collector does not)."""
    import socket
    from urllib.parse import urlsplit

    try:
        u = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        port = u.port or (443 if u.scheme == "https" else 80)
        with socket.create_connection((u.hostname or "localhost", port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


LOST_DATA = "lost-data"  # the warn_once key of the one line a process prints when it loses telemetry


def dropped() -> dict[str, int]:
    with _lock:
        return dict(_dropped)


# How the one line about lost telemetry ends: a training process goes on; a replay says at its end what it lost.
GOES_ON = {"tail": "Training goes on"}


def _count(signal: str, n: int, target: object, why: str) -> None:
    with _lock:
        _dropped[signal] += n
    warn_once(  # one line per process that lost data, whatever it lost next (torch_otel_dropped_total counts it all)
        LOST_DATA,
        'cannot export %s to %s (%s); what cannot be exported is dropped and counted in torch_otel_dropped_total{signal="%s"}. '
        "%s",
        signal,
        target,
        why,
        signal,
        GOES_ON["tail"],
    )


# The SDK's batch processors drop the newest item when their queue is full, and say so only in
# this warning (its one argument is "Span" or "Log"): count those drops with the exporters' own.
_QUEUE_FULL = "Queue full, dropping %s."
_QUEUE_SIGNALS = {"Span": "traces", "Log": "logs"}


class _AllTargets:
    """The bridge's endpoints, joined only if the one warning line is printed (this runs per dropped span)."""

    def __str__(self) -> str:
        return ", ".join(sorted(targets())) or "the collector"


_ALL_TARGETS = _AllTargets()


class _Quiet(logging.Filter):
    """Drops the exporters' own per-attempt messages (the wrapper reports failures once); counts queue-full drops."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _QUEUE_FULL and isinstance(record.args, tuple) and record.args:
            signal = _QUEUE_SIGNALS.get(str(record.args[0]))
            if signal is not None:
                _count(signal, 1, _ALL_TARGETS, "the export queue is full")
        return False


_quiet = _Quiet()


def quiet_exporter_logs() -> None:
    for name in EXPORT_LOGGERS:
        lg = logging.getLogger(name)
        if _quiet not in lg.filters:
            lg.addFilter(_quiet)


def _points(data: Any) -> int:
    try:
        return sum(len(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)
    except Exception:  # noqa: BLE001
        return 1


def _register(target: str, cafile: str | None) -> None:
    with _lock:
        _targets[target] = cafile


class _Guarded:
    """Holds an exporter built by ``factory``, counts what it fails to deliver, and rebuilds it after fork.

    gRPC channels do not survive fork: a child using its parent's channel hangs
    or re-sends the parent's requests, so each process gets a fresh exporter.
    """

    signal = ""

    def __init__(self, factory: Callable[[], Any], target: str, cafile: str | None = None) -> None:
        self._factory = factory
        self.inner = factory()
        self.target = target
        _register(target, cafile)
        weak = weakref.WeakMethod(self._renew)

        def after_in_child() -> None:
            renew = weak()
            if renew is not None:
                renew()

        os.register_at_fork(after_in_child=after_in_child)

    def _renew(self) -> None:
        try:
            self.inner = self._factory()
        except Exception as exc:  # noqa: BLE001
            record_error("exporter after fork", exc)

    def _export(self, call: Callable[[], _R], failure: _R, items: Callable[[], int]) -> _R:
        """Run the inner export; a failure (returned or raised) is counted and reported once."""
        try:
            result = call()
            why = "the collector did not accept them"
        except Exception as exc:  # noqa: BLE001
            result, why = failure, f"{type(exc).__name__}: {exc}"
        if getattr(result, "name", "") != "SUCCESS":
            _count(self.signal, items(), self.target, why)
        return result

    def _shutdown(self, **kwargs: Any) -> None:
        try:
            self.inner.shutdown(**kwargs)
        except Exception as exc:  # noqa: BLE001
            record_error(f"{self.signal} exporter shutdown", exc)


class GuardedSpanExporter(_Guarded, SpanExporter):
    signal = "traces"

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return self._export(lambda: self.inner.export(spans), SpanExportResult.FAILURE, lambda: len(spans))

    def shutdown(self) -> None:
        self._shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class GuardedMetricExporter(_Guarded, MetricExporter):
    signal = "metrics"

    def __init__(self, factory: Callable[[], MetricExporter], target: str, cafile: str | None = None) -> None:
        _Guarded.__init__(self, factory, target, cafile)
        MetricExporter.__init__(
            self,
            preferred_temporality=getattr(self.inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(self.inner, "_preferred_aggregation", None),
        )

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        return self._export(
            lambda: self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            MetricExportResult.FAILURE,
            lambda: _points(metrics_data),
        )

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._shutdown(timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))


def guarded_log_exporter(factory: Callable[[], Any], target: str, cafile: str | None = None) -> Any:
    """The logs twin of the two above (the SDK's logs module is imported only when logs are on)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class GuardedLogExporter(_Guarded, LogRecordExporter):
        signal = "logs"

        def export(self, batch: Sequence[Any]) -> Any:
            return self._export(lambda: self.inner.export(batch), LogRecordExportResult.FAILURE, lambda: len(batch))

        def shutdown(self) -> None:
            self._shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.inner.force_flush(timeout_millis))

    return GuardedLogExporter(factory, target, cafile)
