"""Cache lookups' part of the run summary (``caches``): cold and warm starts, the time misses cost and hits saved,
why lookups missed, the ranks that missed what others hit; its text lines, and how it adds up over a job's ranks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..._core.merge import Merge, counts, num, rows, sum_int, sum_s
from ..._model.compilation_metrics import compile_on_one_rank
from ..._model.record import CompileRecord
from .events import bypass_category
from .facts import digests_of, lookups
from .trace import SHORT_KEY

__all__ = ["MERGE", "CachesPart", "summary_text"]


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def summary_text(facts: Mapping[str, Any], width: int) -> list[str]:
    """The summary's cache lines: torch's counts (else the lookups it logged), then cold and warm, and why."""
    caches: dict[str, list[str]] = {}
    for c in facts["cache"]:
        caches.setdefault(c["cache"], []).append(f"{c['location']} {c['result']} {c['count']}")
    if not caches:  # torch's metrics have no counts (an older log): the lookups it logged events for
        for c in (facts.get("caches") or {}).get("lookups") or []:
            caches.setdefault(c["cache"], []).append(f"{c['result']} {c['count']}")
    out = ["cache: " + ("; ".join(f"{k} {', '.join(v)}" for k, v in caches.items()) if caches else "no lookups")]
    c = facts.get("caches") or {}
    # a bypass first: no cache serves it on any run; then what compile_on_one_rank did, then cold and warm
    return out + _bypass_lines(c, width) + _one_rank_lines(c, width) + _cache_lines(c, width)


def _one_rank_lines(c: Mapping[str, Any], width: int) -> list[str]:
    """Under compile_on_one_rank: what this rank compiled, and what it was served from another rank's compile."""
    one = c.get("one_rank") or {}
    if not one.get("compiles"):
        return []

    def by_cache(d: Any) -> str:
        return ", ".join(f"{k} {n}" for k, n in (d or {}).items()) or "none"

    out = [
        _cut(
            f"  compile_on_one_rank ({one['compiles']} compile{'s' if one['compiles'] > 1 else ''}): "
            f"compiled, for every rank (missed): {by_cache(one.get('compiled'))}",
            width,
        ),
        _cut(
            f"    served from what another rank wrote: {by_cache(one.get('served_by_another'))}"
            + (f"; from its own entries: {by_cache(one.get('served_own'))}" if one.get("served_own") else ""),
            width,
        ),
    ]
    for g in (c.get("shared_graphs") or [])[:3]:
        on = ", ".join(str(r) for r in g["compiled_on"]) or "none"
        to = ", ".join(str(r) for r in g["served_to"]) or "none"
        out.append(_cut(f"  {g['cache']} {g['graph']}: compiled on rank {on}, served to rank {to}", width))
    return out


def _bypass_lines(c: Mapping[str, Any], width: int) -> list[str]:
    """The lookups torch bypassed, with its reason in its own words: each compiles afresh on every run."""
    rows = [r for r in c.get("bypasses") or [] if isinstance(r, Mapping)]
    if not rows:
        return []
    n = sum(int(num(r.get("count"))) for r in rows)
    cost = c.get("bypass_cost_s")
    spent = f", {cost:.2f} s compiling here" if isinstance(cost, (int, float)) and cost > 0 else ""
    out = [f"  bypassed: {n} lookup{'s' if n > 1 else ''}, compiled afresh on every run{spent}; torch's reasons:"]
    for r in rows[:3]:
        out.append(f"  {int(num(r.get('count'))):>5}  {_cut(str(r.get('cache')) + ' ' + str(r.get('reason')), width - 9)}")
    if len(rows) > 3:
        out.append(f"         ({len(rows) - 3} more bypass reasons: --json or the HTML page lists them)")
    return out


def _cache_lines(c: dict[str, Any], width: int) -> list[str]:
    """Cold and warm: the work the misses cost, the loads, what the hits saved; why misses missed; odd ranks."""
    if not c or not (c.get("hit_rate") or c.get("misses")):
        return []
    out = [  # two lines: the definition torch gives "saved" is named, within 100 columns
        f"  cold work (misses) {c['miss_cost_s']:.2f} s, loading from caches {c['load_s']:.2f} s",
        f"  saved by hits {c['saved_s']:.2f} s (torch's remote_cache_time_saved_s)",
    ]
    rates = ", ".join(f"{k} {v['rate']:.0%} ({v['hits']} of {v['hits'] + v['misses']})" for k, v in c["hit_rate"].items())
    if rates:
        out.append(f"  hit rate: {rates}")
    by = c.get("misses_by_cause") or {}
    if by:
        out.append("  misses by cause: " + ", ".join(f"{k} {n}" for k, n in by.items()))
    for r in (c.get("top_reasons") or [])[:3]:
        out.append(f"  {r['count']:>5}  {_cut(r['cache'] + ' ' + r['reason'], width - 9)}")
    for r in (c.get("odd_ranks") or [])[:3]:
        out.append(f"  {_cut(r['line'], width - 2)}")
    more = len(c.get("odd_ranks") or []) - 3
    if more > 0:
        out.append(f"  ({more} more ranks missed what others hit)")
    return out


MAX_CACHE_SLOTS = 4096  # graphs whose lookups are compared across ranks
MAX_CACHE_REASONS = 200
MAX_KEY_ROWS = 2048  # lookups whose key the summary keeps (torch-otel diff compares runs by them)
MAX_MERGED_KEY_ROWS = 65536  # and a job's summaries merged
MAX_BYPASS_REASONS = 50  # distinct bypass reasons kept


def pass_of(backward: bool | None) -> str:
    """A lookup's pass as the summary and the metrics name it: ``backward``, ``forward`` or "" (torch did not say)."""
    return "backward" if backward else "forward" if backward is False else ""


def bypass_words(reason: str | None) -> str:
    """torch's bypass reason, whole and on one line, as the summary and the diff show it."""
    return " ".join(str(reason or "torch gave no reason").split())[:1000]


class CachesPart:
    """Cold and warm starts: the time misses cost and hits saved, why misses missed, and ranks that missed alone."""

    def __init__(self) -> None:
        self.load_ns = 0
        self.miss_cost_ns = 0
        self.bypass_cost_ns = 0
        self.saved_s = 0.0
        self.lookups: Counter[tuple[str, str]] = Counter()  # (cache, result): the lookups torch logged events for
        self.causes: Counter[tuple[str, str]] = Counter()  # (cache, cause)
        self.reasons: Counter[tuple[str, str]] = Counter()  # (cache, explanation text)
        self.reason_cause: dict[tuple[str, str], str] = {}  # its cause
        # (cache, compile id, pass) -> rank -> (result, cause text); compared across ranks
        self.slots: dict[tuple[str, str, str], dict[int, tuple[str, str]]] = {}
        # each lookup's key (its first SHORT_KEY characters), as spans carry it: (rank, cache, id, pass, key, result,
        # cause); torch-otel diff compares two runs by them, whichever form each run was read from
        self.keys: list[tuple[int | None, str, str, str, str, str, str | None, tuple[str, ...]]] = []
        self.keys_left_out = 0
        # (cache, torch's bypass reason) -> lookups bypassed for it
        self.bypasses: Counter[tuple[str, str]] = Counter()
        # compiles under torch 2.14's compile_on_one_rank, and their lookups: compiled on this rank (a miss), served
        # from an entry another rank wrote (a hit of a key it had not looked up before), or from its own entry
        self.one_rank_compiles = 0
        self.one_rank: dict[str, Counter[str]] = {"compiled": Counter(), "served_by_another": Counter(), "served_own": Counter()}
        self.one_rank_slots: set[tuple[str, str, str]] = set()

    def add(self, rec: CompileRecord) -> None:
        saved = (rec.metrics or {}).get("remote_cache_time_saved_s")
        if isinstance(saved, (int, float)) and not isinstance(saved, bool) and saved > 0:
            self.saved_s += saved
        found = lookups(rec)
        if not found:
            return
        one = compile_on_one_rank(rec.metrics)
        if one:
            self.one_rank_compiles += 1
        aot_miss = [x for x in found if x.event.cache == "aot_autograd" and x.event.result == "miss"]
        aot_uncached = [x for x in found if x.event.cache == "aot_autograd" and x.event.result in ("miss", "bypass")]
        for x in found:
            lk = x.event
            self.lookups[(lk.cache, lk.result)] += 1
            if lk.result == "hit" and x.phase_ns:
                self.load_ns += x.phase_ns
            if lk.result == "miss" and x.phase_ns and (lk.cache == "aot_autograd" or not aot_miss):
                self.miss_cost_ns += x.phase_ns  # an FX graph's compile is inside its AOTAutograd miss's
            if lk.result == "bypass" and x.phase_ns and (lk.cache == "aot_autograd" or not aot_uncached):
                self.bypass_cost_ns += x.phase_ns  # the same: counted once, where no cache could serve it
            if one and lk.result == "miss":
                self.one_rank["compiled"][lk.cache] += 1
            elif one and lk.result == "hit":
                self.one_rank["served_own" if x.served == "own" else "served_by_another"][lk.cache] += 1
            e = x.explanation
            if lk.result == "bypass":
                why = (lk.cache, bypass_words(lk.bypass_reason))
                if why in self.bypasses or len(self.bypasses) < MAX_BYPASS_REASONS:
                    self.bypasses[why] += 1
                else:
                    self.bypasses[(lk.cache, "(other reasons)")] += 1
            if lk.key and lk.result in ("hit", "miss", "bypass"):
                if len(self.keys) < MAX_KEY_ROWS:
                    cause = e.cause if lk.result == "miss" and e is not None else None
                    digests = digests_of(x) if lk.result != "bypass" else ()
                    row = (rec.rank, lk.cache, rec.id_str, pass_of(lk.backward), lk.key[:SHORT_KEY], lk.result, cause, digests)
                    self.keys.append(row)
                else:
                    self.keys_left_out += 1
            if lk.result == "miss" and e is not None:
                self.causes[(lk.cache, e.cause)] += 1
                key = (lk.cache, e.text()[:300])
                if key in self.reasons or len(self.reasons) < MAX_CACHE_REASONS:
                    self.reasons[key] += 1
                    self.reason_cause.setdefault(key, e.cause)
            if rec.rank is not None and lk.result in ("hit", "miss"):
                slot = (lk.cache, rec.id_str, pass_of(lk.backward))
                if one and len(self.one_rank_slots) < MAX_CACHE_SLOTS:
                    self.one_rank_slots.add(slot)  # a graph of no rank: one rank compiles it for all
                ranks = self.slots.get(slot)
                if ranks is None and len(self.slots) < MAX_CACHE_SLOTS:
                    ranks = self.slots[slot] = {}
                if ranks is not None:
                    # against another rank that looked the graph up (replay of a job), else its own explanation
                    said = (getattr(e, "across", None) or e.short()) if e is not None else ""
                    ranks.setdefault(rec.rank, (lk.result, str(said)))

    def odd_ranks(self) -> list[dict[str, Any]]:
        """Per graph that some ranks hit and others missed: each rank that missed, with why."""
        out = []
        for (cache, cid, pass_), ranks in sorted(self.slots.items()):
            hit = sorted(r for r, (res, _) in ranks.items() if res == "hit")
            missed = sorted(r for r, (res, _) in ranks.items() if res == "miss")
            if not hit or not missed or (cache, cid, pass_) in self.one_rank_slots:
                continue  # under compile_on_one_rank the rank that missed compiled the graph for all: no odd rank
            graph = f"{cid} {pass_}".strip()
            others = ", ".join(str(r) for r in hit[:8]) + (" ..." if len(hit) > 8 else "")
            for r in missed:
                why = ranks[r][1]
                out.append(
                    {
                        "rank": r,
                        "cache": cache,
                        "graph": graph,
                        "hit_on": hit,
                        "reason": why,
                        "line": f"rank {r} missed {cache} {graph} (rank {others} hit it): {why}",
                    }
                )
        return out

    def shared_graphs(self) -> list[dict[str, Any]]:
        """Per graph compiled under compile_on_one_rank (replay of a job): the ranks that compiled it (their lookup
        missed) and those it was served to (theirs hit)."""
        out = []
        for slot in sorted(self.one_rank_slots):
            ranks = self.slots.get(slot) or {}
            cache, cid, pass_ = slot
            compiled = sorted(r for r, (res, _) in ranks.items() if res == "miss")
            served = sorted(r for r, (res, _) in ranks.items() if res == "hit")
            if len(ranks) > 1:
                out.append({"cache": cache, "graph": f"{cid} {pass_}".strip(), "compiled_on": compiled, "served_to": served})
        return out

    def to_dict(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The ``caches`` part; ``facts["cache"]`` are torch's counts (CompilationMetrics), the summary's own."""
        torch_counts = {(c["cache"], c["location"], c["result"]): c["count"] for c in facts.get("cache") or []}
        rates: dict[str, dict[str, Any]] = {}
        counted = {cache for (cache, _loc, _r) in torch_counts}
        # torch's counts (its CompilationMetrics); a cache they lack (older logs) by the lookups' events
        found = [(cache, result, n) for (cache, _loc, result), n in sorted(torch_counts.items())]
        found += [(cache, result, n) for (cache, result), n in sorted(self.lookups.items()) if cache not in counted]
        for cache, result, n in found:
            if result in ("hit", "miss"):
                r = rates.setdefault(cache, {"hits": 0, "misses": 0})
                r["hits" if result == "hit" else "misses"] += n
        for r in rates.values():
            r["rate"] = round(r["hits"] / (r["hits"] + r["misses"]), 4) if r["hits"] + r["misses"] else 0.0
        by_cause: Counter[str] = Counter()
        for (_, cause), n in self.causes.items():
            by_cause[cause] += n
        return {
            "miss_cost_s": round(self.miss_cost_ns / 1e9, 6),
            "bypass_cost_s": round(self.bypass_cost_ns / 1e9, 6),
            "load_s": round(self.load_ns / 1e9, 6),
            "saved_s": round(self.saved_s, 6),
            "hit_rate": rates,
            "lookups": [{"cache": c, "result": r, "count": n} for (c, r), n in sorted(self.lookups.items())],
            "misses": sum(self.causes.values()),
            "misses_by_cause": dict(by_cause.most_common()),
            "misses_by_cache_and_cause": [{"cache": c, "cause": k, "count": n} for (c, k), n in sorted(self.causes.items())],
            "top_reasons": [
                {"cache": c, "cause": self.reason_cause.get((c, t)), "reason": t, "count": n}
                for (c, t), n in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
            ],
            "odd_ranks": self.odd_ranks(),
            "bypasses": [
                {"cache": c, "reason": r, "category": bypass_category(r), "count": n}
                for (c, r), n in sorted(self.bypasses.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "keys": sorted((_key_row(k) for k in self.keys), key=_key_order),
            "keys_left_out": self.keys_left_out,
            "one_rank": {"compiles": self.one_rank_compiles, **{k: dict(sorted(v.items())) for k, v in self.one_rank.items()}},
            "shared_graphs": self.shared_graphs(),
        }


def _key_row(k: tuple[int | None, str, str, str, str, str, str | None, tuple[str, ...]]) -> dict[str, Any]:
    rank, cache, cid, pass_, key, result, cause, digests = k
    row: dict[str, Any] = {"cache": cache, "id": cid, "pass": pass_, "key": key, "result": result}
    if cause is not None:
        row["cause"] = cause
    if digests:
        row["parts"] = dict(d.split(":", 1) for d in digests if ":" in d)
    if rank is not None:
        row["rank"] = rank
    return row


def _key_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    rank = r.get("rank")
    return (rank if isinstance(rank, int) else -1, str(r.get("id")), str(r.get("cache")), str(r.get("pass")), str(r.get("key")))


def _key_rows(values: list[Any]) -> list[dict[str, Any]]:
    """Each summary's lookups' keys, one list (a job's ranks each looked up their own)."""
    out = [dict(r) for v in values for r in v or [] if isinstance(r, Mapping)]
    return sorted(out, key=_key_order)[:MAX_MERGED_KEY_ROWS]


def _hit_rates(values: list[Any]) -> dict[str, dict[str, Any]]:
    rates: dict[str, dict[str, Any]] = {}
    for hit_rate in values:
        for cache, r in (hit_rate or {}).items():
            x = rates.setdefault(cache, {"hits": 0, "misses": 0})
            x["hits"] += int(num(r.get("hits")))
            x["misses"] += int(num(r.get("misses")))
    for x in rates.values():
        x["rate"] = round(x["hits"] / (x["hits"] + x["misses"]), 4) if x["hits"] + x["misses"] else 0.0
    return rates


MERGE = Merge(
    section={
        "miss_cost_s": Merge(sum_s),
        "bypass_cost_s": Merge(sum_s),
        "load_s": Merge(sum_s),
        "saved_s": Merge(sum_s),
        "hit_rate": Merge(_hit_rates),
        "lookups": Merge(rows(lambda r: (r.get("cache"), r.get("result")), ("count",))),
        "misses": Merge(sum_int),
        "misses_by_cause": Merge(counts),
        "misses_by_cache_and_cause": Merge(rows(lambda r: (r.get("cache"), r.get("cause")), ("count",))),
        "top_reasons": Merge(rows(lambda r: (r.get("cache"), r.get("reason")), ("count",))),
        "odd_ranks": Merge(why="found by comparing ranks, which one rank's summary cannot"),
        "bypasses": Merge(rows(lambda r: (r.get("cache"), r.get("reason")), ("count",))),
        "keys": Merge(_key_rows),
        "keys_left_out": Merge(sum_int),
        "one_rank": Merge(
            section={
                "compiles": Merge(sum_int),
                "compiled": Merge(counts),
                "served_by_another": Merge(counts),
                "served_own": Merge(counts),
            }
        ),
        "shared_graphs": Merge(why="found by comparing ranks, which one rank's summary cannot"),
    }
)
