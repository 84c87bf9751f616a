"""Exporters the bridge creates, wrapped so a dead, slow or rejecting collector costs one warning line.

Each wrapper counts what it could not deliver (``dropped()``, served as
``torch_otel_dropped_total{signal}``) and reports the first failure per signal
in one line. The OTLP exporters' own retry messages are folded into that line
(a filter on their loggers, added only when the bridge built the exporters).

When nothing got through, that line says why where the endpoint itself tells:
it speaks plaintext and the exporter TLS (or the reverse), its certificate does
not verify, or it is the other OTLP protocol's port (:func:`endpoint_problem`).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .._core.errors import record_error, warn_once, warned
from .encoded_span import EncodedSpan
from .fork_gate import GATE

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


@dataclass(frozen=True)
class Target:
    """An endpoint the bridge exports to, and how its exporter talks to it (what a mismatch is judged against)."""

    endpoint: str  # as configured: the name every message gives it
    cafile: str | None = None  # the CA file its certificate is checked with
    protocol: str = "grpc"  # or http/protobuf
    protocol_var: str = "OTEL_EXPORTER_OTLP_PROTOCOL"  # the variable that names the protocol
    tls: bool = False  # whether the exporter speaks TLS to it
    insecure_var: str | None = None  # gRPC without a scheme: the OTEL_EXPORTER_OTLP_*INSECURE variable that chose TLS
    # the exporter's own headers (OTEL_EXPORTER_OTLP_*HEADERS): a plaintext probe of the endpoint carries them, as an
    # export would, so a collector that requires them (a gateway's auth) sees no request without them
    headers: tuple[tuple[str, str], ...] = ()
    # the user named this endpoint (or OTLP for its signal); False: OTLP's default endpoint, which nobody asked for.
    # Until something answers there, an export to it is not attempted and not a loss (docs/configuration.md)
    named: bool = True


_targets: dict[str, Target] = {}
_delivered: set[str] = set()  # endpoints that took at least one export: their settings work
_by_signal: dict[str, set[str]] = {}  # each signal's endpoints
_explained: dict[str, str] = {}  # endpoint -> the problem its printed line named
_answered: set[str] = set()  # default endpoints something answered at: from then on they count as named
_compiles: dict[tuple[str, bool], int] = {}  # (traces endpoint, sent) -> compile traces (root spans) handed to it
_not_sent: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}  # items not sent: no collector at the default


def absent_default(endpoint: str) -> bool:
    """Whether ``endpoint`` is OTLP's default endpoint, which nobody named and at which nothing has answered yet."""
    with _lock:
        t = _targets.get(endpoint)
        return t is not None and not t.named and endpoint not in _answered


def compile_traces(endpoint: str) -> tuple[int, int]:
    """How many compiles' traces (root spans) were sent to ``endpoint``, and how many not sent (nothing there)."""
    with _lock:
        return _compiles.get((endpoint, True), 0), _compiles.get((endpoint, False), 0)


def not_sent() -> dict[str, int]:
    """Items not sent because nothing listened at OTLP's default endpoint, which nobody named (not a loss)."""
    with _lock:
        return dict(_not_sent)


def targets() -> set[str]:
    """The endpoints of the exporters the bridge built."""
    with _lock:
        return set(_targets)


def tls_problem(endpoint: str, timeout_s: float = 1.0) -> str | None:
    """For an endpoint the bridge speaks TLS to: why its certificate does not verify, if it does not."""
    import socket
    import ssl

    with _lock:
        target = _targets.get(endpoint)
    if not (endpoint.startswith("https://") or (target is not None and target.tls)):
        return None
    try:
        host, port, _ = _address(endpoint)
        ctx = ssl.create_default_context(cafile=target.cafile if target else None)
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            with ctx.wrap_socket(sock, server_hostname=host):
                return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message or exc.reason or exc)
    except (OSError, ValueError):
        return None  # unreachable, or no TLS there: reported as such by the caller


def _address(endpoint: str) -> tuple[str, int, str]:
    """(host, port, netloc) of an endpoint, ``host:port`` (no scheme) included."""
    from urllib.parse import urlsplit

    u = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = u.port or (443 if u.scheme == "https" else 80)
    host = u.hostname or "localhost"
    return host, port, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_H2_SETTINGS = 4  # the frame type an HTTP/2 server's first bytes carry (its connection preface)


def _tls_handshakes(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TLS handshake completes there (the certificate not checked)."""
    import socket
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            with ctx.wrap_socket(sock, server_hostname=host):
                return True
    except (OSError, ValueError):
        return False


def _plain_answer(host: str, port: int, timeout_s: float, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The first bytes the server answers a plaintext HTTP/1.1 ``GET /`` with (b"" if none)."""
    import socket

    extra = "".join(f"{k}: {v}\r\n" for k, v in headers).encode("latin-1", "replace")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(
                b"GET / HTTP/1.1\r\nHost: " + host.encode("ascii", "replace") + b"\r\n" + extra + b"Connection: close\r\n\r\n"
            )
            head = b""
            while len(head) < 12:
                chunk = sock.recv(64)
                if not chunk:
                    break
                head += chunk
            return head
    except (OSError, ValueError):
        return b""


def speaks(endpoint: str, tls_first: bool = False, timeout_s: float = 0.5, headers: tuple[tuple[str, str], ...] = ()) -> str:
    """What the server at an endpoint speaks: "tls", "http/1.1", "h2" (HTTP/2 only: an OTLP/gRPC port) or "" (unknown).

    Probes with a TLS handshake and a plaintext ``GET /``: neither exports anything.
    """
    host, port, _ = _address(endpoint)
    if tls_first and _tls_handshakes(host, port, timeout_s):
        return "tls"
    head = _plain_answer(host, port, timeout_s, headers)
    if head.startswith(b"HTTP/"):
        # a 400 is also how some TLS servers answer plaintext ("Client sent an HTTP request to an HTTPS server")
        if head[9:12] == b"400" and not tls_first and _tls_handshakes(host, port, timeout_s):
            return "tls"
        return "http/1.1"
    if len(head) >= 9 and head[3] == _H2_SETTINGS:
        return "h2"
    if not tls_first and _tls_handshakes(host, port, timeout_s):
        return "tls"
    return ""


def endpoint_problem(endpoint: str, after_failure: bool = False) -> str | None:
    """Why an endpoint that accepts connections cannot take what the bridge's exporter sends, and the fix: one line.

    A TLS exporter at a plaintext collector (or the reverse), a certificate that
    does not verify, or the other OTLP protocol's port. ``after_failure``: an
    export failed, so a port that answers HTTP/1.1 is taken for an OTLP/HTTP one
    (a proxy that serves gRPC too on one port would have taken the export).
    """
    with _lock:
        t = _targets.get(endpoint)
    if t is None:
        return None
    try:
        netloc = _address(endpoint)[2]
        found = speaks(endpoint, tls_first=t.tls, headers=t.headers)
    except ValueError:
        return None
    if t.tls:
        if found == "tls":
            why = tls_problem(endpoint)
            if why:
                return (
                    f"the TLS certificate of {endpoint} does not verify ({why}); "
                    "set OTEL_EXPORTER_OTLP_CERTIFICATE to the CA file that signed it"
                )
            return None
        if found not in ("h2", "http/1.1"):
            return None
        fix = f"set {t.insecure_var}=true or use http://{netloc}" if t.insecure_var else f"use http://{netloc}"
        also = (
            f" (it is also an OTLP/gRPC port: set {t.protocol_var}=grpc too)"
            if found == "h2" and t.protocol == "http/protobuf"
            else ""
        )
        return f"{endpoint} is a plaintext collector and the exporter speaks TLS to it; {fix}{also}"
    if found == "tls":
        fix = f"use https://{netloc}"
        if t.protocol == "grpc" and "://" not in endpoint:
            fix += " or set OTEL_EXPORTER_OTLP_INSECURE=false"
        return (
            f"{endpoint} speaks TLS and the exporter plaintext; {fix} "
            "(and OTEL_EXPORTER_OTLP_CERTIFICATE if a private CA signed its certificate)"
        )
    if found == "h2" and t.protocol == "http/protobuf":
        return (
            f"{endpoint} is an OTLP/gRPC port and {t.protocol_var} is http/protobuf; set {t.protocol_var}=grpc, "
            "or use the collector's OTLP/HTTP port (4318 by default)"
        )
    if found == "http/1.1" and t.protocol == "grpc" and after_failure:
        return (
            f"{endpoint} answers HTTP/1.1, not gRPC (an OTLP/HTTP port); set {t.protocol_var}=http/protobuf, "
            "or use the collector's OTLP/gRPC port (4317 by default)"
        )
    return None


def explained(endpoint: str) -> str | None:
    """The problem (and fix) a line already named for ``endpoint``, if one did: a closing line need not guess."""
    with _lock:
        return _explained.get(endpoint)


def problems_at_exit(endpoints: Sequence[str]) -> list[str]:
    """Of the endpoints (each accepting connections) that took nothing yet, those with an :func:`endpoint_problem`.

    Each problem is one line, unless the line about lost data already said it.
    """
    out = []
    for t in endpoints:
        with _lock:
            if t in _delivered:
                continue
            said = t in _explained
        why = None if said else endpoint_problem(t)
        if said or why:
            out.append(t)
        if why:
            with _lock:
                _explained[t] = why
            warn_once(f"endpoint-at-exit:{t}", "%s. What was not exported yet is dropped", why)
    return out


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


def _count(signal: str, n: int, target: object, why: str, explain: bool = False) -> None:
    """Count ``n`` dropped items; ``explain``: an export to ``target`` failed, so its line says why if the endpoint tells."""
    with _lock:
        _dropped[signal] += n
        explain = explain and isinstance(target, str) and target not in _delivered
    problem = endpoint_problem(str(target), after_failure=True) if explain and not warned(LOST_DATA) else None
    if problem is not None:
        with _lock:
            _explained[str(target)] = problem
        what = f"cannot export {signal}: {problem}. What"
    else:
        what = f"cannot export {signal} to {target} ({why}); what"
    warn_once(  # one line per process that lost data, whatever it lost next (torch_otel_dropped_total counts it all)
        LOST_DATA,
        '%s cannot be exported is dropped and counted in torch_otel_dropped_total{signal="%s"}. %s',
        what,
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


def flowing(signal: str) -> bool:
    """Whether a flush of ``signal``'s processors comes back promptly: none of its items was lost, and each endpoint it
    goes to has taken an export, or is OTLP's default endpoint that nobody named and nothing answers at (skipped). A
    collector that is down or hangs makes a flush wait out its exporter's timeout, batch after batch."""
    with _lock:
        if _dropped[signal]:
            return False
        return all(
            t in _delivered or (t in _targets and not _targets[t].named and t not in _answered)
            for t in _by_signal.get(signal, ())
        )


def _register(target: Target) -> None:
    with _lock:
        _targets[target.endpoint] = target


class _Guarded:
    """Holds an exporter built by ``factory``, counts what it fails to deliver, and rebuilds it after fork.

    gRPC channels do not survive fork: a child using its parent's channel hangs
    or re-sends the parent's requests, so each process gets a fresh exporter.
    """

    signal = ""

    def __init__(self, factory: Callable[[], Any], target: Target) -> None:
        self._factory = factory
        self.inner = factory()
        self.target = target.endpoint
        # a gRPC export and a fork must not overlap (torch_otel._otel.fork_gate); an HTTP one has no fork handlers
        self._gate = GATE if target.protocol == "grpc" else None
        _register(target)
        with _lock:
            _by_signal.setdefault(self.signal, set()).add(target.endpoint)
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

    def _absent(self, items: Callable[[], int]) -> bool:
        """Whether this export goes nowhere: the default endpoint, nobody named it, and nothing listens there now.

        A collector that starts there later is used from its first answer on, and from then on its endpoint counts
        as named (a failure is then a loss, reported as one)."""
        with _lock:
            target = _targets.get(self.target)
            if target is None or target.named or self.target in _answered:
                return False
        if reachable(self.target):
            with _lock:
                _answered.add(self.target)
            return False
        with _lock:
            _not_sent[self.signal] += items()
        return True

    def _export(self, call: Callable[[], _R], failure: _R, items: Callable[[], int]) -> _R:
        """Run the inner export; a failure (returned or raised) is counted and reported once."""
        try:
            if self._gate is None:
                result = call()
            else:
                with self._gate.export():
                    result = call()
            why = "the collector did not accept them"
        except Exception as exc:  # noqa: BLE001
            result, why = failure, f"{type(exc).__name__}: {exc}"
        if getattr(result, "name", "") != "SUCCESS":
            _count(self.signal, items(), self.target, why, explain=True)
        else:
            with _lock:
                _delivered.add(self.target)
        return result

    def _shutdown(self, **kwargs: Any) -> None:
        try:
            self.inner.shutdown(**kwargs)
        except Exception as exc:  # noqa: BLE001
            record_error(f"{self.signal} exporter shutdown", exc)


class GuardedSpanExporter(_Guarded, SpanExporter):
    signal = "traces"

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        # one root per compile (a trace of another kind, a process's start-up, has no compile kind: not counted)
        roots = sum(
            1
            for s in spans
            if type(s) is not EncodedSpan  # a phase span, as its bytes
            and getattr(s, "parent", None) is None
            and "torch.compile.kind" in (getattr(s, "attributes", None) or {})
        )
        if self._absent(lambda: len(spans)):
            result, sent = SpanExportResult.SUCCESS, False
        else:
            result = self._export(lambda: self.inner.export(spans), SpanExportResult.FAILURE, lambda: len(spans))
            sent = result == SpanExportResult.SUCCESS
        if roots:
            with _lock:
                _compiles[(self.target, sent)] = _compiles.get((self.target, sent), 0) + roots
        return result

    def shutdown(self) -> None:
        self._shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class GuardedMetricExporter(_Guarded, MetricExporter):
    signal = "metrics"

    def __init__(self, factory: Callable[[], MetricExporter], target: Target) -> None:
        _Guarded.__init__(self, factory, target)
        MetricExporter.__init__(
            self,
            preferred_temporality=getattr(self.inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(self.inner, "_preferred_aggregation", None),
        )

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self._absent(lambda: _points(metrics_data)):
            return MetricExportResult.SUCCESS
        return self._export(
            lambda: self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            MetricExportResult.FAILURE,
            lambda: _points(metrics_data),
        )

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._shutdown(timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))


def guarded_log_exporter(factory: Callable[[], Any], target: Target) -> Any:
    """The logs twin of the two above (the SDK's logs module is imported only when logs are on)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class GuardedLogExporter(_Guarded, LogRecordExporter):
        signal = "logs"

        def export(self, batch: Sequence[Any]) -> Any:
            if self._absent(lambda: len(batch)):
                return LogRecordExportResult.SUCCESS
            return self._export(lambda: self.inner.export(batch), LogRecordExportResult.FAILURE, lambda: len(batch))

        def shutdown(self) -> None:
            self._shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.inner.force_flush(timeout_millis))

    return GuardedLogExporter(factory, target)
