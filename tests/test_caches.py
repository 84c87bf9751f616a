"""Why a compile missed the cache: real inductor runs on one real cache directory, live and replayed, against torch.

One module fixture runs the workload (tests/workloads/caches.py) in a new process per scenario, all on one
``TORCHINDUCTOR_CACHE_DIR``, each with ``TORCH_TRACE``: a cold run, a warm run, one inductor config flipped, a new
input shape, a forced bypass; then a 2-rank torchrun job on the warm directory where rank 1 alone flips the config.
Live, nothing about the cache is configured: the bridge's key index beside the cache directory is each run's
baseline. Replay names the previous run's TORCH_TRACE as ``--baseline``. Every count is checked against torch's
own counters from the same process, and against tlparse on the same log.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, cache_lookups, read_otlp_json_spans, run, run_cli, run_python, spans_to_file
from tests.servers import free_port
from torch_otel._features.cache_lookups.events import Component
from torch_otel._features.cache_lookups.explain import KeySeen
from torch_otel._features.cache_lookups.key_index import MAX_INDEX_BYTES, MAX_INDEX_KEYS, KeyIndex, index_document

SCENARIOS = ("cold", "warm", "shape", "config", "bypass")  # then the 2-rank job
LATER = ("code", "print_in_loop", "rename", "break", "infer", "infer_warm", "frozen")  # then the directory wiped
# Every run, in the order it ran, each with the run before it on its cache directory: what `torch-otel diff` is given
ORDER = (*SCENARIOS, "job", *LATER, "wiped", "autocast_base", "bf16", "job3")


def _replay(log_dir: Path, out: Path, baseline: Path | None) -> dict[str, Any]:
    args = [str(log_dir), "-o", str(out / "replayed.jsonl"), "--json", str(out / "replayed.json")]
    res = run_cli("replay", *args, *(["--baseline", str(baseline)] if baseline else []), script=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return {
        "json": json.loads((out / "replayed.json").read_text()),
        "spans": read_otlp_json_spans(out / "replayed.jsonl"),
        "out": res.stdout,
    }


def _metric(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out.append((labels, float(m.group(2))))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("caches")
    cache = tmp / "inductor-cache"
    xdg = tmp / "xdg-cache"  # where the copy of the key index is kept, outside the cache directory
    got: dict[str, Any] = {"tmp": tmp, "cache": cache, "xdg": xdg}

    def scenario(name: str, mode: str, cache: Path = cache, xdg: Path = xdg, extra: dict[str, str] | None = None) -> None:
        out = tmp / name
        env = {
            "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "OMP_NUM_THREADS": "1",  # as torchrun sets it for the job below: inductor's key holds the thread count
            "XDG_CACHE_HOME": str(xdg),
            "TORCH_TRACE": str(out / "trace"),
            "TORCH_OTEL_SUMMARY": str(out / "summary.json"),
            **spans_to_file(out / "spans.jsonl"),
            **(extra or {}),
        }
        index = cache / "torch-otel" / "keys-rank0.json"
        kept = list(xdg.glob("torch-otel/cache-keys/*/keys-rank0.json"))
        if index.exists() or kept:  # what this run explains its misses against: replay is given the same baseline
            (out / "baseline").mkdir(parents=True)
            shutil.copy(index if index.exists() else kept[0], out / "baseline" / index.name)
        res = run_python(WORKLOADS / "caches.py", env, args=[str(out), mode], timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        got[name] = {
            "out": out,
            "summary": json.loads((out / "summary.json").read_text()),
            "spans": read_otlp_json_spans(out / "spans.jsonl"),
            "counters": json.loads((out / "counters-0.json").read_text()),
            "metrics": (out / "metrics-0.txt").read_text(),
            "index": json.loads(index.read_text()) if index.exists() else None,
            "stdout": res.stdout,
            "stderr": res.stderr,
        }

    def job(name: str, ranks: int, cache: Path = cache, xdg: Path = xdg, extra: dict[str, str] | None = None) -> None:
        """A torchrun job of ``ranks`` processes on ``cache``; each rank writes its summary and spans."""
        out = tmp / name
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port"]
        env = {
            "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "XDG_CACHE_HOME": str(xdg),
            "TORCH_TRACE": str(out / "trace"),
            "TORCH_OTEL_SUMMARY": str(out / "summary-{rank}.json"),
            **spans_to_file(out / "spans.jsonl"),
            "TORCH_OTEL_TRACES_FILE": str(out / "spans-{rank}.jsonl"),
            **(extra or {}),
        }
        if (cache / "torch-otel").exists():  # the indexes each rank explains against: replay is given the same
            shutil.copytree(cache / "torch-otel", out / "baseline")
        out.mkdir(exist_ok=True)
        res = run([*argv, str(free_port()), str(WORKLOADS / "caches.py"), str(out), "warm"], env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        got[name] = {"out": out, "stderr": res.stderr, "ranks": ranks}

    for name in SCENARIOS:
        scenario(name, name)
    # A 2-rank job on the warm directory: rank 1 alone runs with another config, so it misses what rank 0 hits.
    job("job", 2, extra={"ODD_RANK": "1"})
    # After the job: the model's code changed (gelu for relu); a print in a loop sends forward to eager; the layer
    # renamed (the graph dynamo hands over changes, not the graphs inductor compiles); a graph break that shortens
    # the graph; inference, twice (cold, then warm), then with inductor's freezing, which torch bypasses both caches
    # for. Then the cache directory wiped as users wipe it (rm -rf), and the workload run again as before the change
    # (the C++ kernels inductor built are put back: below).
    for name in LATER:
        scenario(name, "infer" if name == "infer_warm" else name)
    # The C++ kernels inductor built, kept aside: every folder of the directory but torch's two caches (FX graph,
    # AOTAutograd) and the bridge's key index. They are no cache the bridge reports, and a run that finds them misses
    # both caches as before; it only skips g++ building the same kernels again (about 14 s a run here).
    kernels = tmp / "kernels"
    for part in cache.iterdir():
        if part.is_dir() and part.name not in ("fxgraph", "aotautograd", "torch-otel", "locks"):
            shutil.copytree(part, kernels / part.name)
    shutil.rmtree(cache)
    shutil.copytree(kernels, cache)  # the folders torch's caches and the key index were in are gone, as after rm -rf
    scenario("wiped", "warm")
    # Autocast turned on (bf16), with torch's AOTAutograd key parts logged (its autograd_cache logger at DEBUG), on a
    # directory of its own: the run before it, then the same step under autocast.
    parts = {"TORCH_LOGS": "+torch._functorch._aot_autograd.autograd_cache"}
    shutil.copytree(kernels, tmp / "autocast-cache")
    scenario("autocast_base", "warm", tmp / "autocast-cache", tmp / "autocast-xdg", parts)
    scenario("bf16", "bf16", tmp / "autocast-cache", tmp / "autocast-xdg", parts)
    # A 3-rank job on a cache directory of its own, cold: each rank compiles graphs of its own (its batch is 4 plus its
    # rank), with no key seen before, live or on replay.
    job("job3", 3, tmp / "job3-cache", tmp / "job3-xdg", {"RANK_BATCH": "4", "PROVENANCE": "1"})
    return got


def _causes(lookups: list[dict[str, Any]]) -> list[tuple[str, str, str | None, tuple[str, ...]]]:
    return sorted(
        (lk["id"], lk["name"], lk.get("miss_cause"), tuple(lk.get("miss_changes") or ()))
        for lk in lookups
        if lk["result"] == "miss"
    )


def test_a_cold_run_misses_every_lookup_and_says_first_seen(runs):
    cold = runs["cold"]
    lookups = cache_lookups(cold["spans"])
    misses = Counter(lk["name"] for lk in lookups if lk["result"] == "miss")
    assert misses == {
        "fx_graph": cold["counters"]["inductor"]["fxgraph_cache_miss"],
        "aot_autograd": cold["counters"]["aot_autograd"]["autograd_cache_miss"],
    }
    assert {lk["miss_cause"] for lk in lookups} == {"first_seen"} and {lk["miss_reason"] for lk in lookups} == {"first seen"}
    assert all(lk["key"] and len(lk["key"]) == 12 and lk["time_s"] > 0 for lk in lookups)
    caches = cold["summary"]["caches"]
    assert caches["misses_by_cause"] == {"first_seen": sum(misses.values())}
    assert caches["hit_rate"]["fx_graph"] == {"hits": 0, "misses": 2, "rate": 0.0}
    assert caches["miss_cost_s"] > 0 and caches["load_s"] == 0
    for cache, n in misses.items():
        assert _metric(cold["metrics"], "torch_compile_cache_misses_total") and (
            {"cache": cache, "cause": "first_seen", "rank": "0"},
            float(n),
        ) in _metric(cold["metrics"], "torch_compile_cache_misses_total")


def test_a_warm_run_hits_and_the_time_saved_is_torchs_record(runs):
    warm = runs["warm"]
    c = warm["counters"]
    assert c["aot_autograd"].get("autograd_cache_hit") == 1 and c["inductor"].get("fxgraph_cache_hit") == 2
    assert not c["inductor"].get("fxgraph_cache_miss") and not c["aot_autograd"].get("autograd_cache_miss")
    lookups = cache_lookups(warm["spans"])
    assert lookups and {lk["result"] for lk in lookups} == {"hit"}
    caches = warm["summary"]["caches"]
    assert caches["hit_rate"] == {
        "aot_autograd": {"hits": 1, "misses": 0, "rate": 1.0},
        "fx_graph": {"hits": 2, "misses": 0, "rate": 1.0},
    }
    assert caches["misses"] == 0 and caches["miss_cost_s"] == 0 and caches["load_s"] > 0
    # torch's own record of the time its cache hits saved, in the same run's CompilationMetrics
    saved = 0.0
    for line in next((warm["out"] / "trace").glob("*.log")).read_text().splitlines():
        if '"compilation_metrics"' in line:
            md = json.loads(line.split("] ", 1)[1])
            saved += md["compilation_metrics"].get("remote_cache_time_saved_s") or 0.0
    assert saved > 0 and abs(caches["saved_s"] - saved) < 1e-6
    assert ({"rank": "0"}, pytest.approx(saved)) in [
        (lab, v) for lab, v in _metric(warm["metrics"], "torch_compile_cache_time_saved_seconds_total")
    ]


def test_a_changed_config_is_named_as_the_cause(runs):
    lookups = cache_lookups(runs["config"]["spans"])
    misses = [lk for lk in lookups if lk["result"] == "miss"]
    assert misses and {lk["miss_cause"] for lk in misses} == {"config"}
    for lk in misses:
        assert lk["miss_changes"][0].startswith("inductor config size_asserts: "), lk
        assert "against 0/0 in an earlier run" in lk["miss_reason"]
    assert runs["config"]["summary"]["caches"]["misses_by_cause"] == {"config": len(misses)}
    last = _metric(runs["config"]["metrics"], "torch_compile_cache_last_miss")
    assert [lab for lab, _ in last] == [
        {
            "cache": "fx_graph",
            "cause": "config",
            "component": "inductor_config[size_asserts]",
            "graph": "0/0 backward",
            "rank": "0",
        }
    ]


def test_a_new_input_shape_is_named_as_the_cause(runs):
    misses = [lk for lk in cache_lookups(runs["shape"]["spans"]) if lk["result"] == "miss"]
    fx = [lk for lk in misses if lk["name"] == "fx_graph"]
    assert fx and all(lk["miss_cause"] == "inputs" for lk in fx), fx
    assert any(re.match(r"input \d+: shape \[4, 8\] → \[8, 8\]", c) for lk in fx for c in lk["miss_changes"]), fx


def test_a_forced_bypass_says_why(runs):
    byp = [lk for lk in cache_lookups(runs["bypass"]["spans"]) if lk["result"] == "bypass"]
    counters = runs["bypass"]["counters"]
    per_cache = Counter(lk["name"] for lk in byp)
    assert per_cache == {
        "fx_graph": counters["inductor"]["fxgraph_cache_bypass"],
        "aot_autograd": counters["aot_autograd"]["autograd_cache_bypass"],
    }
    assert all(lk["bypass_reason"] == "Unsupported post grad custom pass" for lk in byp), byp
    assert {lk["bypass_category"] for lk in byp} == {"custom_pass"}
    bypasses = _metric(runs["bypass"]["metrics"], "torch_compile_cache_bypasses_total")
    assert sorted((lab["cache"], lab["reason"], v) for lab, v in bypasses) == sorted(
        (cache, "custom_pass", float(n)) for cache, n in per_cache.items()
    )


@pytest.mark.parametrize("scenario", ["cold", "warm", "config", "shape", "bypass"])
def test_replay_gives_the_same_lookups_and_causes_as_live(runs, scenario):
    """Replay of the run's TORCH_TRACE, with the key index the live run read as its baseline."""
    baseline = runs[scenario]["out"] / "baseline" if scenario != "cold" else None
    out = runs["tmp"] / f"replay-{scenario}"
    out.mkdir()
    replayed = _replay(runs[scenario]["out"] / "trace", out, baseline)
    live, back = cache_lookups(runs[scenario]["spans"]), cache_lookups(replayed["spans"])
    key = lambda lk: (lk["id"], lk["name"], lk["result"], lk.get("key"), lk.get("backward"))  # noqa: E731
    assert sorted(map(key, live)) == sorted(map(key, back))
    assert _causes(live) == _causes(back)
    assert replayed["json"]["caches"]["hit_rate"] == runs[scenario]["summary"]["caches"]["hit_rate"]
    assert replayed["json"]["cache"] == runs[scenario]["summary"]["cache"]


def test_replay_explains_misses_against_a_previous_runs_torch_trace(runs, tmp_path):
    """--baseline names the run before's TORCH_TRACE directory: its keys, those of FX graphs loaded inside an
    AOTAutograd hit too (torch logs those only as artifacts)."""
    replayed = _replay(runs["config"]["out"] / "trace", tmp_path, runs["shape"]["out"] / "trace")
    misses = [lk for lk in cache_lookups(replayed["spans"]) if lk["result"] == "miss"]
    assert misses and {lk["miss_cause"] for lk in misses} == {"config"}
    for lk in misses:
        assert (
            "inductor config size_asserts: True → False" in lk["miss_changes"]
            or "inductor config size_asserts: False → True" in lk["miss_changes"]
        )
        assert "against 0/0 in the baseline run" in lk["miss_reason"]
    fx = [lk for lk in misses if lk["name"] == "fx_graph"]
    assert any(c.startswith("input ") and "[8, 8] → [4, 8]" in c for lk in fx for c in lk["miss_changes"]), fx


@pytest.mark.parametrize("scenario", ["cold", "warm", "config"])
def test_cache_counts_equal_tlparse_on_the_same_log(runs, scenario, tmp_path):
    log = next((runs[scenario]["out"] / "trace").glob("*.log"))
    res = subprocess.run(  # tlparse, the reference reader: another program than the bridge's
        [shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse"), str(log), "-o", str(tmp_path / "tl")]
        + ["--overwrite", "--no-browser"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    names = Counter()
    for f in (tmp_path / "tl").rglob("*.json"):
        m = re.match(r"(fx_graph|aotautograd)_cache_(hit|miss|bypass)_\d+\.json$", f.name)
        if m:
            names[(m.group(1), m.group(2))] += 1
    ours = Counter()
    for c in runs[scenario]["summary"]["cache"]:
        ours[("fx_graph" if c["cache"] == "fx_graph" else "aotautograd", c["result"])] += c["count"]
    assert names and names == ours


def test_a_rank_that_missed_what_the_others_hit_is_named_by_the_summary_replay_and_a_metric(runs):
    job = runs["job"]["out"]
    # TORCH_OTEL_TRACES_FILE=spans-{rank}.jsonl: each rank wrote its own file, with its own compiles
    for rank in (0, 1):
        roots = [sp for sp in read_otlp_json_spans(job / f"spans-{rank}.jsonl") if "torch.compile.kind" in sp["attrs"]]
        assert roots and {int(sp["attrs"]["torch.distributed.rank"]) for sp in roots} == {rank}
    assert not (job / "spans-{rank}.jsonl").exists()
    rank1 = json.loads((job / "summary-1.json").read_text())["caches"]
    rank0 = json.loads((job / "summary-0.json").read_text())["caches"]
    assert rank0["misses"] == 0 and rank1["misses_by_cause"] == {"config": rank1["misses"]}
    assert any("max_fusion_size" in r["reason"] for r in rank1["top_reasons"]), rank1["top_reasons"]
    # live: the metric that names the rank, the graph, the cause and the component
    last = _metric((job / "metrics-1.txt").read_text(), "torch_compile_cache_last_miss")
    assert [lab for lab, _ in last] == [
        {
            "cache": "fx_graph",
            "cause": "config",
            "component": "inductor_config[max_fusion_size]",
            "graph": "0/0 backward",
            "rank": "1",
        }
    ]
    assert _metric((job / "metrics-0.txt").read_text(), "torch_compile_cache_last_miss") == []
    # replay of the job's directory: which rank missed what the others hit, with the part that differs from the rank
    # that hit; each rank's own misses explained against its own history, as live (here: none, so first seen)
    out = runs["tmp"] / "replay-job"
    out.mkdir()
    replayed = _replay(job / "trace", out, None)
    odd = replayed["json"]["caches"]["odd_ranks"]
    assert odd and {o["rank"] for o in odd} == {1} and all(o["hit_on"] == [0] for o in odd)
    assert {o["reason"] for o in odd} == {"inductor config max_fusion_size: 64 → 63"}, odd
    assert replayed["json"]["caches"]["misses_by_cause"] == {"first_seen": rank1["misses"]}
    assert "rank 1 missed aot_autograd 0/0 (rank 0 hit it): inductor config max_fusion_size: 64 → 63" in replayed["out"]
    # given the indexes the ranks read live (rank 1 had none, so it read rank 0's), the same causes as live
    out = runs["tmp"] / "replay-job-baseline"
    out.mkdir()
    replayed = _replay(job / "trace", out, job / "baseline")
    assert replayed["json"]["caches"]["misses_by_cause"] == rank1["misses_by_cause"]
    assert any(
        "max_fusion_size: 64 → 63, against 0/0 in the baseline run on rank 0" in r["reason"]
        for r in replayed["json"]["caches"]["top_reasons"]
    ), replayed["json"]["caches"]["top_reasons"]


def test_the_key_index_is_bounded_and_keeps_only_hashes_of_the_graph(runs, tmp_path):
    index = runs["bypass"]["index"]
    text = json.dumps(index)
    assert "def forward" not in text and "GraphModule" not in text  # the graph's code never leaves as text
    assert index["format"] == "torch-otel cache key index" and len(text.encode()) <= MAX_INDEX_BYTES
    # many keys: the newest MAX_INDEX_KEYS are kept, within the byte bound
    parts = tuple(Component(f"inductor_config[k{i}]", f"h{i}", "True") for i in range(600))
    seen = [
        KeySeen("fx_graph", (None, i), f"{i}/0", False, f"key{i:06d}", "miss", (*parts, Component("gm", f"g{i}")), "x")
        for i in range(MAX_INDEX_KEYS + 500)
    ]
    doc = json.loads(index_document(seen, "2.13.0", 0))
    assert len(doc["keys"]) == MAX_INDEX_KEYS and doc["keys"][-1]["key"] == f"key{MAX_INDEX_KEYS + 499:06d}"
    path = tmp_path / "keys-rank0.json"
    path.write_text(json.dumps(doc))
    back = KeyIndex(str(path)).load()
    assert len(back) == MAX_INDEX_KEYS and {c.name for c in back[0].parts} == {c.name for c in seen[0].parts}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "cannot be read"),
        ('{"format": "torch-otel cache key index", "version": 99}', "another torch-otel version"),
        ('{"hello": 1}', "is not a torch-otel cache key index"),
        (None, "no such file or directory"),
    ],
)
def test_a_corrupt_or_foreign_baseline_is_one_line_and_the_run_goes_on(runs, tmp_path, content, says):
    bad = tmp_path / "keys-rank0.json"
    if content is not None:  # None: a baseline that is not there
        bad.write_text(content)
    out = tmp_path / "out"
    out.mkdir()
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(runs["cache"]),
        "TORCH_OTEL_CACHE_BASELINE": str(bad),
        "TORCH_OTEL_CACHE_INDEX": "off",
        "TORCH_OTEL_SUMMARY": str(out / "summary.json"),
        **spans_to_file(out / "spans.jsonl"),
    }
    res = run_python(WORKLOADS / "caches.py", env, args=[str(out), "config"], timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if says in ln]
    assert len(lines) == 1 and str(bad) in lines[0], res.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["compiles"] >= 1


BASELINE_2_13 = Path(__file__).parent / "data" / "cache-baseline-2.13"  # the cold run's lookups, recorded on torch 2.13.0
BASELINE_TORCH = "2.13.0+cpu"  # the build that wrote it, as its log records it


@pytest.mark.release
def test_against_a_2_13_baseline_the_misses_name_the_torch_release(tmp_path):
    """The same workload, cold, on whatever torch runs the test, explained against a committed 2.13.0 run's log, live
    and in ``torch-otel diff`` of the two logs (one run serves both: a cold inductor run is the costliest the suite
    makes on each release).

    On 2.13 the keys are the baseline's own (nothing changed, the entries are not in this new cache); on any
    other release each miss names the torch version as its cause, live and in the diff, which also sets the two
    runs' phases side by side.
    """
    import torch

    out = tmp_path / "out"
    out.mkdir()
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
        "TORCH_OTEL_CACHE_BASELINE": str(BASELINE_2_13),
        "TORCH_OTEL_SUMMARY": str(out / "summary.json"),
        "TORCH_TRACE": str(out / "trace"),
        **spans_to_file(out / "spans.jsonl"),
    }
    res = run_python(WORKLOADS / "caches.py", env, args=[str(out), "cold"], timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    _diff_against_2_13(out / "trace")
    misses = [lk for lk in cache_lookups(read_otlp_json_spans(out / "spans.jsonl")) if lk["result"] == "miss"]
    assert misses
    # torch's per-layer counts (CompilationMetrics, 2.11 and later; 2.10 has none) against the lookups the bridge saw
    summary = json.loads((out / "summary.json").read_text())
    counted = Counter({(r["cache"], r["location"], r["result"]): r["count"] for r in summary["cache"]})
    seen = Counter({(r["cache"], "local", r["result"]): r["count"] for r in summary["caches"]["lookups"]})
    if torch.__version__.startswith("2.10."):
        assert not [k for k in counted if k[2] in ("hit", "miss")], counted  # the release records no counts
    else:
        assert counted == seen and seen[("fx_graph", "local", "miss")] == 2, (counted, seen)
    if torch.__version__ == BASELINE_TORCH:  # the same build: anything else (2.13.0+cu130 too) is another binary
        assert {lk["miss_cause"] for lk in misses} == {"not_in_cache"}, misses
        assert all("0/0 in the baseline run" in lk["miss_reason"] for lk in misses)
    else:
        fx = [lk for lk in misses if lk["name"] == "fx_graph"]
        assert fx and {lk["miss_cause"] for lk in fx} == {"versions"}, fx
        # torch's own version strings, build tags and all: "torch 2.13.0+cpu → 2.15.0+cu132"
        want = re.compile(re.escape(f"torch {BASELINE_TORCH} → {torch.__version__}"))
        assert all(want.fullmatch(lk["miss_changes"][0]) for lk in fx), [lk["miss_changes"] for lk in fx]
        said = [ln for ln in res.stderr.splitlines() if re.search(r"is from torch 2\.13\.0\S* and this run is torch", ln)]
        assert len(said) == 1, res.stderr[-3000:]


def _diff_against_2_13(trace: Path) -> None:
    """``torch-otel diff`` of the committed 2.13.0 log against this run's: the phases of both, and on another release
    the torch version as the cause of its new misses, in torch's own version strings."""
    import torch

    done = run_cli("diff", str(BASELINE_2_13), str(trace), "--json", "-", script=True)
    assert done.returncode == 0, done.stderr[-3000:]
    d = json.loads(done.stdout)
    assert d["phases"] and all("base_self_s" in p and "new_self_s" in p for p in d["phases"])
    causes = {m["cause"] for m in d["cache"]["new_misses"]}
    if torch.__version__ == BASELINE_TORCH:  # the same build: anything else (2.13.0+cu130 too) is another binary
        assert "versions" not in causes, d["cache"]
    else:
        versions = [m for m in d["cache"]["new_misses"] if m["cause"] == "versions"]
        assert versions, d["cache"]
        want = re.compile(re.escape(f"torch {BASELINE_TORCH} → {torch.__version__}"))
        assert all(any(want.match(r) for r in m["reasons"]) for m in versions), versions


# -- the answers to "why" on the runs after the job: code changed, a frame left in eager, the cache wiped --------------


def test_a_changed_graph_leads_with_its_code_and_lists_the_inputs_that_followed(runs, tmp_path):
    """gelu where relu was: every miss's cause is the graph's code; the backward's inputs that changed with it
    (relu's bool mask became a float) are listed after it, as what followed. Live and on replay, the same."""
    code = runs["code"]
    misses = [lk for lk in cache_lookups(code["spans"]) if lk["result"] == "miss"]
    assert misses and {lk["miss_cause"] for lk in misses} == {"graph"}, misses
    bwd = [lk for lk in misses if lk["name"] == "fx_graph" and lk.get("backward")]
    assert bwd and all(lk["miss_changes"][0].startswith("graph code changed (and with it ") for lk in bwd), bwd
    assert any(c.startswith("input ") and "dtype torch.bool → torch.float32" in c for lk in bwd for c in lk["miss_changes"])
    assert code["summary"]["caches"]["misses_by_cause"] == {"graph": len(misses)}
    assert code["counters"]["inductor"]["fxgraph_cache_miss"] == 2  # torch's own count of the misses explained
    # the AOTAutograd miss (torch lists no parts for its key) says what its FX graphs say
    (aot,) = [lk for lk in misses if lk["name"] == "aot_autograd"]
    assert aot["miss_changes"][0].startswith("graph code changed")
    replayed = _replay(code["out"] / "trace", tmp_path, code["out"] / "baseline")
    assert _causes(cache_lookups(replayed["spans"])) == _causes(cache_lookups(code["spans"]))


def test_a_frame_torch_left_in_eager_is_named_first_live_and_on_replay(runs, tmp_path):
    """A print in a for loop of forward: torch skips the whole frame (GB0059, then GB7000); the summary's first
    lines say which frame, where the break is, and that it runs uncompiled."""
    run = runs["print_in_loop"]
    assert run["stdout"].count("step ") == 2  # the user's prints ran (in eager)
    (row,) = run["summary"]["eager_frames"]
    assert (row["function"], row["why"], row["code"], row["compiles"]) == ("forward", "graph_break_in_loop", "GB0059", 1)
    assert Path(row["break_file"]).name == "caches.py" and row["break_line"] == row["line"] + 3
    assert "print" in row["explanation"]
    out = tmp_path / "replayed"
    out.mkdir()
    replayed = _replay(run["out"] / "trace", out, None)
    assert replayed["json"]["eager_frames"] == run["summary"]["eager_frames"]
    lines = replayed["out"].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("torch.compile run summary"))
    assert lines[start + 1] == "FRAMES LEFT IN EAGER: 1: torch runs their whole work uncompiled", lines
    brk = next(i for i, ln in enumerate(lines) if ln.startswith("    the break: "))
    assert start + 3 <= brk <= start + 4 and all(len(ln) <= 100 for ln in lines[start:brk]), lines  # whole, wrapped
    said = " ".join(ln.strip() for ln in lines[start + 2 : brk])
    assert said == (
        f"forward (caches.py:{row['line']}): a graph break inside a loop at caches.py:{row['break_line']}: "
        "torch skipped the whole frame (GB7000)"
    ), lines
    assert lines[brk].startswith("    the break: GB0059 Failed to trace builtin operator: ")
    # the span: the unhandled graph break with the frame left in eager, as the summary counts it
    roots = [s for s in run["spans"] if s["attrs"].get("torch.compile.kind") == "frame"]
    assert [r["attrs"].get("torch.compile.eager_fallback") for r in roots] == [True]
    assert run["summary"]["eager_fallbacks"] == 1


def test_the_diff_leads_with_a_frame_now_left_in_eager(runs, tmp_path):
    """Against the warm run, the run with the print in a loop compiles nothing: its compile time fell, which is
    no improvement. The diff's first line after its head says so, from every form a run leaves."""
    warm, new = runs["warm"]["out"], runs["print_in_loop"]["out"]
    forms = {"log": "trace", "summary": "summary.json", "traces": "spans.jsonl"}
    for form, name in forms.items():
        res = run_cli(
            "diff", str(warm / name), str(new / name), "--fail-on", "failures", "--json", str(tmp_path / f"{form}.json")
        )
        assert res.returncode == 4, (form, res.stdout, res.stderr)
        lines = res.stdout.splitlines()
        head = next(i for i, ln in enumerate(lines) if ln.startswith("FRAMES NOW LEFT IN EAGER"))
        assert lines[head] == "FRAMES NOW LEFT IN EAGER: 1: torch runs their whole work uncompiled", (form, lines)
        assert " a graph break inside a loop at caches.py:" in lines[head + 1], (form, lines)
        total = lines.index(next(ln for ln in lines[head:] if ln.startswith("compile time ")))
        assert total <= head + 4 and lines[total + 1] == "  not faster: 1 frame no longer compiled (in eager, above)", (
            form,
            lines,
        )
        doc = json.loads((tmp_path / f"{form}.json").read_text())
        (e,) = doc["eager_frames"]["new_frames"]
        assert e["why"] == "graph_break_in_loop" and e["code"] == "GB0059"
        assert doc["gate"]["failed"][0]["text"].startswith(f"forward (caches.py:{e['line']}) now runs in eager")


def test_a_wiped_cache_directory_says_not_in_this_cache_live_and_on_replay(runs, tmp_path):
    """rm -rf of the cache directory takes the key index in it too: the copy kept outside it (bounded, as the index)
    says the keys were there before, so each miss is "not in this cache", not "first seen"."""
    wiped = runs["wiped"]
    misses = [lk for lk in cache_lookups(wiped["spans"]) if lk["result"] == "miss"]
    c = wiped["counters"]
    assert len(misses) == c["inductor"]["fxgraph_cache_miss"] + c["aot_autograd"]["autograd_cache_miss"] == 3
    assert {lk["miss_cause"] for lk in misses} == {"not_in_cache"}, misses
    assert all("before the cache directory was cleared" in lk["miss_reason"] for lk in misses), misses
    assert wiped["summary"]["caches"]["misses_by_cause"] == {"not_in_cache": 3}
    kept = list(runs["xdg"].glob("torch-otel/cache-keys/*/keys-rank*.json"))
    assert kept and all(f.stat().st_size <= MAX_INDEX_BYTES for f in kept)
    assert (kept[0].parent / "cache-dir.txt").read_text().strip() == str(runs["cache"])
    assert "def forward" not in kept[0].read_text()  # hashes and safe parts only, as the index
    # replay, given the same baseline the live run read: the same causes
    replayed = _replay(wiped["out"] / "trace", tmp_path, wiped["out"] / "baseline")
    assert _causes(cache_lookups(replayed["spans"])) == _causes(misses)


def test_two_cold_runs_are_no_new_misses_in_the_diff(runs, tmp_path):
    """The cold run and the run on the wiped directory: both cold, the same keys missed in both. The diff of their
    logs compares the keys: no miss is new. A changed part is still a new miss (the config run)."""
    res = run_cli(
        "diff", str(runs["cold"]["out"] / "trace"), str(runs["wiped"]["out"] / "trace"), "--json", str(tmp_path / "d.json")
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["cache"]["new_misses"] == [], doc["cache"]
    assert doc["cache"]["misses"] == {"base": 3, "new": 3}
    res = run_cli(
        "diff", str(runs["warm"]["out"] / "trace"), str(runs["config"]["out"] / "trace"), "--json", str(tmp_path / "c.json")
    )
    rows = json.loads((tmp_path / "c.json").read_text())["cache"]["new_misses"]
    assert {r["cause"] for r in rows} == {"config"} and all(all("size_asserts" in why for why in r["reasons"]) for r in rows), (
        rows
    )


def test_saved_by_hits_is_torchs_record_on_the_roots_and_named_on_the_line(runs):
    """One definition of the time a hit saved, torch's CompilationMetrics.remote_cache_time_saved_s: the roots'
    torch.compile.cache.time_saved_s, summed, is the summary's; the line names it. An FX graph hit's own event
    carries its part of it; an AOTAutograd hit's carries what compiling its entry took (time_taken_s)."""
    warm = runs["warm"]
    roots = [s for s in warm["spans"] if "torch.compile.kind" in s["attrs"]]
    on_roots = sum(float(s["attrs"].get("torch.compile.cache.time_saved_s") or 0) for s in roots)
    assert on_roots > 0 and abs(warm["summary"]["caches"]["saved_s"] - on_roots) < 1e-5
    for lk in cache_lookups(warm["spans"]):
        if lk["name"] == "aot_autograd" and lk["result"] == "hit":
            assert "time_saved_s" not in lk and lk["time_taken_s"] > 0
    from torch_otel._sinks.summary_text import format_text

    assert "(torch's remote_cache_time_saved_s)" in format_text(warm["summary"])


def test_autocast_leads_where_torchs_key_records_it_live_and_on_replay(runs, tmp_path):
    """The step under autocast (bf16): the AOTAutograd key names autocast (its parts logged); the FX graphs it
    compiled lead with it, their code and the backward's inputs listed after it, as what followed. Replay, given the
    run before as baseline, says the same."""
    run = runs["bf16"]
    misses = [lk for lk in cache_lookups(run["spans"]) if lk["result"] == "miss"]
    c = run["counters"]
    assert len(misses) == c["inductor"]["fxgraph_cache_miss"] + c["aot_autograd"]["autograd_cache_miss"] == 3
    assert {lk["miss_cause"] for lk in misses} == {"config"}, misses
    (aot,) = [lk for lk in misses if lk["name"] == "aot_autograd"]
    assert aot["miss_changes"][0] == "autocast on cpu turned on (torch.bfloat16)", aot
    fx = [lk for lk in misses if lk["name"] == "fx_graph"]
    for lk in fx:
        assert lk["miss_changes"][0] == "autocast on cpu turned on (torch.bfloat16), in its AOTAutograd key", lk
        assert lk["miss_changes"][1].startswith("graph code changed"), lk
    (bwd,) = [lk for lk in fx if lk.get("backward")]
    assert bwd["miss_changes"][1].startswith("graph code changed (and with it ")
    assert run["summary"]["caches"]["misses_by_cause"] == {"config": 3}
    replayed = _replay(run["out"] / "trace", tmp_path, runs["autocast_base"]["out"] / "trace")
    assert _causes(cache_lookups(replayed["spans"])) == _causes(misses)


# -- issue 52: one verdict whichever form; a bypass as a cause; the changed graph leads; each rank its own history ----


def _forms(run: dict[str, Any], tmp: Path) -> dict[str, Path]:
    """The three forms a run leaves: its TORCH_TRACE directory, its summaries' JSON, its spans (a job: a directory of
    one file per rank)."""
    out = run["out"]
    if not run.get("ranks"):
        return {"log": out / "trace", "summary": out / "summary.json", "traces": out / "spans.jsonl"}
    forms = {"log": out / "trace"}
    for form, pattern in (("summary", "summary-*.json"), ("traces", "spans-*.jsonl")):
        d = tmp / f"{out.name}-{form}"
        if not d.exists():
            d.mkdir()
            for f in out.glob(pattern):
                shutil.copy(f, d / f.name)
        forms[form] = d
    return forms


def _verdict(doc: dict[str, Any]) -> dict[str, Any]:
    """What a diff of two runs concludes about their caches: each new miss (cache, cause against the base, counts;
    the reason where the diff words it itself), the hit rates, new bypasses with torch's reason, and the gate."""
    c = doc["cache"]
    mine = {"not_in_cache", "first_seen"}
    return {
        "new_misses": [
            (r["cache"], r["cause"], r["base"], r["new"], r["reasons"] if r["cause"] in mine else ()) for r in c["new_misses"]
        ],
        "by": c["new_misses_by"],
        "misses": c["misses"],
        "hit_rate": c["hit_rate"],
        "new_bypasses": [(r["cache"], r["reason"], r["base"], r["new"]) for r in c["new_bypasses"]],
        "gate": [f["text"] for f in doc["gate"]["failed"] if f["kind"] == "cache"],
        "ranks": [(r["rank"], r["cache"]["new_misses"]) for r in (doc.get("ranks") or {}).get("per_rank", [])],
    }


PAIRS = [(ORDER[i - 1], ORDER[i]) for i in range(1, len(ORDER))] + [("cold", "wiped"), ("infer_warm", "frozen")]


@pytest.mark.parametrize(("base", "new"), PAIRS, ids=[f"{b}-{n}" for b, n in PAIRS])
def test_the_diff_of_two_runs_is_one_verdict_whichever_form_is_compared(runs, tmp_path, base, new):
    """Every run against the run before it (and the two cold runs of the issue: a fresh directory, and one after
    rm -rf): the diff of their TORCH_TRACE logs, of their summaries' JSON and of their span files reach the same
    verdict on the caches: the same new misses, by key, with the same cause against the base; the gate the same."""
    from torch_otel._cli import main as torch_otel_command  # the command in this process: 60 diffs, no 60 starts

    got = {}
    for form in ("log", "summary", "traces"):
        b, n = _forms(runs[base], runs["tmp"])[form], _forms(runs[new], runs["tmp"])[form]
        code = torch_otel_command(["diff", str(b), str(n), "--fail-on", "cache", "--json", str(tmp_path / f"{form}.json")])
        assert code in (0, 4), (form, code)
        doc = json.loads((tmp_path / f"{form}.json").read_text())
        got[form] = _verdict(doc)
        assert code == (4 if got[form]["gate"] else 0), form
        assert got[form]["by"] == "key", form  # every form holds the lookups' keys
    assert got["summary"] == got["log"], (got["log"], got["summary"])
    assert got["traces"] == got["log"], (got["log"], got["traces"])
    if (base, new) == ("cold", "wiped"):  # the example: both cold, the same keys missed: nothing new
        assert got["log"]["new_misses"] == [] and got["log"]["misses"] == {"base": 3, "new": 3}


def test_an_inductor_config_changed_shows_each_new_miss_with_its_cause_in_every_pairing_of_forms(runs):
    """The warm run against the run with one inductor config flipped, in-process, each side read from each of its forms
    against each of the other's (9 diffs, tests/test_diff.py's way): both caches fell from every hit to every miss,
    and each new miss is the config, named by the setting that changed, in the text and the gate."""
    from tests.test_diff import GATE_NO_TIME, _every_form, _same_verdicts
    from torch_otel._analysis.diff_text import format_text

    sides = {name: {"forms": _forms(runs[name], runs["tmp"])} for name in ("warm", "config")}
    diffs = _every_form(sides, "warm", "config", GATE_NO_TIME)
    v = _same_verdicts(diffs)
    assert v["hit_rates"]["fx_graph"] == (1.0, 0.0) and v["hit_rates"]["aot_autograd"] == (1.0, 0.0)
    assert v["new_miss_causes"] == [("aot_autograd", "config"), ("fx_graph", "config")]
    d = diffs[("log", "log")]
    fx = next(m for m in d["cache"]["new_misses"] if m["cache"] == "fx_graph")
    assert fx["reasons"] and fx["reasons"][0].startswith("inductor config size_asserts: ")
    assert "fx_graph hit rate fell: 100% -> 0%" in v["gate"]
    assert "new misses  fx_graph config 0 -> 2: inductor config size_asserts:" in format_text(d)


def test_a_bypass_is_a_cause_in_the_summary_the_diff_and_the_gate(runs, tmp_path):
    """inductor's freezing (inference, on the warm directory): torch bypasses both caches, on every run. The summary
    says so with torch's reasons (text, JSON, page), live and on replay; the diff against the warm inference run names
    the new bypasses, and `--fail-on cache` fails: a cache the base hit is now bypassed."""
    frozen, warm = runs["frozen"], runs["infer_warm"]
    c = frozen["counters"]
    assert c["inductor"]["fxgraph_cache_bypass"] == 1 and c["aot_autograd"]["autograd_cache_bypass"] == 1
    assert warm["summary"]["caches"]["hit_rate"] == {
        "aot_autograd": {"hits": 1, "misses": 0, "rate": 1.0},
        "fx_graph": {"hits": 1, "misses": 0, "rate": 1.0},
    }
    rows = frozen["summary"]["caches"]["bypasses"]
    reasons = {r["cache"]: r["reason"] for r in rows}
    assert reasons["aot_autograd"] == "Cannot cache a graph with freezing enabled"
    assert all(r["count"] == 1 for r in rows)
    # torch's own words, from its bypass exceptions, as its log records them
    log = next((frozen["out"] / "trace").glob("*.log")).read_text()
    assert set(reasons.values()) == set(re.findall(r'"cache_bypass_reason": "([^"]*)"', log)), reasons
    assert frozen["summary"]["caches"]["bypass_cost_s"] > 0
    from torch_otel._sinks.summary_text import format_text

    text = format_text(frozen["summary"])
    assert "  bypassed: 2 lookups, compiled afresh on every run, " in text
    assert "      1  aot_autograd Cannot cache a graph with freezing enabled" in text
    replayed = _replay(frozen["out"] / "trace", tmp_path, frozen["out"] / "baseline")
    assert replayed["json"]["caches"]["bypasses"] == rows
    assert "aot_autograd Cannot cache a graph with freezing enabled" in replayed["out"]
    # the page: the same rows, drawn by its script (headless chromium, as tests/test_report_html.py renders pages)
    from tests import test_report_html as chrome
    from torch_otel._sinks.diff_html import render_diff_html
    from torch_otel._sinks.html import render_html

    if chrome.CHROMIUM:
        page = chrome._open(tmp_path, render_html(frozen["summary"]), "frozen.html")
        chrome._assert_clean(page)
        assert "Bypassed: compiled afresh on every run (" in page.dom
        assert re.search(r"<td[^>]*>Cannot cache a graph with freezing enabled</td>", page.dom), page.dom[-3000:]
    # the diff and the gate, from each form
    for form in ("log", "summary", "traces"):
        b, n = _forms(warm, runs["tmp"])[form], _forms(frozen, runs["tmp"])[form]
        res = run_cli("diff", str(b), str(n), "--fail-on", "cache", "--json", str(tmp_path / f"{form}.json"))
        assert res.returncode == 4, (form, res.stdout, res.stderr[-2000:])
        doc = json.loads((tmp_path / f"{form}.json").read_text())
        assert {(r["cache"], r["reason"]) for r in doc["cache"]["new_bypasses"]} == set(reasons.items()), form
        failed = [f["text"] for f in doc["gate"]["failed"]]
        assert "aot_autograd bypassed: hit 1 -> bypassed 1: Cannot cache a graph with freezing enabled" in failed, (
            form,
            failed,
        )
        assert "  new bypass  aot_autograd 0 -> 1: Cannot cache a graph with freezing enabled" in res.stdout, res.stdout
        assert "aot_autograd 100% -> bypassed" in res.stdout, res.stdout
        if chrome.CHROMIUM and form == "summary":
            page = chrome._open(tmp_path, render_diff_html(doc), "diff.html")
            chrome._assert_clean(page)
            assert "New bypasses: compiled afresh on every run" in page.dom and ">bypassed<" in page.dom


def test_a_graph_break_that_shortens_the_graph_leads_with_its_code_live_and_on_replay(runs, tmp_path):
    """A graph break before the layer: the graph before it takes x alone, not the weights. Its miss is the graph's
    code first, with how many tensors it takes, not the inputs compared by position."""
    run = runs["break"]
    misses = [lk for lk in cache_lookups(run["spans"]) if lk["result"] == "miss"]
    short = [lk for lk in misses if lk["id"] == "0/0" and lk["name"] == "fx_graph"]
    assert short and all(lk["miss_cause"] == "graph" for lk in short), short
    for lk in short:
        assert re.fullmatch(r"graph code changed \(and with it its inputs: \d tensors → 1\)", lk["miss_changes"][0]), lk
        assert not any(c.startswith(("input ", "example_inputs[")) for c in lk["miss_changes"]), lk
    (aot,) = [lk for lk in misses if lk["id"] == "0/0" and lk["name"] == "aot_autograd"]
    assert aot["miss_changes"][0].startswith("graph code changed (and with it its inputs: "), aot
    replayed = _replay(run["out"] / "trace", tmp_path, run["out"] / "baseline")
    assert _causes(cache_lookups(replayed["spans"])) == _causes(misses)


def test_an_aotautograd_miss_whose_graphs_hit_blames_the_graph_dynamo_handed_over_live_and_on_replay(runs, tmp_path):
    """The layer renamed: the graph dynamo hands over names it (`l_self_modules_proj_...`), the graphs inductor
    compiles do not. The FX graphs hit, the AOTAutograd key missed: its miss names the graph dynamo handed over,
    not grad mode, autocast or the inductor config (which would have changed the FX graphs), and says that torch's
    TORCH_LOGS names the part only if the run compared with was logged the same way."""
    run = runs["rename"]
    c = run["counters"]
    assert c["aot_autograd"]["autograd_cache_miss"] == 1 and c["inductor"]["fxgraph_cache_hit"] == 2
    assert not c["inductor"].get("fxgraph_cache_miss")
    (aot,) = [lk for lk in cache_lookups(run["spans"]) if lk["result"] == "miss"]
    assert aot["name"] == "aot_autograd" and aot["miss_cause"] == "graph", aot
    words, advice = aot["miss_changes"]
    assert words.startswith("the graph dynamo handed over changed in what the compiled graphs do not keep (a module")
    assert "FX graph hit" in words and "functorch" not in words  # torch 2.13+ records the functorch config: unchanged
    for unchanged in ("grad mode", "autocast", "inductor config"):
        assert unchanged not in aot["miss_reason"], aot
    assert advice.endswith("names the one that changed if the run compared with was logged the same way"), advice
    replayed = _replay(run["out"] / "trace", tmp_path, run["out"] / "baseline")
    assert _causes(cache_lookups(replayed["spans"])) == _causes([aot])


def test_replay_of_a_job_explains_each_ranks_lookups_against_its_own_history_as_live(runs, tmp_path):
    """A 3-rank torchrun job, cold, each rank compiling graphs of its own (another batch size). Live, each rank
    explains its misses against its own history: none, so first seen. Replay of the job's directory does the same
    per rank, not against rank 0's keys (which would read 'input 0: shape [4, 8] → [5, 8]')."""
    job = runs["job3"]["out"]
    live: dict[int, list[Any]] = {}
    # (the job also records inductor's provenance: test_each_kernel_names_the_users_line_and_no_source_text)
    for rank in range(3):
        spans = read_otlp_json_spans(job / f"spans-{rank}.jsonl")
        live[rank] = _causes(cache_lookups(spans))
        summary = json.loads((job / f"summary-{rank}.json").read_text())
        assert live[rank] and summary["caches"]["misses_by_cause"] == {"first_seen": len(live[rank])}, (rank, summary)
    replayed = _replay(job / "trace", tmp_path, None)
    back: dict[int, list[Any]] = {}
    for s in replayed["spans"]:
        if "torch.compile.kind" in s["attrs"]:
            rank = int(s["attrs"]["torch.distributed.rank"])
            back[rank] = sorted(back.get(rank, []) + _causes(cache_lookups([s])))
    assert back == live
    assert replayed["json"]["caches"]["misses_by_cause"] == {"first_seen": sum(len(v) for v in live.values())}
    # the diff of the job against itself, per rank, from each form: no new miss on any rank
    for form in ("log", "summary", "traces"):
        d = _forms(runs["job3"], runs["tmp"])[form]
        res = run_cli("diff", str(d), str(d), "--json", str(tmp_path / f"{form}.json"))
        assert res.returncode == 0, res.stderr[-2000:]
        doc = json.loads((tmp_path / f"{form}.json").read_text())
        assert doc["ranks"]["compared"] == [0, 1, 2] and all(r["cache"]["new_misses"] == [] for r in doc["ranks"]["per_rank"])


def test_each_kernel_names_the_users_line_and_no_source_text(runs):
    """inductor's provenance tracking on (the 3-rank job): torch's CompilationMetrics.inductor_provenance maps each
    kernel to the user's stack, source text included. The root span names each kernel with its file and line; the
    source text stays in the process."""
    job = runs["job3"]["out"]
    log = next((job / "trace").glob("*rank_0*.log")).read_text()
    records = [json.loads(line.split("] ", 1)[1]) for line in log.splitlines() if 'compilation_metrics"' in line]
    recorded = [r.get("compilation_metrics") or r.get("bwd_compilation_metrics") or {} for r in records]  # backwards' too
    kernels = {k for m in recorded for text in m.get("inductor_provenance") or [] for k in json.loads(text)}
    assert kernels, "torch recorded no provenance"
    roots = [s for s in read_otlp_json_spans(job / "spans-0.jsonl") if "torch.compile.kind" in s["attrs"]]
    named = [
        v["stringValue"] for r in roots for v in (r["attrs"].get("torch.compile.inductor.kernel_sources") or {}).get("values", [])
    ]
    line = next(i for i, text in enumerate((WORKLOADS / "caches.py").read_text().splitlines(), 1) if "act(self.lin(x))" in text)
    assert {v.split(" ", 1)[0] for v in named} == kernels
    assert all(re.search(r"/caches\.py:\d+ \(\w+\)$", v) for v in named), named
    assert any(v.endswith(f"/caches.py:{line} (forward)") for v in named), (line, named)
    assert not any("self.lin" in v or "act(" in v for v in named)  # the line's text, which torch keeps, is not here


SINGLE = [name for name in ORDER if not name.startswith("job")]


@pytest.mark.parametrize("scenario", SINGLE)
def test_torchs_per_layer_counts_agree_with_the_lookups_the_bridge_saw(runs, scenario):
    """torch's CompilationMetrics counts each cache's hits and misses per layer (local, remote); the bridge counts the
    lookups torch logged an event for. They agree, and with torch's own counters, but for one thing: torch logs no
    event for the FX graphs an AOTAutograd hit loads, which its FX graph hits include. No remote cache here: its
    layer counts nothing."""
    run = runs[scenario]
    torch_counts: Counter[tuple[str, str]] = Counter()
    for row in run["summary"]["cache"]:
        torch_counts[(row["cache"], row["result"])] += row["count"]
        assert row["location"] == "local", row  # no remote cache configured
    seen = Counter({(r["cache"], r["result"]): r["count"] for r in run["summary"]["caches"]["lookups"]})
    c = run["counters"]
    own = {
        ("aot_autograd", "hit"): c["aot_autograd"].get("autograd_cache_hit", 0),
        ("aot_autograd", "miss"): c["aot_autograd"].get("autograd_cache_miss", 0),
        ("aot_autograd", "bypass"): c["aot_autograd"].get("autograd_cache_bypass", 0),
        ("fx_graph", "hit"): c["inductor"].get("fxgraph_cache_hit", 0),
        ("fx_graph", "miss"): c["inductor"].get("fxgraph_cache_miss", 0),
        ("fx_graph", "bypass"): c["inductor"].get("fxgraph_cache_bypass", 0),
    }
    for key, n in own.items():
        assert torch_counts[key] == n, (scenario, key, torch_counts, own)
        if key != ("fx_graph", "hit"):
            assert seen[key] == n, (scenario, key, seen, own)
    loaded = own[("fx_graph", "hit")] - seen[("fx_graph", "hit")]  # inside AOTAutograd hits: no event of their own
    assert loaded >= 0 and (loaded == 0 or own[("aot_autograd", "hit")] > 0), (scenario, seen, own)
