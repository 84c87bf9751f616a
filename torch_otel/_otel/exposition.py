"""Serving and pushing the Prometheus series: the ``/metrics`` endpoint and the Pushgateway push at exit."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .._core.errors import warn_once
from .._core.ranks import env_rank


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


def prometheus_host(env: Mapping[str, str]) -> str:
    """OTEL_EXPORTER_PROMETHEUS_HOST, default 127.0.0.1: serving beyond this machine is an explicit setting."""
    return (env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or "127.0.0.1").strip()


def start_prometheus_server(
    env: Mapping[str, str] | None = None, registry: Any = None, quiet: bool = False
) -> tuple[Any, int] | str:
    """Serve ``/metrics`` on OTEL_EXPORTER_PROMETHEUS_HOST:PORT (default 127.0.0.1:9464, + LOCAL_RANK).

    Returns the server and its port, or why it could not serve. That is one warning line, unless ``quiet`` (the
    endpoint nobody asked for, served while OTEL_METRICS_EXPORTER is unset: its caller says it at the end); training
    goes on either way.
    """
    from prometheus_client import REGISTRY, start_http_server

    env = os.environ if env is None else env
    host = prometheus_host(env)
    port = prometheus_port(env)
    try:
        server, _thread = start_http_server(port, addr=host, registry=_UpToDate(registry or REGISTRY))
    except OSError as exc:
        fix = (
            "set OTEL_EXPORTER_PROMETHEUS_HOST to an address of this machine"
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
            else "set OTEL_EXPORTER_PROMETHEUS_PORT to a free port"
        )
        problem = f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); {fix}"
        if not quiet:
            warn_once(f"promserve:{host}:{port}", "%s. torch.compile and the other exporters go on.", problem)
        return problem
    return server, server.server_address[1]


# What brings a registry up to date before a scrape, by registry: each live pipeline that serves it registers (the
# bridge: its queue processed, its features' states collected) as it starts, and unregisters as it stops.
_scrape_syncs: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]] = weakref.WeakKeyDictionary()
_scrape_lock = threading.Lock()


def sync_before_scrape(registry: Any, sync: Callable[[], None]) -> Callable[[], None]:
    """Run ``sync`` before each scrape of ``registry`` (so compiles that ended, and what the features' states stand
    at, are served); returns what unregisters it."""
    with _scrape_lock:
        _scrape_syncs.setdefault(registry, []).append(sync)

    def unregister() -> None:
        with _scrape_lock:
            syncs = _scrape_syncs.get(registry)
            if syncs is not None and sync in syncs:
                syncs.remove(sync)

    return unregister


class _UpToDate:
    """The registry as the endpoint serves it: brought up to date before each scrape (:func:`sync_before_scrape`)."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def _sync(self) -> None:
        with _scrape_lock:
            syncs = list(_scrape_syncs.get(self.registry, ()))
        for sync in syncs:
            sync()

    def collect(self) -> Any:
        self._sync()
        return self.registry.collect()

    def restricted_registry(self, names: Any) -> Any:  # ``/metrics?name[]=...``
        self._sync()
        return self.registry.restricted_registry(names)


class LazyPrometheusServer:
    """The ``/metrics`` endpoint, started at the first compile (``start``) and stopped with the bridge."""

    def __init__(self, env: Mapping[str, str], registry: Any = None, quiet: bool = False) -> None:
        self.env = dict(env)
        self.registry = registry
        self.quiet = quiet  # served by default, nobody asked: a busy port is said at the end, not as a warning
        self.port: int | None = None
        self.problem: str | None = None  # why it could not serve
        self._server: Any = None
        self._lock = threading.Lock()
        self._tried = False

    def host_for_url(self) -> str:
        host = prometheus_host(self.env)
        return f"[{host}]" if ":" in host else host

    def start(self) -> None:
        with self._lock:
            if self._tried:
                return
            self._tried = True
            started = start_prometheus_server(self.env, self.registry, quiet=self.quiet)
            if isinstance(started, str):
                self.problem = started
            else:
                self._server, self.port = started
                self._pid = os.getpid()

    def shutdown(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            try:
                if getattr(self, "_pid", None) == os.getpid():
                    stop_serving(server)  # a forked child has no serving thread to wait for
                server.server_close()
            except Exception:  # noqa: BLE001
                pass


def stop_serving(server: Any, timeout_s: float = 1.0) -> None:
    """Stop ``server``'s ``serve_forever`` loop now, not at its next poll.

    ``shutdown()`` alone waits for the loop to look again, up to its poll interval: half a second added to every
    process's exit (prometheus_client's server polls every 0.5 s). The loop looks as soon as a connection arrives, so
    one is made to its own port until it has stopped; the loop leaves before it would handle one."""
    stopper = threading.Thread(target=server.shutdown, name="torch-otel-metrics-stop", daemon=True)
    stopper.start()
    host, port = server.server_address[:2]
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    deadline = time.monotonic() + timeout_s
    while stopper.is_alive() and time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.1).close()
        except OSError:
            pass
        stopper.join(0.01)


class PushAtExit:
    """Pushes the registry to a Prometheus Pushgateway when the bridge shuts down (short jobs).

    Grouping key: ``job`` and ``rank``. One bounded attempt; a failure is one
    warning line.
    """

    def __init__(self, url: str, job: str, env: Mapping[str, str], registry: Any = None, timeout_s: float = 5.0) -> None:
        from prometheus_client import REGISTRY

        self.url, self.job, self.timeout_s = url, job, timeout_s
        self.grouping_key = {"rank": str(env_rank(env))}
        self.registry = registry or REGISTRY
        self.armed = False
        self._pid = os.getpid()

    def arm(self) -> None:
        """Called at the first compile: a process that compiled nothing pushes nothing (a torchrun launcher
        would otherwise overwrite rank 0's group with empty series)."""
        self.armed = True

    def shutdown(self) -> None:
        from prometheus_client import push_to_gateway

        if not self.armed or self._pid != os.getpid():  # forked children never push over their parent's group
            return
        self.armed = False
        try:
            push_to_gateway(self.url, self.job, self.registry, grouping_key=self.grouping_key, timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - an unreachable gateway never fails the job
            warn_once(
                f"push:{self.url}",
                "cannot push metrics to the Pushgateway at %s (%s); check TORCH_OTEL_PUSHGATEWAY_URL",
                self.url,
                exc,
            )
