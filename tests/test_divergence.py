"""Ranks that compile differently, caught live by the shipped rule on a real Prometheus, and on replay as tlparse does.

Five real ``torch-otel run -- torchrun --nproc-per-node 3`` jobs (gloo, CPU) run at once
(tests/workloads/diverge.py): a control whose ranks compile the same things seconds apart, and
one job per kind of divergence, each with one odd rank. A real Prometheus scrapes all 15 ranks'
ports and evaluates grafana/alerts/torch-compile-rules.yml as shipped. Then each job's
TORCH_TRACE directory is replayed, and tlparse's multi-rank report is read for comparison.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, clean_env, read_otlp_json_spans, run_cli, stop_processes, torchrun_under_torch_otel
from tests.servers import Prometheus, free_port, wait_until

RULES = Path(__file__).resolve().parent.parent / "grafana" / "alerts" / "torch-compile-rules.yml"
BIN = Path(sys.executable).parent
ALERT = "TorchCompileRankDivergence"

# job -> (odd rank, the aspects that must name it; the others must stay quiet)
JOBS: dict[str, tuple[int, set[str]]] = {
    "control": (-1, set()),
    "shape": (1, {"compiles", "graphs"}),
    "graph_break": (2, {"compiles", "graphs"}),
    "collectives": (0, {"collectives"}),
    "cold_cache": (1, {"cache"}),
}


def _torchrun(job: str, odd: int, tmp: Path, port: int, nproc: int = 3) -> subprocess.Popen[bytes]:
    d = tmp / job
    d.mkdir(exist_ok=True)
    env = {
        "SCENARIO": job,
        "ODD_RANK": str(odd),
        "SKEW_S": "3",
        "COLD_CACHE_DIR": str(tmp / "cold-cache"),
        "TORCH_TRACE": str(d / "trace"),
        "OTEL_TRACES_EXPORTER": "none",
        "TORCH_OTEL_TRACES_FILE": str(d / "spans.jsonl"),
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        "RELEASE_FILE": str(tmp / "release"),
        "OMP_NUM_THREADS": "1",
    }
    if job == "shape":  # the rank sampler: rank 0's compiles, and the others' failed, slow or recompiling ones
        env["OTEL_TRACES_SAMPLER"] = "torch_otel_rank"
    if job == "collectives":
        # every rank schedules its graph itself: a graph served from the cache comes with no schedule (torch logs none)
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    argv = torchrun_under_torch_otel(nproc, WORKLOADS / "diverge.py")
    with (d / "out.log").open("wb") as out:
        return subprocess.Popen(argv, env=clean_env(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Any:
    tmp = tmp_path_factory.mktemp("divergence")
    # Warm the shared inductor cache with the cold-cache job's graph (one rank, so nobody is cold).
    warm_dir = tmp / "warmup"
    warm_dir.mkdir()
    warm = _torchrun("cold_cache", -1, warm_dir, free_port(), nproc=1)
    (warm_dir / "release").touch()
    assert warm.wait(300) == 0, (warm_dir / "cold_cache" / "out.log").read_text()[-3000:]
    ports = {job: free_port(consecutive=3) for job in JOBS}
    targets = [f"127.0.0.1:{p + i}" for p in ports.values() for i in range(3)]
    with Prometheus(targets, rule_files=[RULES]) as prom:
        procs = {job: _torchrun(job, odd, tmp, ports[job]) for job, (odd, _) in JOBS.items()}
        try:

            def holding() -> bool:
                for job, p in procs.items():
                    log = (tmp / job / "out.log").read_text(errors="replace")
                    assert p.poll() is None, f"{job} exited early:\n{log[-3000:]}"
                    if log.count("HOLDING") < 3:
                        return False
                return True

            wait_until(holding, 400, "every rank of every job to finish compiling")
            settled = time.monotonic()
            yield tmp, prom, ports, settled
        finally:
            (tmp / "release").touch()
            stop_processes(procs.values(), wait=60)


def _panel_expr(dashboard: str, title: str) -> str:
    """A panel's query, as grafana/dashboards/ ships it."""
    doc = json.loads((Path(__file__).resolve().parent.parent / "grafana" / "dashboards" / f"{dashboard}.json").read_text())
    (panel,) = [p for p in doc["panels"] if p.get("title") == title]
    return panel["targets"][0]["expr"]


def _job_of(instance: str, ports: dict[str, int]) -> tuple[str, int]:
    port = int(instance.rsplit(":", 1)[1])
    for job, base in ports.items():
        if base <= port < base + 3:
            return job, port - base
    raise AssertionError(instance)


def test_the_alert_names_each_odd_rank_and_never_the_control(jobs):
    tmp, prom, ports, settled = jobs

    def firing() -> set[tuple[str, str, str]]:
        out = set()
        for a in prom.api("alerts")["alerts"]:
            if a["labels"]["alertname"] == ALERT and a["state"] == "firing":
                job, local = _job_of(a["labels"]["instance"], ports)
                assert a["labels"]["rank"] == str(local)  # the rank label is the rank that serves that port
                out.add((job, a["labels"]["aspect"], a["labels"]["rank"]))
        return out

    want = {(job, aspect, str(odd)) for job, (odd, aspects) in JOBS.items() for aspect in aspects}
    got = wait_until(lambda: (f := firing()) >= want and f, 150, f"{ALERT} to name {sorted(want)}")
    fired_after = time.monotonic() - settled
    time.sleep(5)  # nothing more fires once the odd ones did
    got = firing()
    assert got == want, (sorted(got), sorted(want))
    # The annotations say which rank, which aspect, and what to look at next.
    alert = next(
        a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == ALERT and a["labels"]["aspect"] == "collectives"
    )
    assert alert["annotations"]["summary"].startswith("Rank 0 of torch compiled differently from the other ranks: collectives")
    assert "shares its collectives fingerprint with 1 rank(s) in all" in alert["annotations"]["description"]
    assert "torch.compile.collectives.digest" in alert["annotations"]["runbook"]
    # The cache aspect names the odd rank's latest miss: the cache, the graph, why (torch_compile_cache_last_miss)
    cache_alert = next(
        a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == ALERT and a["labels"]["aspect"] == "cache"
    )
    assert re.search(
        r"Its latest cache miss: (fx_graph|aot_autograd) graph \d+/\d+( forward| backward)?, cause "
        r"(first_seen|not_in_cache|versions|system|config|inputs|graph|other)",
        cache_alert["annotations"]["description"],
    ), cache_alert["annotations"]["description"]
    # Each job's ranks are told apart by torchrun's run id, and the ranks' fingerprints disagree only where expected.
    runs = {r["metric"]["run_id"] for r in prom.query("torch_compile_rank_fingerprint")}
    assert len(runs) == len(JOBS) and "" not in runs
    sizes = prom.query(f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}')  # the alert's own series
    odd = {(_job_of(r["metric"]["instance"], ports)[0], r["metric"]["aspect"], r["metric"]["rank"]) for r in sizes}
    assert odd == want, sorted(odd)
    # The ranks dashboard's "Ranks that compiled differently" lists those ranks and no other (it has no guards: the cold
    # rank's collectives differ too, which the alert leaves to the cache aspect), one row per rank and aspect.
    panel = _panel_expr("torch-compile-ranks", "Ranks that compiled differently")
    job_of_run = {
        r["metric"]["run_id"]: _job_of(r["metric"]["instance"], ports)[0] for r in prom.query("torch_compile_rank_fingerprint")
    }
    rows = prom.query(panel.replace("$job", ".*").replace("$rank", ".*"))
    listed = {(job_of_run[r["metric"]["run_id"]], r["metric"]["aspect"], r["metric"]["rank"]) for r in rows}
    assert len(rows) == len(listed), rows  # one row per rank and aspect
    assert want <= listed <= want | {("cold_cache", "collectives", "1")}, sorted(listed)
    print(f"\n{ALERT} fired {fired_after:.0f} s after the last rank finished compiling")


def test_a_further_rank_serves_at_most_50_series_and_rank_0_the_detail(jobs):
    """Default settings: rank 0 is the detail rank (phase and duration histograms); ranks 1 and 2 serve a bounded set."""
    _, prom, ports, _ = jobs
    counts = {
        _job_of(r["metric"]["instance"], ports): int(r["value"][1])
        for r in prom.query('count by (instance) ({__name__=~"torch_compile_.*"})')
    }
    assert len(counts) == 3 * len(JOBS)
    for (job, rank), n in sorted(counts.items()):
        if rank:
            assert n <= 50, (job, rank, n)
        else:
            assert n > 100, (job, rank, n)  # the histograms' buckets
    print("\ntorch_compile_* series per rank:", sorted(counts.items()))
    phases = prom.query("count by (instance) (torch_compile_phase_duration_seconds_count)")
    assert {_job_of(r["metric"]["instance"], ports)[1] for r in phases} == {0}


def test_the_rank_sampler_keeps_rank_0_and_the_odd_ranks_recompile_and_counts_every_compile_it_drops(jobs):
    """OTEL_TRACES_SAMPLER=torch_otel_rank on the shape job: rank 1 alone recompiles (a new batch size)."""
    tmp, prom, ports, _ = jobs
    roots = [s for s in read_otlp_json_spans(tmp / "shape" / "spans.jsonl") if "torch.compile.kind" in s["attrs"]]
    kept = Counter((int(r["attrs"]["torch.distributed.rank"]), r["attrs"]["torch.compile.sampled_because"]) for r in roots)
    assert {why for _, why in kept} <= {"rank", "recompile"}
    assert kept[(0, "rank")] >= 1 and kept[(1, "recompile")] == 1 and not kept[(2, "rank")] and not kept[(1, "rank")]
    assert sum(n for (rank, _), n in kept.items() if rank == 2) == 0
    for local in range(3):
        instance = f'instance="127.0.0.1:{ports["shape"] + local}"'
        compiles = sum(float(r["value"][1]) for r in prom.query(f"torch_compile_compiles_total{{{instance}}}"))
        dropped = sum(float(r["value"][1]) for r in prom.query(f"torch_otel_compiles_not_sampled_total{{{instance}}}"))
        spans = sum(n for (rank, _), n in kept.items() if rank == local)
        assert compiles >= 1 and compiles == spans + dropped, (
            local,
            compiles,
            spans,
            dropped,
        )  # every compile: a trace or a count
        assert (dropped == 0) == (local == 0)


def test_the_odd_ranks_spans_carry_their_collective_schedule(jobs):
    tmp = jobs[0]
    spans = read_otlp_json_spans(tmp / "collectives" / "spans.jsonl")
    by_rank: dict[int, dict[str, Any]] = {}
    for s in spans:
        if s["name"] == "torch.compile" and s["attrs"].get("torch.compile.id") == "0/0":
            by_rank[int(s["attrs"]["torch.distributed.rank"])] = s["attrs"]
    assert set(by_rank) == {0, 1, 2}
    ops = "torch.ops._c10d_functional.all_reduce_.default", "torch.ops._c10d_functional.wait_tensor.default"
    assert [by_rank[r]["torch.compile.collectives.count"] for r in (0, 1, 2)] == ["4", "2", "2"]
    assert by_rank[1]["torch.compile.collectives.schedule"]["values"] == [{"stringValue": op} for op in ops]
    digests = {r: a["torch.compile.collectives.digest"] for r, a in by_rank.items()}
    assert digests[1] == digests[2] != digests[0]


def _tlparse(trace: Path, out: Path) -> dict[str, Any]:
    """tlparse's multi-rank verdicts, read from its landing page (it writes them nowhere else)."""
    subprocess.run(  # tlparse, the reference reader: another program than the bridge's
        [str(BIN / "tlparse"), "--all-ranks-html", str(trace), "-o", str(out), "--overwrite", "--no-browser"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    page = unescape(re.sub(r"<[^>]+>", " ", (out / "index.html").read_text()))
    page = re.sub(r"\s+", " ", page)

    def groups(title: str) -> set[frozenset[int]] | None:
        m = re.search(re.escape(title) + r"(.*?)(?:Warning:|Multi-Rank TLParse Report)", page)
        if m is None:
            return None
        return {
            frozenset(int(r) for r in g.split(", "))
            for g in re.findall(r"Ranks: ([\d, ]+?)(?= Ranks:| $|$)", m.group(1).strip() + " ")
        }

    return {
        "compiles": "Diverging Compilation IDs detected" in page,
        "cache": groups("Cache hit/miss pattern groups:"),
        "collectives": groups("Collective operation sequence groups:"),
        "tensor_meta": "divergent inductor tensor metadata" in page,
    }


@pytest.mark.parametrize("job", list(JOBS))
def test_replay_reports_the_divergence_tlparse_reports(jobs, job):
    tmp = jobs[0]
    odd, aspects = JOBS[job]
    trace = tmp / job / "trace"
    r = run_cli("replay", str(trace), "-o", str(tmp / job / "replay.jsonl"), "--json", str(tmp / job / "r.json"), script=True)
    assert r.returncode == 0, r.stderr
    div = json.loads((tmp / job / "r.json").read_text())["divergence"]
    assert div["ranks"] == [0, 1, 2]
    ours = set(div["diverged"])
    assert ours == aspects, (ours, r.stdout)
    for aspect in ours:
        minority = div["aspects"][aspect]["minority"]
        assert minority == [odd], (aspect, div["aspects"][aspect])
    if job in ("shape", "graph_break"):
        extra = div["aspects"]["compiles"]["ranks"][str(odd)]["extra"]
        assert extra == (["0/1"] if job == "shape" else ["1/0"]), extra
    if ours:
        assert "cross-rank divergence (3 ranks: 0, 1, 2): ranks compiled differently" in r.stdout
    else:
        assert "cross-rank divergence (3 ranks: 0, 1, 2): none" in r.stdout

    tl = _tlparse(trace, tmp / job / "tlparse")
    for aspect in ("cache", "collectives"):
        ours_groups = {frozenset(g) for g in div["aspects"][aspect]["groups"]} if aspect in ours else None
        assert tl[aspect] == ours_groups, (aspect, tl[aspect], ours_groups)
    if tl["compiles"] != ("compiles" in ours):
        # tlparse is wrong here, and we are right: it keys records that belong to no compile (the C++ build of
        # the cold rank, which no other rank ran) as a compile id "-/-", so the ranks' id sets differ by that alone.
        assert job == "cold_cache" and "compiles" not in ours, tl
        keys = {
            rank: set(json.loads((tmp / job / "tlparse" / f"rank_{rank}" / "compile_directory.json").read_text()))
            for rank in (0, 1, 2)
        }
        differ = (keys[0] | keys[1] | keys[2]) - (keys[0] & keys[1] & keys[2])
        assert differ and all("-/-" in k or k.startswith("unknown") for k in differ), keys
    assert not tl["tensor_meta"]  # LOG_TLPARSE is off: no tensor metadata on either side


def test_tlparse_warns_of_diverging_compile_ids_where_there_are_none(tmp_path):
    """A real 3-rank inductor log (CPU) where rank 1 alone compiled cold, so it alone built C++ kernels.

    tlparse 0.4.3 warns that compile ids diverge. They do not: every rank compiled ``0/0`` only. tlparse
    files records that carry a rank but no compile id (the cold rank's ``compile_file`` phases) under a
    pseudo id ``[-/-]``, which then differs between ranks. torch-otel gives those phases to the one
    compile in flight, and reports what really differs: the cold rank's cache misses.
    """
    import gzip
    import shutil

    data = Path(__file__).parent / "data" / "cold-cache-cpp-3-ranks"
    trace = tmp_path / "trace"
    trace.mkdir()
    for gz in sorted(data.glob("*.log.gz")):
        with gzip.open(gz) as src, open(trace / gz.name.removesuffix(".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    tl = _tlparse(trace, tmp_path / "tlparse")
    keys = {r: set(json.loads((tmp_path / "tlparse" / f"rank_{r}" / "compile_directory.json").read_text())) for r in (0, 1, 2)}
    assert tl["compiles"] and keys == {0: {"[0/0]"}, 1: {"[-/-]", "[0/0]"}, 2: {"[0/0]"}}, (tl, keys)
    assert tl["cache"] == {frozenset({0, 2}), frozenset({1})}
    r = run_cli("replay", str(trace), "-o", str(tmp_path / "s.jsonl"), "--json", str(tmp_path / "r.json"), script=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["divergence"]["diverged"] == ["cache"] and doc["divergence"]["aspects"]["cache"]["minority"] == [1]
    assert doc["replay"]["lines_skipped"] == {}  # the C++ builds' phases were not dropped: they joined rank 1's compile
    spans = read_otlp_json_spans(tmp_path / "s.jsonl")
    cpp = [s for s in spans if s["name"] == "compile_file"]
    assert any(s["attrs"].get("torch.compile.attributed") for s in cpp)  # the worker thread's, which carries no id
