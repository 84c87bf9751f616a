"""Cache lookups' metric series: misses by cause, bypasses by a category of torch's reason, and each rank's latest
miss, observed per compile."""

from __future__ import annotations

from collections.abc import Iterator

from ..._model.record import CompileRecord
from ..views import Observation, Series
from .events import bypass_category
from .facts import lookups

__all__ = ["SERIES", "observations"]


SERIES = (
    Series(
        "torch_compile_cache_misses",
        "counter",
        "Compile cache lookups that missed, by cache and by the cause found (docs/caches.md): first_seen, "
        "not_in_cache, or the class of what changed (versions, system, config, inputs, graph, other).",
        ("rank", "cache", "cause"),
    ),
    Series(
        "torch_compile_cache_bypasses",
        "counter",
        "Compile cache lookups torch bypassed, by a category of torch's reason (the reason is on the span).",
        ("rank", "cache", "reason"),
    ),
    Series(
        "torch_compile_cache_last_miss",
        "info",
        "This rank's latest compile cache miss, 1: the cache, its graph (compile id and pass), the cause and the "
        "first part of the key that changed. One series per rank.",
        ("rank", "cache", "graph", "cause", "component"),
    ),
)


def observations(rec: CompileRecord, rank: str) -> Iterator[Observation]:
    """Misses by cause, bypasses by reason category, and the rank's latest miss (graph, cause, component)."""
    last = None
    for x in lookups(rec):
        lk = x.event
        if lk.result == "bypass":
            yield "torch_compile_cache_bypasses", (rank, lk.cache, bypass_category(lk.bypass_reason)), 1, None
        elif lk.result == "miss" and x.explanation is not None:
            yield "torch_compile_cache_misses", (rank, lk.cache, x.explanation.cause), 1, None
            last = x
    if last is not None:
        e = last.explanation
        backward = last.event.backward
        graph = f"{rec.id_str} {'backward' if backward else 'forward' if backward is False else ''}".strip()
        component = e.components[0] if e.components else ""
        yield "torch_compile_cache_last_miss", (rank, last.event.cache, graph, e.cause, component), 1, None
