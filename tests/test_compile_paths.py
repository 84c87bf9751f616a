"""Every way torch compiles: torch.export, AOTInductor, AOT precompile, and real logs from GPU runs.

Each export or AOT compile is its own trace, live and on replay; the records' own ids decide which
compile a record belongs to (as tlparse keys them); replayed spans carry the identity of the process
that wrote the log.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import torch_otel
from tests.helpers import (
    HERE,
    WORKLOADS,
    read_otlp_json_spans,
    run_cli,
    run_python,
    span_compile_ids,
    spans_to_file,
    tlparse_compile_ids,
)
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
from torch_otel._version import torch_version

CORPUS = HERE / "data" / "tlparse-corpus"
CORPUS_LOGS = sorted(p.name for p in CORPUS.glob("*.gz"))


def _unzip(name: str, into: Path) -> Path:
    out = into / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((CORPUS / name).read_bytes()))
    return out


def _replay(paths: list[Path], out: Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = run_cli("replay", *map(str, paths), "--output", str(out), env={"OTEL_METRICS_EXPORTER": "none"})
    return proc, read_otlp_json_spans(out) if out.exists() else []


def _roots(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if "torch.compile.kind" in s["attrs"]]


def _resources(path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, root span attributes) for each root span of an OTLP-JSON file."""
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            res = {kv["key"]: next(iter(kv["value"].values())) for kv in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    attrs = {kv["key"]: next(iter(kv["value"].values())) for kv in sp.get("attributes", [])}
                    if "torch.compile.kind" in attrs:
                        out.append((res, attrs))
    return out


def _strings(value: dict[str, Any]) -> list[str]:
    """An OTLP-JSON array attribute's values."""
    return [next(iter(v.values())) for v in value["values"]]


def _frame_compiles_in_log(log: Path) -> Counter[str]:
    """How many frame compiles of each id a log holds: torch writes one ``compilation_metrics`` record per
    frame compile, keyed by the record's own ids. Read here straight from the text, not by torch-otel's parser.
    """
    counts: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        if '] {"compilation_metrics": ' in line:
            md = json.loads(line[line.index("{") :])
            if "frame_id" in md:
                counts[f"{md['frame_id']}/{md['frame_compile_id']}"] += 1
    return counts


@pytest.mark.parametrize("name", CORPUS_LOGS)
def test_real_logs_have_tlparses_compile_ids_one_root_per_compile_none_invented(name, tmp_path):
    """For every log of the corpus (real GPU, export and AOTInductor logs among them): replay succeeds, the
    compile ids equal the ones tlparse lists in compile_directory.json, each frame compile has exactly one
    root, and no compile is invented (a root without an id is AOTInductor's: torch logs none for it).
    """
    log = _unzip(name, tmp_path)
    proc, spans = _replay([log], tmp_path / "spans.jsonl")
    assert proc.returncode == 0, proc.stderr
    everything = _roots(spans)
    roots = [r for r in everything if r["attrs"]["torch.compile.kind"] != "runtime"]
    with_ids = [r for r in roots if r["attrs"]["torch.compile.id"] != "-/-"]
    assert span_compile_ids(with_ids) == tlparse_compile_ids(log, tmp_path / "tl")
    assert all(r["attrs"]["torch.compile.kind"] == "aot_inductor" for r in roots if r not in with_ids)
    # work timed after a compile ended (GPU autotuning, cudagraph set-up) names a compile that exists
    runtime = {r["attrs"]["torch.compile.id"] for r in everything if r not in roots}
    assert runtime <= {r["attrs"]["torch.compile.id"] for r in with_ids}
    frames = Counter(r["attrs"]["torch.compile.id"] for r in roots if r["attrs"]["torch.compile.kind"] == "frame")
    assert frames == _frame_compiles_in_log(log)
    if not roots:  # an export-only log: a success that says what it holds
        assert "no compile in this log" in proc.stdout and "exported_program" in proc.stdout


def test_the_records_ids_decide_not_the_payloads_stale_compile_id(tmp_path):
    """In this real multi-rank log the chromium events' ``args.compile_id`` and the metrics' ``compile_id`` say
    ``0/1`` for the compiles whose records carry frame_compile_id 2 and 3.

    tlparse keys each record by its own ids and lists 0/0 to 0/3; so does torch-otel now. It is right to: each
    of those compiles has its own dynamo_start, guards, output code and metrics record, and its own begin and
    end. Taking the payload's id had merged three compiles into one ``0/1`` root.
    """
    log = _unzip("multi_rank_runtime_rank_0.log.gz", tmp_path)
    proc, spans = _replay([log], tmp_path / "spans.jsonl")
    assert proc.returncode == 0, proc.stderr
    ids = sorted(r["attrs"]["torch.compile.id"] for r in _roots(spans) if r["attrs"]["torch.compile.kind"] == "frame")
    assert ids == ["0/0", "0/1", "0/2", "0/3"]
    assert set(ids) == tlparse_compile_ids(log, tmp_path / "tl")
    assert '"compile_id": "0/1"' in log.read_text().split('"frame_compile_id": 3')[1][:2000]


def test_gpu_phases_reach_the_phase_metric_with_their_own_labels(tmp_path):
    """Triton kernel builds, autotuning and cudagraph set-up, as real CUDA logs record them, are phases of their own;
    so is AOTInductor's build. cudagraph set-up and runtime autotuning run at a graph's first call, after its compile
    ended: each is a ``torch.compile.runtime`` root under that graph's compile id, and counts in the phase metric,
    not as a compile."""
    registry = CollectorRegistry()
    metrics = CompileMetrics([PrometheusBackend(registry)], run_id="gpu")
    for name in (
        "autotune_with_compile_id.log.gz",
        "inductor_provenance_jit_cuda_log.txt.gz",
        "inductor_provenance_aot_cuda_log.txt.gz",
    ):
        replay_file(CORPUS / name, [metrics], ReplayStats())
    for phase in (
        "triton_compile",
        "autotune",
        "cudagraphs",
        "kernel_compile_wait",
        "aot_inductor_build",
        "cpp_compile",
        "inductor",
    ):
        count = registry.get_sample_value("torch_compile_phase_duration_seconds_count", {"rank": "0", "phase": phase})
        assert count and count > 0, phase
    aoti = registry.get_sample_value("torch_compile_compiles_total", {"rank": "0", "kind": "aot_inductor", "status": "ok"})
    assert aoti == 1
    frames = registry.get_sample_value("torch_compile_compiles_total", {"rank": "0", "kind": "frame", "status": "ok"})
    assert frames == 2  # the runtime work is no compile
    assert registry.get_sample_value("torch_compile_compiles_total", {"rank": "0", "kind": "runtime", "status": "ok"}) is None
    log = _unzip("autotune_with_compile_id.log.gz", tmp_path)
    proc, spans = _replay([log], tmp_path / "spans.jsonl")
    assert proc.returncode == 0 and "orphan" not in proc.stdout, proc.stdout
    runtime = [r for r in _roots(spans) if r["name"] == "torch.compile.runtime"]
    assert runtime and all(r["attrs"]["torch.compile.id"] == "0/0" for r in runtime)
    children = {s["name"] for s in spans if any(s.get("parentSpanId") == r["spanId"] for r in runtime)}
    assert "cudagraphify.get_container" in children


def test_replayed_spans_carry_the_writing_processes_identity_not_the_replayers(tmp_path):
    """Two ranks' logs: each root's resource has that process's pid (from its log lines) and rank; no host.name.

    The rank is the records' own (``"rank": 1`` in the file tlparse's corpus names ``rank_5``), as tlparse reads it.
    """
    logs = [_unzip(n, tmp_path) for n in ("multi_rank_runtime_rank_0.log.gz", "multi_rank_runtime_rank_5.log.gz")]
    proc, _ = _replay(logs, tmp_path / "spans.jsonl")
    assert proc.returncode == 0, proc.stderr
    seen = set()
    for res, _attrs in _resources(tmp_path / "spans.jsonl"):
        assert "host.name" not in res and res["torch_otel.replay"] is True
        seen.add((int(res["process.pid"]), int(res["torch.distributed.rank"])))
    written = set()
    for log in logs:
        text = log.read_text()
        written |= {(int(pid), int(rank)) for pid, rank in re.findall(r"^V\d{4} \S+ +(\d+) .*?\"rank\": (\d+)", text, re.M)}
    assert seen == written and len(seen) == 2


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Any]:
    """tests/workloads/exports.py under the bridge with TORCH_TRACE on, AOTInductor included (warm cache)."""
    d = tmp_path_factory.mktemp("exports")
    res = run_python(
        WORKLOADS / "exports.py",
        {
            "WITH_BRIDGE": "1",
            "AOTI": "1",
            "OUT_DIR": str(d),
            "TORCH_TRACE": str(d / "trace"),
            **spans_to_file(d / "live.jsonl"),
        },
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = (d / "trace").glob("*.log")
    return {"dir": d, "log": log, "live": read_otlp_json_spans(d / "live.jsonl"), "stderr": res.stderr}


def test_each_export_and_aot_compile_is_its_own_trace_live(exported):
    spans = exported["live"]
    roots = sorted(_roots(spans), key=lambda s: int(s["startTimeUnixNano"]))
    kinds = [(r["name"], r["attrs"]["torch.compile.kind"]) for r in roots]
    assert kinds == [
        ("torch.export", "export"),  # non-strict: the first compile of the process, armed inside its import
        ("torch.export", "export"),  # strict
        ("torch.export", "export"),  # failing
        ("torch.compile.aot_compile", "precompile"),
        ("torch._inductor.aot_compile", "aot_inductor"),
        ("torch.export", "export"),  # draft
    ]
    nonstrict, strict, failing, pre, aoti, draft = roots
    assert nonstrict["attrs"]["torch.export.strict"] is False and strict["attrs"]["torch.export.strict"] is True
    assert draft["attrs"]["torch.export.api"] == "torch.export.draft_export"
    assert int(draft["attrs"]["torch.export.draft_export.failure_count"]) == 0
    assert failing["status"]["code"] == 2 and failing["attrs"]["error.type"] == "GuardOnDataDependentSymNode"
    assert "export failed: GuardOnDataDependentSymNode" in exported["stderr"]
    for r in (nonstrict, strict, pre, aoti, draft):
        assert r.get("status", {}).get("code", 0) != 2, r["attrs"]
    package = os.path.dirname(torch_otel.__file__) + os.sep  # the package's own folder: not any path holding its name
    for r in roots:  # the user's frames only: never the bridge's own export hook (an editable install included)
        assert package not in str(r["attrs"].get("code.stacktrace", "")), r["attrs"]["code.stacktrace"]
    children = {r["spanId"]: sorted({s["name"] for s in spans if s.get("parentSpanId") == r["spanId"]}) for r in roots}
    assert "fullgraph_capture" in children[strict["spanId"]]  # torch's dynamo capture, a phase of the export
    assert {"compile_attempt_0"} <= set(children[pre["spanId"]])
    aoti_phases = {s["name"] for s in spans if s["traceId"] == aoti["traceId"]}
    assert {"inductor_compile", "AotCodeCompiler.compile", "compile_file"} <= aoti_phases
    # The precompile's frame id is torch's own count, which differs by release (1/0 on 2.13, 2/0 on 2.15): read it from
    # the same run's log, as tlparse lists it.
    assert strict["attrs"]["torch.compile.id"] == "0/0" and pre["attrs"]["torch.compile.id"] == _logged_precompile_id(exported)


def _logged_precompile_id(exported: dict[str, Any]) -> str:
    """The compile id torch gave the AOT precompile in the run's TORCH_TRACE: its ``aot_compile_fullgraph`` capture."""
    ids = []
    for line in exported["log"].read_text().splitlines():
        if '"chromium_event"' in line and '"frame_id"' in line:
            m = re.search(r'"frame_id": (\d+), "frame_compile_id": (\d+)', line)
            if m and f"{m.group(1)}/{m.group(2)}" not in ids:
                ids.append(f"{m.group(1)}/{m.group(2)}")
    others = [i for i in ids if i != "0/0"]
    assert len(others) == 1, ids  # the strict export is 0/0; the precompile is the one other compile id
    return others[0]


def test_draft_exports_report_agrees_with_tlparse_e(exported, tmp_path):
    """tlparse's export mode reads the same log's draft-export report: no issues, as the live root says (0 failures)."""
    tlparse = str(Path(sys.executable).parent / "tlparse")
    subprocess.run([tlparse, "-e", str(exported["log"]), "-o", str(tmp_path / "e"), "--no-browser"], check=True, timeout=300)
    assert "No issues are found" in (tmp_path / "e" / "index.html").read_text()
    (draft,) = [r for r in _roots(exported["live"]) if r["attrs"].get("torch.export.api") == "torch.export.draft_export"]
    assert int(draft["attrs"]["torch.export.draft_export.failure_count"]) == 0


def test_exports_and_aot_compiles_replay_as_their_own_traces_and_match_tlparse(exported, tmp_path):
    """The same run's TORCH_TRACE: the strict export, the precompile and AOTInductor become their roots again.

    A non-strict export logs no event at all (and draft_export takes torch's handler away): those are live-only.
    """
    proc, spans = _replay([exported["log"]], tmp_path / "replayed.jsonl")
    assert proc.returncode == 0, proc.stderr
    roots = sorted(_roots(spans), key=lambda s: int(s["startTimeUnixNano"]))
    assert [(r["name"], r["attrs"]["torch.compile.id"]) for r in roots] == [
        ("torch.export", "0/0"),
        ("torch.compile.aot_compile", _logged_precompile_id(exported)),
        ("torch._inductor.aot_compile", "0/0"),  # AOTInductor compiles in the strict export's saved compile context
    ]
    with_ids = [r for r in roots if r["attrs"]["torch.compile.kind"] != "aot_inductor"]
    assert span_compile_ids(with_ids) == tlparse_compile_ids(exported["log"], tmp_path / "tl")
    assert "orphan phases" not in proc.stdout
    live = {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]) for r in _roots(exported["live"])}
    assert {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]) for r in roots} <= live
    for res, _ in _resources(tmp_path / "replayed.jsonl"):
        assert res["torch.version"] == torch_version() and "host.name" not in res  # the torch that wrote the log
    # The strict export's tree is the live one's: torch.export > fullgraph_capture > compile_attempt_0 > ...
    (live_strict,) = [r for r in _roots(exported["live"]) if r["attrs"].get("torch.export.strict") is True]
    assert _edges(spans, roots[0]) == _edges(exported["live"], live_strict)
    assert ("torch.export", "fullgraph_capture") in _edges(spans, roots[0])


def _edges(spans: list[dict[str, Any]], root: dict[str, Any]) -> list[tuple[str, str]]:
    """A compile's tree as (parent name, child name) pairs."""
    mine = {s["spanId"]: s for s in spans if s["traceId"] == root["traceId"]}
    return sorted({(mine[s["parentSpanId"]]["name"], s["name"]) for s in mine.values() if s.get("parentSpanId") in mine})


def test_export_metrics_have_their_own_kind(cap):
    """In process: torch_compile_compiles_total{kind="export"} counts exports, failed ones apart; no frame is counted."""
    import torch

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1 if x.sum() > 0 else x  # data-dependent: a non-strict export fails

    x = torch.ones(4)
    torch.export.export(torch.nn.ReLU(), (x,), strict=False)
    torch.export.export(torch.nn.ReLU(), (x,), strict=True)
    with pytest.raises(Exception, match="data-dependent|Could not guard"):
        torch.export.export(M(), (x,), strict=False)
    assert cap.sample("torch_compile_compiles_total", rank="0", kind="export", status="ok") == 2
    assert cap.sample("torch_compile_compiles_total", rank="0", kind="export", status="failed") == 1
    assert not cap.sample("torch_compile_compiles_total", rank="0", kind="frame", status="ok")
    assert [r.name for r in cap.roots("export")] == ["torch.export"] * 3


def test_a_compile_names_its_inductor_debug_directory_trace_file_and_tlparse_directory(tmp_path):
    """TORCH_COMPILE_DEBUG=1: the root names inductor's per-graph directory and the files in it; with TORCH_TRACE on,
    the log file and tlparse's per-compile directory (the one tlparse really writes), live and on replay."""
    res = run_python(
        WORKLOADS / "inductor_debug.py",
        {
            "TORCH_COMPILE_DEBUG": "1",
            # inductor writes the directory when it compiles the graph, not when a cache serves it; the C++
            # kernel itself still comes from the run's warm cache
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            "TORCH_TRACE": str(tmp_path / "trace"),
            **spans_to_file(tmp_path / "live.jsonl"),
        },
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (root,) = _roots(read_otlp_json_spans(tmp_path / "live.jsonl"))
    (debug_dir,) = _strings(root["attrs"]["torch.compile.inductor.debug_dirs"])
    assert f"debug trace: {debug_dir}" in res.stderr  # the directory torch itself reports
    files = _strings(root["attrs"]["torch.compile.inductor.debug_files"])
    assert {"fx_graph_readable.py", "output_code.py", "ir_pre_fusion.txt", "ir_post_fusion.txt"} <= set(files)
    assert set(files) == {p.name for p in Path(debug_dir).iterdir() if p.is_file()}
    (log,) = (tmp_path / "trace").glob("*.log")
    assert root["attrs"]["torch.compile.trace_log.file"] == str(log)
    tl = tmp_path / "tl"
    tlparse_compile_ids(log, tl)
    assert (tl / root["attrs"]["torch.compile.tlparse.directory"]).is_dir()
    proc, spans = _replay([log], tmp_path / "replayed.jsonl")
    assert proc.returncode == 0, proc.stderr
    (replayed,) = _roots(spans)
    for key in ("torch.compile.trace_log.file", "torch.compile.tlparse.directory"):
        assert replayed["attrs"][key] == root["attrs"][key]


def test_a_compile_served_from_the_mega_cache_says_so(tmp_path):
    """torch.compiler.save_cache_artifacts in one process, load_cache_artifacts in a fresh one with an empty cache:
    the second process's compile hits the loaded entries, and its root span and /metrics say they came from there."""
    from tests.servers import free_port

    artifacts = tmp_path / "artifacts.bin"
    saved = run_python(WORKLOADS / "mega_cache.py", {"ARTIFACTS": str(artifacts)}, args=["save"])
    assert saved.returncode == 0 and "saved" in saved.stdout, saved.stderr[-3000:]
    loaded = run_python(
        WORKLOADS / "mega_cache.py",
        {
            "WITH_BRIDGE": "1",
            "ARTIFACTS": str(artifacts),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty-cache"),
            **spans_to_file(tmp_path / "live.jsonl"),
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(free_port()),
        },
        args=["load"],
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    (root,) = _roots(read_otlp_json_spans(tmp_path / "live.jsonl"))
    # the AOTAutograd entry, and the FX graph it loads, both came from the artifacts; torch counts them as local hits
    for cache in ("aot_autograd", "fx_graph"):
        assert int(root["attrs"][f"torch.compile.cache.{cache}.mega_cache.hits"]) == 1
        assert int(root["attrs"][f"torch.compile.cache.{cache}.local.hits"]) == 1
    lines = loaded.stdout.splitlines()
    for cache in ("aot_autograd", "fx_graph"):
        assert f'torch_compile_cache_requests_total{{cache="{cache}",location="mega_cache",rank="0",result="hit"}} 1.0' in lines
    assert not any('location="local"' in line for line in lines), lines


def test_a_new_compiled_autograd_graph_says_why_when_torch_logs_it(tmp_path):
    """With TORCH_LOGS=compiled_autograd_verbose, torch logs each compiled-autograd cache miss before compiling the
    graph; that line is the graph's recompile reason (the first graph has none: it is no recompile). torch's own
    output to stderr is unchanged: the bridge adds a handler, never a level."""
    env = spans_to_file(tmp_path / "live.jsonl")
    res = run_python(
        WORKLOADS / "compiled_autograd.py",
        {**env, "TORCH_LOGS": "compiled_autograd_verbose", "TORCH_TRACE": str(tmp_path / "trace")},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ca = sorted(
        (
            r
            for r in _roots(read_otlp_json_spans(tmp_path / "live.jsonl"))
            if r["attrs"]["torch.compile.kind"] == "compiled_autograd"
        ),
        key=lambda r: int(r["attrs"]["torch.compiled_autograd.id"]),
    )
    misses = [line.split("] ", 1)[1] for line in res.stderr.splitlines() if "Cache miss due to" in line]
    assert len(ca) == len(misses) == 2
    assert "torch.compile.recompile_reason" not in ca[0]["attrs"]
    assert ca[1]["attrs"]["torch.compile.recompile_reason"] == misses[1].removeprefix("[__compiled_autograd_verbose] ")
    assert ca[1]["attrs"]["torch.compile.recompile_reason.category"] == "autograd_graph"
    # on replay: torch's compiled_autograd_compile_reasons record of the same run
    (log,) = (tmp_path / "trace").glob("*.log")
    proc, spans = _replay([log], tmp_path / "replayed.jsonl")
    assert proc.returncode == 0, proc.stderr
    replayed = {
        r["attrs"]["torch.compiled_autograd.id"]: r["attrs"].get("torch.compile.recompile_reason")
        for r in _roots(spans)
        if r["attrs"]["torch.compile.kind"] == "compiled_autograd"
    }
    assert replayed == {r["attrs"]["torch.compiled_autograd.id"]: r["attrs"].get("torch.compile.recompile_reason") for r in ca}
    plain = run_python(WORKLOADS / "compiled_autograd.py", env)  # not asked for: nothing logged, no reason
    assert plain.returncode == 0 and "Cache miss" not in plain.stderr
