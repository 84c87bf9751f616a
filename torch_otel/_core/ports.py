"""Free TCP ports on 127.0.0.1: whether one is free now, and fresh ones for a server to listen on.

``torch-otel demo`` asks :func:`port_is_free` before it serves ``/metrics`` on the port it was given; the
tests and benchmarks take ports for the real servers they start (Prometheus, rotel, the bridge's own
``/metrics``) from :func:`free_port`.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "port_is_free"]

_HANDED_OUT: set[int] = set()  # every port free_port returned in this process: never returned twice


def port_is_free(port: int) -> bool:
    """True if a socket can bind ``port`` on 127.0.0.1 right now (nothing listens there, or holds it)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(consecutive: int = 1) -> int:
    """A port (the first of ``consecutive`` free ones) nobody listens on right now, and not handed out before.

    Taken below the kernel's ephemeral range: the ports the OS gives to outgoing connections and to
    ``bind(0)`` (torchrun's rendezvous, gloo's pairs) can never take it between now and its use.
    """
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(15000, max(15001, low - consecutive))
        ports = range(base, base + consecutive)
        if not _HANDED_OUT.intersection(ports) and all(port_is_free(p) for p in ports):
            _HANDED_OUT.update(ports)
            return base
    raise RuntimeError("no free port range")
