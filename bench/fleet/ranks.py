"""bench/fleet/metrics.py: what one simulated rank serves on /metrics, and how its fingerprints move as compiles arrive.

The series a real rank produced (a real rank's ``TORCH_TRACE`` log replayed through the bridge's own metrics
path), relabelled per rank. The fingerprints are folded as ``torch_otel._analysis.divergence`` folds them, with its hash.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from bench import ROOT
from torch_otel._analysis.divergence import _MASK, ASPECTS, _hash53

TRACE = ROOT / "tests" / "data" / "cold-cache-cpp-3-ranks" / "dedicated_log_torch_trace_rank_0.log.gz"
RUN_ID = "fleet-sim"
FP = "torch_compile_rank_fingerprint"
POLICIES = ("all", "rank0")


@functools.lru_cache(maxsize=4)
def _real_rank_text(trace: str, detail: bool = True) -> str:
    """A real rank's /metrics: its TORCH_TRACE log replayed through the bridge's own metrics path.

    ``detail``: served as a detail rank (every series), else as a further rank (the bridge's bounded set).
    """
    from prometheus_client import CollectorRegistry, generate_latest

    from torch_otel._core.ranks import RankSet
    from torch_otel._parse.trace_log import ReplayStats
    from torch_otel._pipeline.replay import replay_file
    from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend

    reg = CollectorRegistry()
    metrics = CompileMetrics([PrometheusBackend(reg)], run_id=RUN_ID, detail_ranks=RankSet("all" if detail else "none"))
    replay_file(Path(trace), [metrics], ReplayStats())
    return generate_latest(reg).decode()


_RANK_LABEL = re.compile(r'([{,])rank="[^"]*"')
ASPECT_LABEL = re.compile(r'aspect="([^"]*)"')


def sample_name(line: str) -> str:
    """The metric name of an exposition sample line."""
    return line.split("{", 1)[0].split(" ", 1)[0]


def fmt(value: float) -> str:
    return repr(float(value))  # as prometheus_client writes a float; exact below 2**53


def rank_exposition(
    rank: int,
    world: int,
    detail_ranks: str = "all",
    fingerprints: dict[str, float] | None = None,
    trace: Path = TRACE,
) -> str:
    """The text a simulated rank ``rank`` of a ``world``-rank job serves on /metrics.

    The series a real rank produced (``trace`` replayed through the bridge's metrics path), with its
    ``rank`` label set to ``rank``. ``detail_ranks``: ``all`` (every rank serves everything:
    ``TORCH_OTEL_DETAIL_RANKS=all``) or ``rank0`` (the default: rank 0 serves everything, the others the bridge's
    bounded set). ``fingerprints``:
    the value of ``torch_compile_rank_fingerprint`` per aspect (default: the real rank's). The
    fingerprint lines must stay one per aspect, in this format: the server rebuilds only them.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a world of {world}")
    if detail_ranks not in POLICIES:
        raise ValueError(f"detail_ranks={detail_ranks!r}: one of {', '.join(POLICIES)}")
    detail = detail_ranks == "all" or rank == 0
    families: list[tuple[list[str], list[str]]] = []  # (comment lines, sample lines) per metric family
    for line in _real_rank_text(str(trace), detail).splitlines():
        if line.startswith("#"):
            if line.startswith("# HELP") or not families or families[-1][1]:
                families.append(([], []))
            families[-1][0].append(line)
            continue
        if not line.strip():
            continue
        name = sample_name(line)
        line = _RANK_LABEL.sub(lambda m: f'{m.group(1)}rank="{rank}"', line)
        if name == FP and fingerprints is not None:
            m = ASPECT_LABEL.search(line)
            assert m is not None, line
            line = f"{line.rsplit(' ', 1)[0]} {fmt(fingerprints[m.group(1)])}"
        if not families:
            families.append(([], []))
        families[-1][1].append(line)
    out = [line for comments, samples in families if samples for line in (*comments, *samples)]
    return "\n".join(out) + "\n"


def base_fingerprints(trace: Path = TRACE) -> dict[str, int]:
    """The real rank's fingerprints: where every simulated rank starts."""
    out = {}
    for line in _real_rank_text(str(trace)).splitlines():
        if line.startswith(FP + "{"):
            m = ASPECT_LABEL.search(line)
            assert m is not None
            out[m.group(1)] = int(float(line.rsplit(" ", 1)[1]))
    assert set(out) == set(ASPECTS), out
    return out


def fingerprints_at(base: dict[str, int], step: int, odd: bool) -> dict[str, float]:
    """Fingerprints after ``step`` more frame compiles (each a cache hit, one graph, no collectives).

    ``odd``: the rank also compiled something the others did not: a recompile of frame 0 (``0/1``),
    which missed the caches and produced one more graph. Folded as the bridge folds (hash sums mod 2**53).
    """
    v = dict(base)
    compiles = [(f"{k}/0", "fx_graph:hit aot_autograd:hit") for k in range(1, step + 1)]
    if odd:
        compiles.append(("0/1", "fx_graph:miss aot_autograd:miss"))
    for key, cache in compiles:
        v["compiles"] = (v["compiles"] + _hash53(key)) & _MASK
        v["cache"] = (v["cache"] + _hash53(f"{key} {cache}")) & _MASK
        v["graphs"] += 1
    return {k: float(x) for k, x in v.items()}
