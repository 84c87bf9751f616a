"""Cross-rank compile divergence: what each compile says about its rank, folded into per-rank fingerprints.

Ranks of one job are expected to compile the same things: the same compile ids,
with the same cache outcomes, the same collective schedules and the same number
of graphs. A rank that does not (a rank-dependent shape, a graph break on one
rank, a cold cache on one node, a rank-dependent branch around a collective)
puts its collectives out of step with the others and hangs the job.

Each finished compile contributes one *fact* per aspect. Live, a rank folds its
facts into one number per aspect (:class:`RankFingerprints`): the sum of the
facts' 53-bit hashes, modulo 2**53, so the value is exact as a float and does
not depend on the order compiles finished in. Prometheus then compares the
ranks' values (``count_values``), and the shipped rule names the ranks in the
minority. Replay keeps the facts themselves per rank (:class:`DivergenceReport`)
and prints which ranks differ, and how, as tlparse's multi-rank report does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import IO, Any

from .._model.compilation_metrics import compile_on_one_rank
from .._model.record import CACHE_METRIC_PREFIXES, RUNTIME, CompileRecord, Sink

ASPECTS: tuple[str, ...] = ("compiles", "cache", "collectives", "graphs")
_MASK = (1 << 53) - 1  # a float64 holds every integer up to 2**53 exactly


def schedule_digest(ops: list[str]) -> str:
    """A short stable digest of an ordered list of collective op names (16 hex digits)."""
    return hashlib.blake2b("\n".join(ops).encode(), digest_size=8).hexdigest()


def _hash53(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big") & _MASK


def cache_outcome(lookups: dict[tuple[str, str, str], int]) -> str | None:
    """A compile's cache lookups (:meth:`CompileRecord.cache_counts`) as ``fx_graph:hit aot_autograd:miss``.

    None: it looked nothing up. A bypass shows only for a cache with no hit or miss.
    """
    parts = []
    for cache, _ in CACHE_METRIC_PREFIXES:
        hits = lookups.get((cache, "local", "hit"), 0) + lookups.get((cache, "remote", "hit"), 0)
        misses = lookups.get((cache, "local", "miss"), 0) + lookups.get((cache, "remote", "miss"), 0)
        if hits or misses:
            result = "hit" if not misses else "miss" if not hits else f"{hits}hit/{misses}miss"
            parts.append(f"{cache}:{result}")
        elif lookups.get((cache, "local", "bypass")):
            parts.append(f"{cache}:bypass")
    return " ".join(parts) or None


def graph_count(rec: CompileRecord) -> int:
    """The graphs this compile produced: 1 for a compile that ended with a graph (a frame with ops in it), else 0.

    Not the number of inductor graphs: a graph served from the cache is never scheduled, so that count
    would differ between a rank that hit the cache and one that missed.
    """
    if rec.fail_type is not None or rec.incomplete is not None:
        return 0
    if rec.kind == "frame":
        ops = (rec.metrics or {}).get("graph_op_count")
        return 1 if isinstance(ops, int) and not isinstance(ops, bool) and ops > 0 else 0
    return 1


def collective_schedule(rec: CompileRecord) -> list[str]:
    """Per inductor graph with collectives: ``'<digest> <count>'`` in the order torch compiled them."""
    return [f"{schedule_digest(s.collectives)} {len(s.collectives)}" for s in rec.schedules if s.collectives]


@dataclass(slots=True)
class Facts:
    """What one compile says about its rank, per aspect (``key`` names the compile: kind and id; ``kind`` alone)."""

    key: str
    cache: str | None
    collectives: list[str]
    graphs: int
    kind: str

    @property
    def cache_outcome(self) -> str | None:
        """The compile's cache outcome without its id (``frame fx_graph:hit aot_autograd:hit``): ranks compare their
        outcomes as tlparse compares their hit/miss sequences, whatever ids their compiles had (a rank that broke the
        graph where the others recompiled hit the cache as they did; the ``compiles`` aspect says the ids differ)."""
        return None if self.cache is None else f"{self.kind} {self.cache}"


def facts(rec: CompileRecord, lookups: dict[tuple[str, str, str], int] | None = None) -> Facts:
    """``lookups``: the record's :meth:`~CompileRecord.cache_counts`, when the caller has them already.

    A compile under torch 2.14's ``compile_on_one_rank`` made a graph of no rank: one rank compiles it (a miss, and
    the schedule torch logs while compiling) and the others are served it (a hit, no schedule). That is the design,
    not a rank out of step: its cache outcome counts as ``one_rank`` on every rank, and its collectives are not
    compared (all ranks run the one graph)."""
    key = rec.id_str if rec.kind == "frame" else f"{rec.kind} {rec.id_str}"
    cache = cache_outcome(rec.cache_counts() if lookups is None else lookups)
    if compile_on_one_rank(rec.metrics):
        return Facts(key, "one_rank" if cache is not None else None, [], graph_count(rec), rec.kind)
    return Facts(key, cache, collective_schedule(rec), graph_count(rec), rec.kind)


class RankFingerprints:
    """Per rank, one number per aspect summing up everything it compiled so far (order-independent)."""

    def __init__(self) -> None:
        self._values: dict[str, dict[str, int]] = {}

    def add(self, rank: str, rec: CompileRecord, lookups: dict[tuple[str, str, str], int] | None = None) -> dict[str, int]:
        """Fold one finished compile in; returns the rank's fingerprints (every aspect, from its first compile)."""
        v = self._values.setdefault(rank, dict.fromkeys(ASPECTS, 0))
        f = facts(rec, lookups)
        v["compiles"] = (v["compiles"] + _hash53(f.key)) & _MASK
        outcome = f.cache_outcome
        if outcome is not None:
            v["cache"] = (v["cache"] + _hash53(outcome)) & _MASK
        for i, sched in enumerate(f.collectives):
            v["collectives"] = (v["collectives"] + _hash53(f"{f.key} #{i} {sched}")) & _MASK
        v["graphs"] += f.graphs  # a count: readable as it is, and exact
        return v


@dataclass
class _Rank:
    compiles: list[str] = field(default_factory=list)
    cache: dict[str, int] = field(default_factory=dict)  # outcome (no compile id) -> its compiles
    collectives: dict[str, list[str]] = field(default_factory=dict)
    tensor_meta: dict[str, list[str]] = field(default_factory=dict)
    graphs: int = 0


# aspect -> what the report calls it (tlparse's words)
TITLES = {
    "compiles": "compile ids",
    "cache": "cache hit/miss patterns",
    "collectives": "collective schedules",
    "tensor_meta": "inductor tensor metadata",
    "graphs": "graph counts",
}


def _groups(signatures: dict[int, Any]) -> list[list[int]]:
    """Ranks that agree, largest group first (ties: lowest rank first)."""
    by: dict[str, list[int]] = {}
    for rank, sig in sorted(signatures.items()):
        by.setdefault(json.dumps(sig, sort_keys=True, default=str), []).append(rank)
    return sorted(by.values(), key=lambda g: (-len(g), g[0]))


class DivergenceReport(Sink):
    """Replay: every rank's compiles, compared across ranks as tlparse's multi-rank report does."""

    def __init__(self) -> None:
        self.ranks: dict[int, _Rank] = {}

    def on_finish(self, rec: CompileRecord) -> None:
        if rec.kind == RUNTIME:
            return  # not a compile (runtime autotuning, cudagraph set-up): timing differs between ranks
        r = self.ranks.setdefault(rec.rank if rec.rank is not None else 0, _Rank())
        f = facts(rec)
        r.compiles.append(f.key)
        outcome = f.cache_outcome
        if outcome is not None:
            r.cache[outcome] = r.cache.get(outcome, 0) + 1
        if f.collectives:
            r.collectives.setdefault(f.key, []).extend(f.collectives)
        metas = [s.tensor_meta for s in rec.schedules if s.tensor_meta]
        if metas:
            r.tensor_meta.setdefault(f.key, []).extend(metas)
        r.graphs += f.graphs

    def summary(self) -> dict[str, Any]:
        """The comparison, JSON-ready (``torch-otel replay --json``)."""
        ranks = sorted(self.ranks)
        out: dict[str, Any] = {"ranks": ranks, "diverged": [], "aspects": {}}
        if len(ranks) < 2:
            return out
        sigs: dict[str, dict[int, Any]] = {
            "compiles": {k: sorted(set(v.compiles)) for k, v in self.ranks.items()},
            "cache": {k: v.cache for k, v in self.ranks.items()},
            "collectives": {k: v.collectives for k, v in self.ranks.items()},
            # as tlparse: only the ranks that logged some (a graph served from the cache logs none)
            "tensor_meta": {k: v.tensor_meta for k, v in self.ranks.items() if v.tensor_meta},
            "graphs": {k: v.graphs for k, v in self.ranks.items()},
        }
        for aspect, by_rank in sigs.items():
            groups = _groups(by_rank)
            entry: dict[str, Any] = {"diverged": len(groups) > 1, "groups": groups}
            if aspect == "tensor_meta" and len(by_rank) < 2:
                entry["note"] = "not in the logs of two ranks or more: torch writes it with LOG_TLPARSE=1"
            if len(groups) > 1:
                out["diverged"].append(aspect)
                # the minority: every rank outside the largest group (none if the largest is not unique)
                top = len(groups[0])
                entry["minority"] = sorted(r for g in groups if len(g) < top for r in g)
                ref = set(by_rank[groups[0][0]]) if aspect == "compiles" else None
                if ref is not None:
                    per: dict[str, Any] = {}
                    for g in groups[1:]:
                        for r in g:
                            mine = set(by_rank[r])
                            per[str(r)] = {"missing": sorted(ref - mine), "extra": sorted(mine - ref)}
                    entry["ranks"] = per
                if aspect == "graphs":
                    entry["counts"] = {str(r): n for r, n in sorted(by_rank.items())}
            out["aspects"][aspect] = entry
        return out

    def write(self, out: IO[str], summary: dict[str, Any] | None = None) -> None:
        s = summary or self.summary()
        if len(s["ranks"]) < 2:
            return
        ranks = s["ranks"]
        verdict = "ranks compiled differently: " + ", ".join(TITLES[a] for a in s["diverged"]) if s["diverged"] else "none"
        out.write(f"cross-rank divergence ({len(ranks)} ranks: {_ranks(ranks)}): {verdict}\n")
        for aspect, e in s["aspects"].items():
            if not e["diverged"]:
                out.write(f"  {TITLES[aspect]}: " + (e.get("note") or "all ranks agree") + "\n")
                continue
            minority = f"; minority: rank(s) {_ranks(e['minority'])}" if e.get("minority") else ""
            out.write(f"  {TITLES[aspect]}: DIVERGE, groups " + " | ".join(_ranks(g) for g in e["groups"]) + minority + "\n")
            for r, d in e.get("ranks", {}).items():
                for what in ("missing", "extra"):
                    if d[what]:
                        out.write(
                            f"    rank {r} {what}: {', '.join(d[what][:20])}" + (" ..." if len(d[what]) > 20 else "") + "\n"
                        )
            if "counts" in e:
                out.write("    graphs per rank: " + ", ".join(f"{r}: {n}" for r, n in e["counts"].items()) + "\n")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
