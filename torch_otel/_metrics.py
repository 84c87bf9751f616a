"""Finished compiles -> Prometheus series (prometheus_client), with exemplars linking to traces.

Names are fixed by the contract: ``torch_compile_*``, histograms in
``_seconds``, counters in ``_total``, every series labelled ``rank``. Label
values come from bounded sets only.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ._assembler import CompileRecord, Sink
from ._categories import PHASES, BoundedLabels, recompile_category
from ._graph_breaks import graph_break_code
from ._version import __version__

# 10 ms .. 30 min: compiles of big models take many minutes.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)
GUARD_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)


def default_rank() -> str:
    """The ``rank`` label when torch.distributed is not (yet) initialised: torchrun's RANK, else 0."""
    r = os.environ.get("RANK", "0").strip()
    return r if r.isdigit() else "0"


class CompileMetrics(Sink):
    """The series of the contract, on a prometheus_client registry."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY, namespace: str = "torch_compile") -> None:
        self.registry = registry
        ns = namespace
        self.frame_duration = Histogram(
            f"{ns}_frame_duration_seconds",
            "Whole compile time of a frame (or compiled-autograd graph / lazy backward).",
            ["rank", "kind", "status"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.phase_duration = Histogram(
            f"{ns}_phase_duration_seconds",
            "Time spent in one compile phase (see the README for the phase set).",
            ["rank", "phase"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.compiles = Counter(f"{ns}_compiles", "Compiles finished.", ["rank", "kind", "status"], registry=registry)
        self.recompiles = Counter(
            f"{ns}_recompiles", "Recompiles, by guard-failure category.", ["rank", "reason"], registry=registry
        )
        self.graph_breaks = Counter(
            f"{ns}_graph_breaks",
            "Graph breaks, by torch's graph-break registry code.",
            ["rank", "reason"],
            registry=registry,
        )
        self.failures = Counter(
            f"{ns}_failures", "Failed compiles, by torch's fail_type.", ["rank", "fail_type"], registry=registry
        )
        self.limit_hits = Counter(
            f"{ns}_recompile_limit_hits",
            "Frames that hit the recompile limit and now run in eager.",
            ["rank"],
            registry=registry,
        )
        self.eager_fallbacks = Counter(
            f"{ns}_eager_fallbacks",
            "Compiles that left their frame running in eager.",
            ["rank", "kind"],
            registry=registry,
        )
        self.cache_requests = Counter(
            f"{ns}_cache_requests",
            "Compile cache lookups.",
            ["rank", "cache", "location", "result"],
            registry=registry,
        )
        self.cache_saved = Counter(
            f"{ns}_cache_time_saved_seconds",
            "Compile time saved by the remote cache.",
            ["rank"],
            registry=registry,
        )
        self.guards = Histogram(f"{ns}_guards", "Guards per compiled frame.", ["rank"], buckets=GUARD_BUCKETS, registry=registry)
        self.in_progress = Gauge(f"{ns}_in_progress", "Compiles running now.", ["rank", "kind"], registry=registry)
        self.build_info = Gauge(
            f"{ns}_build_info",
            "Versions of torch and torch-otel.",
            ["rank", "torch_version", "torch_otel_version"],
            registry=registry,
        )
        self._fail_types = BoundedLabels(50)
        self._gb_codes = BoundedLabels(200)
        self._build_seen: set[str] = set()

    def _rank(self, rec: CompileRecord) -> str:
        return str(rec.rank) if rec.rank is not None else default_rank()

    def _info(self, rank: str) -> None:
        if rank in self._build_seen:
            return
        self._build_seen.add(rank)
        try:
            import torch

            tv = str(torch.__version__)
        except Exception:  # noqa: BLE001
            tv = "unknown"
        self.build_info.labels(rank, tv, __version__).set(1)

    def on_start(self, rec: CompileRecord) -> None:
        rank = self._rank(rec)
        self._info(rank)
        self.in_progress.labels(rank, rec.kind).inc()

    def on_finish(self, rec: CompileRecord) -> None:
        rank = self._rank(rec)
        self._info(rank)
        self.in_progress.labels(rank, rec.kind).dec()
        m: dict[str, Any] = rec.metrics or {}
        fail_type = rec.fail_type
        failed = fail_type is not None or rec.incomplete is not None
        status = "failed" if failed else "ok"
        exemplar = {"trace_id": f"{rec.trace_id:032x}"} if rec.trace_id else None
        self.frame_duration.labels(rank, rec.kind, status).observe(rec.duration_s, exemplar)
        self.compiles.labels(rank, rec.kind, status).inc()
        seen: set[str] = set()
        for node, _ in rec.root.walk():
            if node.name in ("backend_compile", "inductor_compile") and node.args.get("cache_state") == "bypass":
                cache = "fx_graph" if node.name == "inductor_compile" else "aot_autograd"
                self.cache_requests.labels(rank, cache, "local", "bypass").inc()
            phase = PHASES.get(node.name)
            if phase is None or phase in seen or node.end_ns is None:
                continue
            seen.add(phase)  # the outermost occurrence only: nested ones are inside it
            self.phase_duration.labels(rank, phase).observe(max(0.0, (node.end_ns - node.start_ns) / 1e9), exemplar)
        if rec.recompile_reason:
            self.recompiles.labels(rank, recompile_category(rec.recompile_reason)).inc()
        for gb in rec.graph_breaks:
            self.graph_breaks.labels(rank, self._gb_codes(graph_break_code(gb.gb_type, gb.reason))).inc()
        if fail_type:
            self.failures.labels(rank, self._fail_types(fail_type)).inc()
        elif rec.incomplete:
            self.failures.labels(rank, "Incomplete").inc()
        if rec.recompile_limit_hit:
            self.limit_hits.labels(rank).inc()
        if rec.eager_fallback:
            self.eager_fallbacks.labels(rank, rec.kind).inc()
        if rec.kind != "compiled_autograd" and not failed:
            gc = m.get("guard_count")
            if isinstance(gc, int) and not isinstance(gc, bool):
                self.guards.labels(rank).observe(gc)
        for cache, prefix in (("fx_graph", "inductor_fx"), ("aot_autograd", "aotautograd")):
            for location in ("local", "remote"):
                for result in ("hit", "miss"):
                    n = m.get(f"{prefix}_{location}_cache_{result}_count")
                    if isinstance(n, int) and n > 0:
                        self.cache_requests.labels(rank, cache, location, result).inc(n)
        saved = m.get("remote_cache_time_saved_s")
        if isinstance(saved, (int, float)) and saved > 0:
            self.cache_saved.labels(rank).inc(saved)
