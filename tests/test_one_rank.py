"""A job compiled on one rank (``torch.compiler.config.compile_on_one_rank``, torch 2.14 and later), live and replayed.

A real 3-rank torchrun job on gloo (tests/workloads/one_rank.py), with ``TORCH_COMPILE_ON_ONE_RANK=1`` and one
inductor cache directory: rank 0 compiles, ranks 1 and 2 wait for its compile and hit what it wrote. Each rank says
what it compiled and what it was served; replay of the job's directory says which rank compiled each graph and which
it was served to; nothing blames the rank that compiled it, nor the ranks it served. On a release without the setting
the test is skipped, naming the release.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import WORKLOADS, cache_lookups, read_otlp_json_spans, run, run_cli, spans_to_file
from tests.servers import free_port
from torch_otel._sinks.summary_text import format_text

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)


def _has_setting() -> str | None:
    import torch

    config = getattr(torch.compiler, "config", None)
    if config is None or not hasattr(config, "compile_on_one_rank"):
        return f"torch {torch.__version__} has no torch.compiler.config.compile_on_one_rank (it came with torch 2.14)"
    return None


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = _has_setting()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("one-rank")
    env = {
        "TORCH_COMPILE_ON_ONE_RANK": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache"),
        "XDG_CACHE_HOME": str(out / "xdg"),
        "TORCH_TRACE": str(out / "trace"),
        "TORCH_OTEL_SUMMARY": str(out / "summary-{rank}.json"),
        **spans_to_file(out / "spans.jsonl"),
        "TORCH_OTEL_TRACES_FILE": str(out / "spans-{rank}.jsonl"),
    }
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-port", str(free_port())]
    res = run([*argv, str(WORKLOADS / "one_rank.py"), str(out)], env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_each_rank_says_whether_it_compiled_its_graphs_or_was_served_them(job):
    for rank in range(3):
        counters = json.loads((job / f"counters-{rank}.json").read_text())
        summary = json.loads((job / f"summary-{rank}.json").read_text())
        one = summary["caches"]["one_rank"]
        spans = read_otlp_json_spans(job / f"spans-{rank}.jsonl")
        roots = [s for s in spans if s["attrs"].get("torch.compile.kind") == "frame"]
        assert roots and all(r["attrs"].get("torch.compile.compile_on_one_rank") is True for r in roots)
        assert one["compiles"] == len(roots)
        text = format_text(summary)
        if rank == 0:  # it compiled: its lookups missed, and it wrote the entries the others read
            assert counters["aot_autograd"]["autograd_cache_miss"] == 1 and counters["inductor"]["fxgraph_cache_miss"] == 1
            assert one["compiled"] == {"aot_autograd": 1, "fx_graph": 1} and one["served_by_another"] == {}
            assert "compile_on_one_rank (1 compile): compiled, for every rank (missed): aot_autograd 1, fx_graph 1" in text, text
            # its misses name no rank: the graph is the same on every rank
            assert all("rank" not in r["reason"] for r in summary["caches"]["top_reasons"]), summary["caches"]
        else:  # served what rank 0 wrote: a hit of a key it had never looked up
            assert counters["aot_autograd"]["autograd_cache_hit"] == 1 and not counters["aot_autograd"].get("autograd_cache_miss")
            assert one["compiled"] == {} and one["served_by_another"] == {"aot_autograd": 1}
            assert "served from what another rank wrote: aot_autograd 1" in text, text
            hits = [lk for lk in cache_lookups(spans, ranks=True) if lk["result"] == "hit"]
            assert hits and {lk["hit_entry"] for lk in hits} == {"other"}
    # live, the ranks' fingerprints agree: the rank that compiled is not odd
    prints = {}
    for rank in range(3):
        for line in (job / f"metrics-{rank}.txt").read_text().splitlines():
            if line.startswith('torch_compile_rank_fingerprint{aspect="cache"'):
                prints[rank] = line.rsplit(" ", 1)[1]
    assert len(prints) == 3 and len(set(prints.values())) == 1, prints


def test_replay_of_the_job_says_which_rank_compiled_each_graph_and_blames_none(job, tmp_path):
    res = run_cli("replay", str(job / "trace"), "--json", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    caches = doc["caches"]
    assert {"cache": "aot_autograd", "graph": "0/0", "compiled_on": [0], "served_to": [1, 2]} in caches["shared_graphs"]
    assert caches["odd_ranks"] == [], caches["odd_ranks"]
    assert "aot_autograd 0/0: compiled on rank 0, served to rank 1, 2" in res.stdout
    assert "missed aot_autograd" not in res.stdout
    assert "cache" not in doc["divergence"]["diverged"], doc["divergence"]
    # each rank's lookups as live: the same results and origins
    live = sorted(
        (lk["rank"], lk["name"], lk["result"], lk.get("hit_entry"))
        for rank in range(3)
        for lk in cache_lookups(read_otlp_json_spans(job / f"spans-{rank}.jsonl"), ranks=True)
    )
    back = sorted(
        (lk["rank"], lk["name"], lk["result"], lk.get("hit_entry"))
        for lk in cache_lookups(read_otlp_json_spans(tmp_path / "r.jsonl"), ranks=True)
    )
    assert back == live
