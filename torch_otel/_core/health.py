"""The bridge's own health counts, read at scrape time by the ``torch_otel_*`` series (torch_otel._sinks.metrics).

The compiles the trace sampler dropped, and the live assembler's counts (unattributed and unmatched phase events).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

_lock = threading.Lock()
_not_sampled: dict[str, int] = {}


def count_not_sampled(kind: str) -> None:
    """A compile the trace sampler dropped (no span was built for it)."""
    with _lock:
        _not_sampled[kind] = _not_sampled.get(kind, 0) + 1


def not_sampled() -> dict[str, int]:
    with _lock:
        return dict(_not_sampled)


# The live assembler's counts (its ``stats``), for the health series served at scrape time; None when not instrumented.
_live_stats: Mapping[str, int] | None = None


def set_live_stats(stats: Mapping[str, int] | None) -> None:
    global _live_stats
    _live_stats = stats


def live_stat(key: str) -> int:
    """One of the live assembler's counts (0 when the bridge is not instrumented)."""
    stats = _live_stats
    return int(stats.get(key, 0)) if stats is not None else 0
