"""Fast tier: the ``/metrics`` endpoint stops at once when the bridge does. prometheus_client's server looks for a stop
only every half second; the bridge wakes it, so a process's exit does not wait for that look (each exit waited up to
0.5 s, 0.2 s on average where no collector answered, before)."""

from __future__ import annotations

import socket
import threading
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from torch_otel._otel.exposition import LazyPrometheusServer


def _serving() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "serve_forever" in repr(getattr(t, "_target", None))]


def test_the_endpoint_serves_then_stops_its_loop_and_frees_its_port():
    registry = CollectorRegistry()
    Counter("scrapes_seen", "", registry=registry)
    before = len(_serving())
    server = LazyPrometheusServer({"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}, registry)
    server.start()
    assert server.port and len(_serving()) == before + 1
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
        assert b"scrapes_seen_total 0.0" in r.read()
    server.shutdown()
    assert len(_serving()) == before  # the loop has ended: shutdown waited for it, as it must
    with socket.socket() as s:  # and the port is closed
        assert s.connect_ex(("127.0.0.1", server.port)) != 0
    server.shutdown()  # twice is safe
