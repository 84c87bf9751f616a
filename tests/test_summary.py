"""The run summary: where a run's compile time went, the same live and on replay, and equal to the spans it sums.

Each summary here is checked against the spans of the same run, recomputed from the exported OTLP-JSON alone
(``helpers.assert_summary_is_the_spans``): compiles, compile time, each phase's total and self time, recompiles,
graph breaks, caches, failures and the slowest compile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import WORKLOADS, assert_summary_is_the_spans, read_otlp_json_spans, run_cli, run_python, spans_to_file
from tests.readme_demo import REPLAY_BEGIN, REPLAY_END, readme_block, replay_screen
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.summary import RunSummary

CORPUS = Path(__file__).parent / "data" / "tlparse-corpus"
# tlparse's real GPU logs: inductor with Triton and autotuning, cudagraphs, recompiles across ranks
GPU_LOGS = ("inductor_provenance_jit_cuda_log.txt.gz", "autotune_with_compile_id.log.gz", "multi_rank_runtime_rank_0.log.gz")


def _screen(out: str) -> list[str]:
    """The summary's lines in replay's output: from its title to the replay's own counts."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("torch.compile run summary"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("phase events unmatched"))
    return lines[start:end]


@pytest.mark.parametrize("log", GPU_LOGS)
def test_a_replayed_gpu_logs_summary_is_the_sum_of_its_spans_on_one_screen(tmp_path, log):
    res = run_cli("replay", str(CORPUS / log), "-o", str(tmp_path / "s.jsonl"), "--json", str(tmp_path / "s.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    spans = read_otlp_json_spans(tmp_path / "s.jsonl")
    assert summary["source"] == "replay" and summary["compiles"] >= 1 and summary["phases"]
    assert_summary_is_the_spans(summary, spans)
    screen = _screen(res.stdout)
    assert len(screen) <= 45 and max(len(ln) for ln in screen) <= 100, "\n".join(screen)
    n = summary["compiles"]
    assert f"{n} compile{'' if n == 1 else 's'} (" in screen[0] and f"{summary['wall_s']:.2f} s compiling" in screen[0]
    top = summary["phases"][0]
    assert re.search(
        rf"^  {re.escape(top['name'])} +{top['count']} +{top['total_s']:.3f} +{top['self_s']:.3f}", "\n".join(screen), re.M
    )
    slow = summary["slowest"][0]
    assert f"{slow['duration_s']:8.3f} s  {slow['id']}" in res.stdout
    # --json - : the same facts on stdout, the text on stderr
    piped = run_cli("replay", str(CORPUS / log), "-o", str(tmp_path / "t.jsonl"), "--json", "-", cwd=tmp_path)
    assert json.loads(piped.stdout)["phases"] == summary["phases"]
    assert "torch.compile run summary (replay)" in piped.stderr


def test_a_live_run_writes_its_summary_at_exit_and_replay_of_its_log_says_the_same(tmp_path):
    """TORCH_OTEL_SUMMARY on a user's own run (graph breaks, recompiles, a failure, a limit hit, compiled autograd)."""
    res = run_python(
        WORKLOADS / "mixed.py",
        {
            "WITH_BRIDGE": "1",
            "COMPILED_AUTOGRAD": "1",
            "TORCH_TRACE": str(tmp_path / "trace"),
            "TORCH_OTEL_SUMMARY": f"stderr,{tmp_path}/live-{{rank}}.json,{tmp_path}/live.html",
            **spans_to_file(tmp_path / "live.jsonl"),
        },
    )
    assert res.returncode == 0, res.stderr[-3000:]
    live = json.loads((tmp_path / "live-0.json").read_text())
    assert live["source"] == "live" and live["cpu_s"] is not None and 0 < live["cpu_s"]
    assert_summary_is_the_spans(live, read_otlp_json_spans(tmp_path / "live.jsonl"))
    assert "torch.compile run summary (live)" in res.stderr and "recompile-limit hits: 1" in res.stderr
    assert (tmp_path / "live.html").read_text().lstrip().lower().startswith("<!doctype html")
    (log,) = (tmp_path / "trace").glob("*.log")
    rep = run_cli("replay", str(log), "-o", str(tmp_path / "r.jsonl"), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    replayed = json.loads((tmp_path / "r.json").read_text())
    assert_summary_is_the_spans(replayed, read_otlp_json_spans(tmp_path / "r.jsonl"))
    same = ("compiles", "by_kind", "recompiles", "graph_breaks", "failures", "recompile_limit_hits", "eager_fallbacks")
    assert {k: live[k] for k in same} == {k: replayed[k] for k in same}
    # one documented schema: what TORCH_OTEL_SUMMARY writes is replay --json's document, less replay's own keys; the
    # live run's start-up is the live run's alone (a TORCH_TRACE log holds only the compile)
    assert live["schema_version"] == replayed["schema_version"] == 1
    assert set(replayed) - set(live) == {"replay", "divergence"} and set(live) - set(replayed) == {"startup"}
    assert live["startup"]["first_step_s"] > 0 and "startup" not in replayed
    assert [(f["function"], f["compiles"]) for f in live["frames"]] == [
        (f["function"], f["compiles"]) for f in replayed["frames"]
    ]


def test_a_summary_destination_that_cannot_be_written_is_one_line_and_the_run_succeeds(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    script = tmp_path / "job.py"
    script.write_text("import torch_otel.auto\nimport torch\ntorch.compile(lambda x: x + 1, backend='eager')(torch.ones(1))\n")
    res = run_python(
        script, {"TORCH_OTEL_SUMMARY": f"{blocker}/s.txt,{tmp_path}/s-{{host}}.txt,stderr", **spans_to_file(tmp_path / "s.jsonl")}
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ours = [ln for ln in res.stderr.splitlines() if "TORCH_OTEL_SUMMARY" in ln]
    assert len(ours) == 2, ours
    assert any(f"cannot write the run summary to {blocker}/s.txt" in ln for ln in ours)
    assert any("only {rank} and {pid} placeholders" in ln for ln in ours)
    assert "Traceback" not in res.stderr
    assert "torch.compile run summary (live): 1 compile (1 frame)" in res.stderr  # the destinations that work still do


def test_a_summary_destination_that_cannot_be_written_is_said_as_the_bridge_arms_not_after_training(tmp_path):
    """The line comes when the settings are read (the bridge arms at the first compile), before the training goes on,
    once: not at exit, after hours of training (issue 49)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\nimport torch_otel.auto\nimport torch\n"
        "torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1))\n"
        "print('TRAINING', file=sys.stderr, flush=True)\n"
    )
    res = run_python(script, {"TORCH_OTEL_SUMMARY": f"stderr,{blocker}/s-{{rank}}.json", **spans_to_file(tmp_path / "s.jsonl")})
    assert res.returncode == 0, res.stderr[-3000:]
    err = res.stderr.splitlines()
    ours = [i for i, ln in enumerate(err) if "TORCH_OTEL_SUMMARY" in ln]
    assert len(ours) == 1, res.stderr[-3000:]
    assert err[ours[0]] == (
        f"torch-otel: WARNING: TORCH_OTEL_SUMMARY: cannot write the run summary to {blocker}/s-0.json ({blocker} is a "
        "file, not a directory); set TORCH_OTEL_SUMMARY to a writable path or to stderr (skipped)"
    ), err[ours[0]]
    assert ours[0] < err.index("TRAINING"), res.stderr[-3000:]  # said before the training, not after it
    assert "torch.compile run summary (live): 1 compile (1 frame)" in res.stderr  # stderr, the destination that works


def test_past_its_bounds_the_picture_folds_compiles_and_the_totals_stay_exact(tmp_path):
    """Only the slowest compiles keep their phase tree; the rest are folded into their frame, whatever the run's length."""
    full, small = RunSummary("replay"), RunSummary("replay", max_tree_compiles=3)
    replay_file(CORPUS / "multi_rank_runtime_rank_0.log.gz", [full, small], ReplayStats())
    a, b = full.to_dict(), small.to_dict()
    assert a["compiles"] > 3
    for k in ("compiles", "wall_s", "phases", "frames", "slowest", "recompiles"):
        assert a[k] == b[k], k
    kept = [c for f in b["tree"]["children"] for c in f["children"] if c["kind"] == "compile"]
    folded = [c for f in b["tree"]["children"] for c in f["children"] if c["kind"] == "more"]
    assert len(kept) == 3 and sum(c["count"] for c in folded) == a["compiles"] - 3
    assert abs(sum(c["total_s"] for c in kept + folded) - b["wall_s"]) < 1e-5 * a["compiles"]
    assert min(c["total_s"] for c in kept) >= max(c["total_s"] / c["count"] for c in folded) - 1e-6


def _empty_file(d: Path) -> Path:
    (d / "empty.log").write_text("")
    return d / "empty.log"


def _empty_directory(d: Path) -> Path:
    (d / "none").mkdir()
    return d / "none"


def _our_own_output(d: Path) -> Path:
    (d / "spans.jsonl").write_text(json.dumps({"resourceSpans": [{"scopeSpans": []}]}) + "\n")
    return d / "spans.jsonl"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_empty_file, "the file is empty"),
        (_empty_directory, "the directory holds no files"),
        (_our_own_output, "this is OTLP-JSON (torch-otel's own --output or TORCH_OTEL_TRACES_FILE), not a TORCH_TRACE log"),
    ],
    ids=["empty-file", "empty-directory", "otlp-json"],
)
def test_replay_names_what_is_wrong_with_its_input(tmp_path, make, says):
    path = make(tmp_path)
    res = run_cli("replay", str(path), "-o", str(tmp_path / "out.jsonl"), timeout=120)
    assert res.returncode == 1, res
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"torch-otel replay: {path}") and says in lines[0], lines


def test_the_readmes_replayed_summary_is_what_replay_prints():
    """The README shows a real GPU log's summary: replay's output is the same on every run, so it is compared exactly."""
    assert readme_block(begin=REPLAY_BEGIN, end=REPLAY_END) == replay_screen(), "stale: run python -m tests.readme_demo"


def test_a_real_inductor_runs_text_says_why_its_self_shares_pass_100_right_under_the_phases(tmp_path):
    """tests/data/cache-baseline-2.13: a cold inductor run on a CPU, its C++ builds in parallel, each counting its own
    time: the shares add up to more than 100 %, and the line under the phase table says so with the sum."""
    log = Path(__file__).parent / "data" / "cache-baseline-2.13" / "rank_0.log.gz"
    res = run_cli("replay", str(log), "--json", str(tmp_path / "s.json"), env={"OTEL_TRACES_EXPORTER": "none"})
    assert res.returncode == 0, res.stderr
    text, summary = res.stdout, json.loads((tmp_path / "s.json").read_text())
    self_pct = 100 * sum(p["self_s"] for p in summary["phases"]) / summary["wall_s"]
    assert self_pct > 100
    lines = text.splitlines()
    note = lines.index(f"  (self % adds up to {self_pct:.0f}%: builds that ran in parallel each count their time)")
    assert lines[note - 1].startswith("  (") and "more phases)" in lines[note - 1]  # right under the table
    assert lines[note + 1] == "" and lines[note + 2].startswith("frames that cost most")
