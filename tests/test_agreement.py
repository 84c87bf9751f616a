"""Numbers a user compares agree: the metrics, the spans and the run summary say what torch's own record of the
same run says, live and on replay of that run's ``TORCH_TRACE`` log.

One process (``tests/workloads/agree.py``, about 10 s) makes small compiles: resume frames after graph breaks (and
their recompiles and lazy backwards), a graph break torch cannot handle, and compiled autograd. It records torch's
counters as it goes; its log is replayed here. The parallel kernel builds of a cold inductor compile are checked in
``tests/test_inductor.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry

from tests import helpers
from tests.helpers import (
    WORKLOADS,
    assert_summary_is_the_spans,
    assert_the_screen_keeps_the_recompiling_frames,
    compile_ns,
    read_otlp_json_spans,
    run_cli,
    run_python,
    run_tlparse,
    spans_to_file,
    summary_screen,
    torchrun_under_torch_otel,
)
from torch_otel._core.settings import Settings
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
from torch_otel._sinks.spans import SpanMapper
from torch_otel._sinks.summary import RunSummary
from torch_otel._sinks.summary_text import MAX_LINES


@dataclass
class Seen:
    """What one reader (live, or replay of the same run's log) made of the run."""

    how: str
    spans: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    summary: dict[str, Any]

    def total(self, name: str, **labels: str) -> float:
        """A series' value summed over the samples whose labels include ``labels``."""
        return sum(s["value"] for s in self.samples if s["name"] == name and labels.items() <= s["labels"].items())

    def roots(self, *kinds: str) -> list[dict[str, Any]]:
        return [
            s
            for s in self.spans
            if not s.get("parentSpanId") and s["attrs"].get("torch.compile.kind") in kinds and "torch.compile.kind" in s["attrs"]
        ]


@dataclass
class Run:
    live: Seen
    replay: Seen
    torch_records: list[dict[str, Any]]  # torch's CompilationMetrics records in the log, with "kind": frame/backward
    counters: dict[str, Any]  # torch's own counters, read in the run's process
    log: Path


def _torch_records(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        m = re.match(r"^[VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] (\{.*\})$", line)
        if not m:
            continue
        md = json.loads(m.group(1))
        for key, kind in (("compilation_metrics", "frame"), ("bwd_compilation_metrics", "backward")):
            if key in md:
                out.append({**md[key], "kind": kind})
    return out


def _samples(registry: CollectorRegistry) -> list[dict[str, Any]]:
    return [
        {"name": s.name, "labels": s.labels, "value": s.value}
        for fam in registry.collect()
        for s in fam.samples
        if s.name.startswith("torch_compile_")
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("agree")
    res = run_python(
        WORKLOADS / "agree.py", {"TORCH_TRACE": str(tmp / "trace")}, args=[str(tmp / "live.json"), str(tmp / "live.jsonl")]
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = (tmp / "trace").glob("*.log")
    live = json.loads((tmp / "live.json").read_text())
    # the same run's log, replayed: its spans, its metrics and its summary
    provider, registry, summary = TracerProvider(), CollectorRegistry(), RunSummary("replay")
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(tmp / "replay.jsonl"))))
    tracing = SpanMapper(provider.get_tracer("t"), Settings(), live=False)
    replay_file(log, [CompileMetrics([PrometheusBackend(registry)]), summary], ReplayStats(), tracing=tracing)
    provider.shutdown()
    return Run(
        Seen("live", read_otlp_json_spans(tmp / "live.jsonl"), live["samples"], live["summary"]),
        Seen("replay", read_otlp_json_spans(tmp / "replay.jsonl"), _samples(registry), summary.to_dict()),
        _torch_records(log),
        live["counters"],
        log,
    )


def _seen(run: Run) -> list[Seen]:
    return [run.live, run.replay]


def test_a_compiles_time_is_torchs_duration_us_on_the_metric_the_root_and_the_summary_live_and_on_replay(run: Run):
    """torch's ``CompilationMetrics.duration_us`` is a frame's ``entire_frame_compile`` (a lazy backward's
    ``entire_backward_compile``). The root span keeps torch's outer event (a frame's ``dynamo``), which also covers
    torch recording that record: a few ms more, which on a small resume compile is a sixth of it. The compile's time,
    wherever a user reads it, is torch's: ``torch_compile_seconds_total``, the duration histogram, the root's
    ``torch.compile.duration_s`` and the summary."""
    torch_us = {(r["kind"], r["compile_id"]): r["duration_us"] for r in run.torch_records}
    resumes = [r for r in run.torch_records if str(r.get("co_name", "")).startswith("torch_dynamo_resume_in_")]
    assert len(resumes) >= 4 and len([k for k in torch_us if k[0] == "backward"]) >= 4  # several small resume compiles
    for seen in _seen(run):
        roots = {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]): r for r in seen.roots("frame", "backward")}
        assert set(roots) == set(torch_us), (seen.how, set(roots) ^ set(torch_us))
        longer = 0
        for key, us in torch_us.items():
            root = roots[key]
            assert compile_ns(root) == us * 1000, (seen.how, key)  # torch.compile.duration_s
            span_ns = int(root["endTimeUnixNano"]) - int(root["startTimeUnixNano"])
            assert span_ns >= us * 1000 - 1000, (seen.how, key)  # the span is torch's outer event, around it
            longer += span_ns > us * 1000 + 100_000
        assert longer >= len(resumes), seen.how  # each frame's outer event is longer than its duration_us
        for kind in ("frame", "backward"):
            want = sum(us for (k, _), us in torch_us.items() if k == kind) / 1e6
            assert seen.total("torch_compile_seconds_total", kind=kind) == pytest.approx(want, abs=1e-6), (seen.how, kind)
            hist = seen.total("torch_compile_frame_duration_seconds_sum", kind=kind)
            assert hist == pytest.approx(want, abs=1e-6), (seen.how, kind)
        others = sum(compile_ns(r) for r in seen.roots("compiled_autograd")) / 1e9  # no CompilationMetrics: the span
        assert seen.summary["wall_s"] == pytest.approx(sum(torch_us.values()) / 1e6 + others, abs=1e-5), seen.how
        assert seen.total("torch_compile_seconds_total") == pytest.approx(seen.summary["wall_s"], abs=1e-5), seen.how
        assert_summary_is_the_spans(seen.summary, seen.spans)


def test_a_graph_break_torch_could_not_handle_is_one_failure_as_torchs_counters_say_live_and_on_replay(run: Run):
    """A graph break inside a user's context manager: dynamo cannot resume after it, so it skips the frame, which runs
    in eager, and the compile fails (``Unsupported``). torch logs the graph break ("Failed to handle graph break
    gracefully") and the failed compile's metrics. Its counters count it once, as a failure: ``unimplemented`` +1,
    ``graph_break`` +0. So does torch-otel: a failure, and no graph break (the span keeps where it broke, as a
    ``torch.compile.unhandled_graph_break`` event). The handled graph breaks of the run equal torch's
    ``counters["graph_break"]``, and its failures ``counters["unimplemented"]``, but for the data-dependent branches,
    which torch files under ``unimplemented`` though it resumed after them (the test below)."""
    (before_unimplemented, before_gb), (after_unimplemented, after_gb) = run.counters["in_context"]
    assert (after_unimplemented - before_unimplemented, after_gb - before_gb) == (1, 0)  # torch's own count
    (failed,) = [r for r in run.torch_records if r.get("fail_type")]
    assert failed["co_name"] == "in_context" and failed["fail_type"] == "Unsupported"
    assert failed["has_guarded_code"] is False
    for seen in _seen(run):
        branches = _branch_breaks(run)
        assert seen.total("torch_compile_graph_breaks_total") == run.counters["graph_break"] + branches, seen.how
        assert seen.total("torch_compile_failures_total") == run.counters["unimplemented"] - branches == 1, seen.how
        assert seen.total("torch_compile_failures_total", fail_type="Unsupported") == 1, seen.how
        (root,) = [r for r in seen.roots("frame") if r["attrs"]["torch.compile.id"] == failed["compile_id"]]
        assert root["attrs"]["error.type"] == "Unsupported" and root["attrs"]["torch.compile.graph_break_count"] == "0"
        names = [e["name"] for e in root.get("events", [])]
        assert names.count("torch.compile.unhandled_graph_break") == 1 and "torch.compile.graph_break" not in names
        assert seen.summary["graph_breaks"]["total"] == run.counters["graph_break"] + branches, seen.how
        assert seen.summary["graph_breaks"]["unhandled"] == 1 and seen.summary["failures"]["by_type"] == {"Unsupported": 1}
        assert seen.summary["eager_fallbacks"] >= 1


def test_where_tlparse_counts_that_graph_break_too_torchs_counters_are_right(run: Run, tmp_path: Path):
    """tlparse reads the same log differently: it files the graph break's record under the failed compile (an
    artifact ``dynamo_graph_break_reason``) and lists the compile as a failure, so a reader of its pages counts both.
    torch-otel follows torch's counters, which count it once, as a failure: no graph was split there (the whole frame
    runs in eager), and ``CompilationMetrics.num_graph_breaks`` (``counters["graph_break"]``) leaves it out too."""
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    # tlparse, the reference reader: another program than the bridge's
    subprocess.run([tlparse, str(run.log), "-o", str(tmp_path), "--no-browser", "--overwrite"], check=True, capture_output=True)
    (failed,) = [r for r in run.torch_records if r.get("fail_type")]
    directory = json.loads((tmp_path / "compile_directory.json").read_text())
    names = [a["name"] for a in directory[f"[{failed['compile_id']}]"]["artifacts"]]
    assert any(n.startswith("dynamo_graph_break_reason") for n in names), names  # tlparse: a graph break ...
    failures = (tmp_path / "failures_and_restarts.html").read_text()
    assert f"[{failed['compile_id']}]" in failures and "Unsupported" in failures  # ... and a failure
    for seen in _seen(run):  # torch-otel: the failure only
        assert seen.total("torch_compile_failures_total") == 1 and seen.summary["failures"]["total"] == 1
        assert seen.summary["graph_breaks"]["total"] == run.counters["graph_break"] + _branch_breaks(run)


def _branch_breaks(run: Run) -> int:
    """torch's ``counters["unimplemented"]`` added by the workload's data-dependent branches (one per compile of
    ``branch``), each a graph break torch resumed after."""
    (unimplemented_before, _), (unimplemented_after, _) = run.counters["branch"]
    return int(unimplemented_after - unimplemented_before)


def test_a_data_dependent_branch_is_a_graph_break_torch_resumed_after_where_its_counters_say_unimplemented(
    run: Run, tmp_path: Path
):
    """``if y.sum() > 0:`` on a tensor: dynamo compiles the graph up to the branch, and the branch that runs is a resume
    frame of its own, compiled as it is first taken. torch's counters file this break under ``unimplemented`` and not
    ``graph_break``: its jump graph break logs the graph break, but does not move the ``Unsupported``'s count from the
    one to the other as its other resumed graph breaks do (torch 2.13 ``symbolic_convert.py``, ``jump_graph_break``
    beside ``break_graph_if_unsupported``). Read as the test above reads them, the counters say that torch could not
    handle a break it handled. torch's own record of the run says otherwise: no compile failed, and the resume frames
    compiled. tlparse agrees: a graph-break record under each compile of ``branch``, and no failure. So torch-otel
    counts each as a graph break that did not end its frame (``GB0170``, at the ``if``), live and on replay."""
    (unimplemented_before, gb_before), (unimplemented_after, gb_after) = run.counters["branch"]
    assert (unimplemented_after - unimplemented_before, gb_after - gb_before) == (2, 0)  # torch's counters
    branch = [r for r in run.torch_records if r.get("co_name") == "branch"]
    resumed = [r for r in run.torch_records if str(r.get("co_name", "")).startswith("torch_dynamo_resume_in_branch_at_")]
    assert len(branch) == 2 and len(resumed) == 3  # each branch's resume frame, and one recompiled for the new size
    assert not any(r.get("fail_type") for r in branch + resumed)
    directory = run_tlparse(run.log, tmp_path)
    failures = (tmp_path / "failures_and_restarts.html").read_text()
    line = next(
        n
        for n, text in enumerate((WORKLOADS / "agree.py").read_text().splitlines(), 1)
        if text.strip().startswith("if y.sum() > 0:")
    )
    for r in branch:
        names = [a["name"] for a in directory[f"[{r['compile_id']}]"]["artifacts"]]
        assert any(n.startswith("dynamo_graph_break_reason") for n in names), names
        assert f"[{r['compile_id']}]" not in failures
    for seen in _seen(run):
        ids = {r["compile_id"] for r in branch}
        roots = [r for r in seen.roots("frame") if r["attrs"]["torch.compile.id"] in ids]
        assert len(roots) == 2, seen.how
        for root in roots:
            assert "error.type" not in root["attrs"] and root["attrs"]["torch.compile.graph_break_count"] == "1", seen.how
            (event,) = [e for e in root.get("events", []) if e["name"] == "torch.compile.graph_break"]
            assert not any(a["key"] == "torch.compile.graph_break.ends_frame" for a in event.get("attributes", []))
        gb = seen.summary["graph_breaks"]
        assert {"code": "GB0170", "type": "Data-dependent branching", "count": 2} in gb["by_code"], seen.how
        (where,) = [w for w in gb["by_location"] if w["code"] == "GB0170"]
        assert (where["frame"], where["line"], where["count"]) == ("branch", line, 2), seen.how
        assert gb["ends_frame"] == 0 and seen.summary["failures"]["total"] == 1, seen.how  # in_context's alone
        assert seen.total("torch_compile_graph_breaks_total") == run.counters["graph_break"] + 2, seen.how


def test_compiled_autograd_graphs_are_counted_from_their_records_and_the_always_zero_series_is_gone(run: Run):
    """torch adds to ``counters["compiled_autograd"]["compiles"]`` only in a helper of its own tests: served as
    ``torch_compile_compiled_autograd_compiles_total`` it read 0 in every run. The graphs compiled autograd compiled
    are its records (``torch.compiled_autograd`` roots), counted in ``torch_compile_compiles_total{kind="compiled_autograd"}``,
    live and on replay; each one is a capture of torch's counter."""
    assert run.counters["compiled_autograd_captures"] == 2  # two batch sizes: two graphs
    for seen in _seen(run):
        assert len(seen.roots("compiled_autograd")) == run.counters["compiled_autograd_captures"], seen.how
        assert seen.total("torch_compile_compiles_total", kind="compiled_autograd") == 2, seen.how
        assert seen.summary["by_kind"]["compiled_autograd"] == 2
        assert not [s for s in seen.samples if s["name"].startswith("torch_compile_compiled_autograd_compiles")]
    assert run.live.total("torch_compile_compiled_autograd_captures_total") == run.counters["compiled_autograd_captures"]


def _exposition(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_fsdp2s_graph_break_under_a_users_context_manager_is_one_failure_on_each_rank_as_torch_counts_it(tmp_path: Path):
    """The real case: a 2-rank FSDP2 job (``fully_shard`` on gloo) whose compiled step calls the model inside a user's
    ``@contextmanager``. FSDP2's hook calls ``torch._dynamo.disable`` (graph break GB0007); dynamo cannot resume
    inside the user's context, so it skips the step, which runs in eager, and the compile fails. torch counts it once,
    as a failure (its ``graph_break`` counter stays 0); tlparse lists both a graph break and a failure. On every rank,
    live (/metrics, spans, run summary) and on replay of the job's logs, torch-otel counts one failure and no graph
    break, and the span keeps where it broke as a ``torch.compile.unhandled_graph_break`` event with code GB0007."""
    job = tmp_path / "job"
    job.mkdir()
    env = {
        "TORCH_TRACE": str(job / "trace"),
        "TORCH_OTEL_SUMMARY": str(job / "summary-{rank}.json"),
        **spans_to_file(job / "spans.jsonl"),
        "TORCH_OTEL_TRACES_FILE": str(job / "spans-{rank}.jsonl"),
    }
    argv = torchrun_under_torch_otel(2, WORKLOADS / "fsdp2.py")
    res = helpers.run([*argv, str(job)], env=env, timeout=600)  # the module's fixture is named run
    assert res.returncode == 0, res.stderr[-3000:]
    for rank in (0, 1):
        counters = json.loads((job / f"counters-{rank}.json").read_text())
        (gb0007,) = [n for reason, n in counters["unimplemented"].items() if "gb0007" in reason.lower()]
        assert (gb0007, counters["graph_break"]) == (1, 0)  # torch's own count: one failure, no graph break
        metrics = (job / f"metrics-{rank}.txt").read_text()
        assert _exposition(metrics, "torch_compile_failures_total") == 1
        assert f'torch_compile_failures_total{{fail_type="Unsupported",rank="{rank}"}} 1.0' in metrics
        assert _exposition(metrics, "torch_compile_graph_breaks_total") == 0
        summary = json.loads((job / f"summary-{rank}.json").read_text())
        assert summary["graph_breaks"]["total"] == 0 and summary["graph_breaks"]["unhandled"] == 1
        assert summary["failures"]["by_type"] == {"Unsupported": 1} and summary["eager_fallbacks"] == 1
        (root,) = [s for s in read_otlp_json_spans(job / f"spans-{rank}.jsonl") if "torch.compile.kind" in s["attrs"]]
        assert root["attrs"]["error.type"] == "Unsupported" and root["attrs"]["torch.compile.graph_break_count"] == "0"
        assert root["attrs"]["torch.distributed.rank"] == str(rank)
        (unhandled,) = [e for e in root["events"] if e["name"] == "torch.compile.unhandled_graph_break"]
        attrs = {a["key"]: next(iter(a["value"].values())) for a in unhandled["attributes"]}
        assert attrs["torch.compile.graph_break.code"] == "GB0007"
        assert "torch.compile.graph_break" not in [e["name"] for e in root["events"]]
    # replay of the job's directory: the same, summed over the two ranks
    res = run_cli(
        "replay", str(job / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"), script=True
    )
    assert res.returncode == 0, res.stderr[-3000:]
    replayed = json.loads((tmp_path / "replayed.json").read_text())
    assert replayed["ranks"] == [0, 1]
    assert replayed["graph_breaks"]["total"] == 0 and replayed["graph_breaks"]["unhandled"] == 2
    assert replayed["failures"]["by_type"] == {"Unsupported": 2}
    assert "graph breaks: 0; 2 not handled (their frames run in eager)" in res.stdout
    # tlparse on rank 0's log: a graph-break artifact under the failed compile, and the compile listed as a failure
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    (log,) = (job / "trace").glob("*rank_0*.log")
    subprocess.run(  # tlparse, the reference reader: another program than the bridge's
        [tlparse, str(log), "-o", str(tmp_path / "tl"), "--no-browser", "--overwrite"], check=True, capture_output=True
    )
    directory = json.loads((tmp_path / "tl" / "compile_directory.json").read_text())
    assert any(a["name"].startswith("dynamo_graph_break_reason") for a in directory["[0/0]"]["artifacts"])
    assert "Unsupported" in (tmp_path / "tl" / "failures_and_restarts.html").read_text()


def test_an_fsdp2_training_jobs_full_screen_keeps_its_recompiling_frames_on_both_ranks_live_and_on_replay(tmp_path: Path):
    """A 2-rank FSDP2 job whose model and loss are compiled with ``dynamic=False`` and trained on a sequence length
    that changes every step, graph calls counted (issue 52: on both ranks the "frames that keep recompiling" block
    vanished when the summary reached its line limit). Each rank's summary, as the rank wrote it and as a replay of the
    rank's log gives it, keeps the block with its fix, and the blocks that gave way say how many more rows there are."""
    job = tmp_path / "job"
    job.mkdir()
    env = {
        "TORCH_TRACE": str(job / "trace"),
        "TORCH_OTEL_SUMMARY": f"{job}/summary-{{rank}}.json,{job}/summary-{{rank}}.txt",
        "TORCH_OTEL_GRAPH_CALLS": "on",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    argv = torchrun_under_torch_otel(2, WORKLOADS / "fsdp2.py")
    res = helpers.run([*argv, str(job), "train"], env=env, timeout=600)  # the module's fixture is named run
    assert res.returncode == 0, res.stderr[-3000:]
    for rank in (0, 1):
        summary = json.loads((job / f"summary-{rank}.json").read_text())
        text = (job / f"summary-{rank}.txt").read_text()
        # the screen is full: the slowest compiles gave way (they say how many more), the block did not
        assert summary["graph_calls"] and len(text.splitlines()) <= MAX_LINES and "more compiles: --json" in text
        assert_the_screen_keeps_the_recompiling_frames(text, summary)
        (log,) = (job / "trace").glob(f"*rank_{rank}_*.log")
        out = tmp_path / f"replayed-{rank}.json"
        rep = run_cli("replay", str(log), "--json", str(out), "-o", str(tmp_path / f"r{rank}.jsonl"))
        assert rep.returncode == 0, rep.stderr[-3000:]
        assert_the_screen_keeps_the_recompiling_frames(summary_screen(rep.stdout), json.loads(out.read_text()))


POOL = """
import functools, json, sys, time
import torch
from torch._inductor import config
from torch._inductor.async_compile import AsyncCompile
from torch_otel._capture.cpu import compile_cpu_ns, worker_pids

config.compile_threads = 2
config.worker_start_method = "subprocess"  # inductor's SubprocPool: a sidecar process and its workers
AsyncCompile.wait_pool_ready()
(total0, others0), own0 = compile_cpu_ns(), time.process_time_ns()
burn = "(lambda t: (sum(range(30_000_000)), __import__('time').process_time_ns() - t)[1])(__import__('time').process_time_ns())"
took = AsyncCompile.process_pool().submit(functools.partial(eval, burn)).result()  # its CPU, as the worker saw it
(total1, others1), own1 = compile_cpu_ns(), time.process_time_ns()
json.dump({"took": took, "others": others1 - others0, "total": total1 - total0, "own": own1 - own0,
           "pids": worker_pids()}, sys.stdout)
"""


def test_a_compiles_cpu_counts_inductors_compile_worker_processes():
    """Inductor builds Triton kernels in the processes of its ``SubprocPool`` (a sidecar and the workers it starts),
    which live as long as the pool. On Linux, their CPU between two reads is counted in a compile's CPU: work done in
    a worker shows in the part in other processes, to the clock tick (10 ms). Elsewhere they are not read (docs)."""
    res = run_python("-c", args=[POOL], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["took"] > 0.2e9
    assert got["total"] - got["others"] == pytest.approx(got["own"], abs=0.02e9)  # this process's own CPU, apart
    if not sys.platform.startswith("linux"):
        assert got["others"] < got["took"] / 2
        return
    assert len(got["pids"]) >= 2  # the sidecar and a worker
    assert got["others"] == pytest.approx(got["took"], abs=0.06e9)


def test_a_graph_break_in_a_loop_is_one_failed_compile_where_torchs_counters_say_two_unimplemented(tmp_path: Path):
    """A graph break inside a loop: dynamo cannot resume in the loop, so it skips the whole frame (``GB7000``), which
    runs in eager from then on. torch's counters add two to ``unimplemented``: the break, and the skip it raises for
    it. Read as the test above reads them, that is two things torch could not handle. torch's own record of the run
    has one compile, failed (``Unsupported``), and tlparse lists that one failure. torch-otel counts one failure and one
    graph break torch could not handle, no handled one, live and on replay of the same log."""
    out = tmp_path / "run"
    env = {
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCH_OTEL_SUMMARY": str(tmp_path / "live.json"),
        **spans_to_file(tmp_path / "s.jsonl"),
    }
    res = run_python(WORKLOADS / "loop_break.py", env, args=[str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    counters = json.loads((out / "counters.json").read_text())
    assert (sum(counters.get("unimplemented", {}).values()), sum(counters.get("graph_break", {}).values())) == (2, 0)
    (log,) = (tmp_path / "trace").glob("*.log")
    records = _torch_records(log)
    assert [(r["compile_id"], r["fail_type"]) for r in records] == [("0/0", "Unsupported")]  # one compile, failed
    run_tlparse(log, tmp_path / "tl")
    failures = (tmp_path / "tl" / "failures_and_restarts.html").read_text()
    assert failures.count("[0/0]") == 1 and "Unsupported" in failures  # tlparse: the one failure
    res = run_cli("replay", str(log), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    for how, summary in (
        ("live", json.loads((tmp_path / "live.json").read_text())),
        ("replay", json.loads((tmp_path / "replayed.json").read_text())),
    ):
        assert summary["compiles"] == 1 and summary["failures"]["by_type"] == {"Unsupported": 1}, how
        gb = summary["graph_breaks"]
        assert (gb["total"], gb["unhandled"], gb["ends_frame"]) == (0, 1, 0), (how, gb)
        assert summary["eager_fallbacks"] == 1, how


def test_a_failed_compile_that_raised_into_the_caller_left_no_frame_in_eager(tmp_path: Path):
    """torch suppresses only its soft failures (``Unsupported``, ``UserError``), running the frame uncompiled; any other
    failure raises into the caller unless ``suppress_errors`` is on, as every failure does under ``fullgraph=True`` or
    ``error_on_graph_break(True)``. A backend that raises (``BackendCompilerFailed``, twice: each call compiles again),
    a graph break under ``fullgraph=True`` (``Unsupported``, twice), one under ``error_on_graph_break(True)``, and a
    size ``mark_dynamic`` made dynamic that the code specialised (``ConstraintViolationError``, after its backend made
    a graph) raised into the script; a graph break in a loop left its frame in eager. Two frames hit the recompile limit
    under ``fail_on_recompile_limit_hit`` and under ``fullgraph=True``: torch raised ``FailOnRecompileLimitHit`` at each
    call past it (four), and ran nothing in eager. Live: eleven failures, four limit hits, one frame left in eager. On
    replay the same, but for the ``fullgraph=True`` and ``error_on_graph_break`` failures of a graph break: torch's log
    says neither, so replay reads their ``Unsupported`` as suppressed (a limit hit that raised has its own type)."""
    env = {
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCH_OTEL_SUMMARY": str(tmp_path / "live.json"),
        **spans_to_file(tmp_path / "s.jsonl"),
    }
    res = run_python(WORKLOADS / "raised.py", env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("raised")] == [
        "raised broken_backend BackendCompilerFailed",
        "raised broken_backend BackendCompilerFailed",
        "raised whole Unsupported",
        "raised whole Unsupported",
        "raised strict Unsupported",
        "raised constrained ConstraintViolationError",
        *["raised limited FailOnRecompileLimitHit"] * 2,
        *["raised limited_whole FailOnRecompileLimitHit"] * 2,
    ]
    (log,) = (tmp_path / "trace").glob("*.log")
    records = _torch_records(log)
    failed = ["BackendCompilerFailed"] * 2 + ["ConstraintViolationError"] + ["FailOnRecompileLimitHit"] * 4 + ["Unsupported"] * 4
    assert sorted(r["fail_type"] for r in records if r["fail_type"]) == failed
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["failures"]["by_type"] == {
        "BackendCompilerFailed": 2,
        "ConstraintViolationError": 1,
        "FailOnRecompileLimitHit": 4,
        "Unsupported": 4,
    }
    assert live["eager_fallbacks"] == 1 and live["recompile_limit_hits"] == 4
    assert [(f["function"], f["why"]) for f in live["eager_frames"]] == [("looped", "graph_break_in_loop")]
    # the graph its backend made before the constraint failed was never installed: the frame's one graph ran once
    (frame,) = [f for f in live["graph_calls"]["frames"] if f["function"] == "constrained"]
    assert [(g["calls"], g["id"].endswith("/1")) for g in frame["graphs"]] == [(1, True)], frame
    roots = [s for s in read_otlp_json_spans(tmp_path / "s.jsonl") if "torch.compile.kind" in s["attrs"]]
    eager = sorted(s["attrs"]["code.function.name"] for s in roots if s["attrs"].get("torch.compile.eager_fallback"))
    assert eager == ["looped"]
    limited = [s for s in roots if s["attrs"].get("torch.compile.recompile_limit_exceeded")]
    assert sorted(s["attrs"]["code.function.name"] for s in limited) == ["limited"] * 2 + ["limited_whole"] * 2
    for s in limited:  # the root says what happened: the call raised, and how to stop it
        desc = s["status"]["message"]
        assert "raised FailOnRecompileLimitHit into the caller" in desc and "runs in eager" not in desc, desc
    assert "makes its next new input raise FailOnRecompileLimitHit" in res.stderr and "sends it to eager" not in res.stderr
    res = run_cli("replay", str(log), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    replayed = json.loads((tmp_path / "replayed.json").read_text())
    assert replayed["failures"]["by_type"] == live["failures"]["by_type"]
    assert replayed["recompile_limit_hits"] == 4
    # torch's log records neither fullgraph=True nor error_on_graph_break: replay reads their Unsupported as suppressed
    assert sorted(f["function"] for f in replayed["eager_frames"]) == ["looped", "strict", "whole"]
