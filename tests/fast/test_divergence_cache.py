"""The cross-rank ``cache`` aspect compares what each rank's compiles got from the caches, not which ids they had.

tlparse groups ranks by their sequence of cache hits and misses, with no compile id in it (``src/lib.rs``,
``cache_sequence``). The bridge once hashed each outcome with its compile id, so ranks that only numbered their
compiles differently (a graph break on one rank where the others recompiled, every lookup a hit on a warm shared
cache) were a cache divergence: ``TorchCompileRankDivergence{aspect="cache"}`` fired, and its runbook sent the user to
a cold cache directory no rank had. Found on a 3-rank DDP job on CPU; here the same records, built by hand, go through
the live fingerprints and replay's report alike.
"""

from __future__ import annotations

from torch_otel._analysis.divergence import DivergenceReport, RankFingerprints
from torch_otel._core.compile_id import parse_compile_id
from torch_otel._model.record import CompileRecord, PhaseNode


def _compile(rank: int, cid: str, hit: bool) -> CompileRecord:
    rec = CompileRecord("frame", parse_compile_id(cid), PhaseNode("dynamo", 0, 10**6), rank=rank)
    result = "hit" if hit else "miss"
    rec.metrics = {
        "graph_op_count": 1,
        f"inductor_fx_local_cache_{result}_count": 1,
        f"aotautograd_local_cache_{result}_count": 1,
    }
    rec.seal()
    return rec


def _job(cold: int | None) -> dict[int, list[CompileRecord]]:
    """Ranks 0 and 1 recompile (0/0, 0/1), rank 2 breaks the graph (0/0, 1/0): two graphs each, from one cache;
    ``cold``: the rank whose cache was empty."""
    ids = {0: ("0/0", "0/1"), 1: ("0/0", "0/1"), 2: ("0/0", "1/0")}
    return {r: [_compile(r, cid, hit=r != cold) for cid in ids[r]] for r in ids}


def _live(job: dict[int, list[CompileRecord]]) -> dict[str, dict[int, int]]:
    fp = RankFingerprints()
    values: dict[int, dict[str, int]] = {}
    for rank, recs in job.items():
        for rec in recs:
            values[rank] = dict(fp.add(str(rank), rec))
    return {aspect: {r: v[aspect] for r, v in values.items()} for aspect in ("compiles", "cache")}


def _replay(job: dict[int, list[CompileRecord]]) -> dict[str, object]:
    report = DivergenceReport()
    for recs in job.values():
        for rec in recs:
            report.on_finish(rec)
    return report.summary()


def test_ranks_that_hit_a_warm_cache_agree_on_it_whatever_their_compile_ids():
    job = _job(cold=None)
    live = _live(job)
    assert len(set(live["compiles"].values())) == 2  # rank 2 compiled other ids: the compiles aspect says so
    assert len(set(live["cache"].values())) == 1, live["cache"]  # every lookup of every rank hit
    div = _replay(job)
    assert div["diverged"] == ["compiles"], div
    assert div["aspects"]["compiles"]["minority"] == [2]
    assert div["aspects"]["cache"] == {"diverged": False, "groups": [[0, 1, 2]]}


def test_the_cold_rank_alone_is_named_where_the_others_compiled_other_ids():
    job = _job(cold=1)
    live = _live(job)
    assert live["cache"][0] == live["cache"][2] != live["cache"][1], live["cache"]
    div = _replay(job)
    cache = div["aspects"]["cache"]
    assert cache["diverged"] and cache["groups"] == [[0, 2], [1]] and cache["minority"] == [1], cache  # as tlparse
