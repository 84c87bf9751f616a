"""GPU paths: the device on the spans, and what a recorded GPU run (bench/gpu/check.py on an H200) showed.

Tests that need CUDA skip without it; the others run on CPU from the committed GPU log
(``tests/data/gpu-h200``), which live capture on that GPU was checked against (docs/compatibility.md, On a GPU).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry

from tests.helpers import read_otlp_json_spans, span_compile_ids, tlparse_compile_ids
from torch_otel._core.categories import PHASE_FIELDS
from torch_otel._core.settings import Settings
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
from torch_otel._sinks.spans import SpanMapper

CUDA = torch.cuda.is_available()
DEVICE_ATTRS = ("torch.cuda.device.name", "torch.cuda.device.capability", "torch.cuda.device.index")


@pytest.mark.skipif(CUDA, reason="on a machine with a GPU, dynamo itself initialises CUDA at its first compile")
def test_a_process_that_never_touched_cuda_gets_no_device_attributes_and_cuda_stays_uninitialised(cap):
    """On a machine without a GPU (this build of torch has CUDA compiled in), the bridge names no device and never
    initialises CUDA to find one. (Where a GPU is present, dynamo initialises CUDA at its first compile, as it saves
    the CUDA RNG state, so later compiles name the current device whatever their code runs on.)"""
    assert not torch.cuda.is_initialized()
    torch.compile(lambda x: x.sin() + 1, backend="eager")(torch.randn(4))
    (root,) = cap.roots()
    assert not set(DEVICE_ATTRS) & set(root.attributes)
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_compile_on_a_gpu_names_its_device_on_the_root_span(cap):
    x = torch.randn(64, device="cuda")
    torch.compile(lambda t: t.sin() * 2, backend="inductor")(x)
    (root,) = cap.roots()
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    assert root.attributes["torch.cuda.device.name"] == torch.cuda.get_device_name(index)
    assert root.attributes["torch.cuda.device.capability"] == f"{major}.{minor}"
    assert root.attributes["torch.cuda.device.index"] == index


# --- from the recorded H200 run (tests/data/gpu-h200): on any machine -------------------------------------------

DATA = Path(__file__).parent / "data" / "gpu-h200"
RUNS = ("transformer_full", "cudagraphs_full")
# CompilationMetrics fields -> the phase label named like each (docs/metrics.md, Phase labels): the package's table
FIELD_LABELS = PHASE_FIELDS


@dataclass
class Replayed:
    torch: dict[str, Any]  # torch's own record, from the GPU process
    live: dict[str, Any]  # the live spans' digest, from the same process
    spans: list[dict[str, Any]]
    phases: dict[str, float]
    stats: ReplayStats


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Replayed]:
    out = {}
    for name in RUNS:
        recorded = json.loads((DATA / f"{name}.json").read_text())
        path = tmp_path_factory.mktemp(name) / "spans.jsonl"
        provider, registry, stats = TracerProvider(), CollectorRegistry(), ReplayStats()
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(path))))
        tracing = SpanMapper(provider.get_tracer("t"), Settings(capture="full"), live=False)
        replay_file(
            DATA / f"{name}.log.gz", [CompileMetrics([PrometheusBackend(registry)])], stats, artifacts=True, tracing=tracing
        )
        provider.shutdown()
        phases = {
            s.labels["phase"]: s.value
            for fam in registry.collect()
            for s in fam.samples
            if s.name == "torch_compile_phase_duration_seconds_sum"
        }
        out[name] = Replayed(recorded["torch"], recorded["live"], read_otlp_json_spans(path), phases, stats)
    return out


def _roots(spans: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [s for s in spans if not s.get("parentSpanId") and s["attrs"].get("torch.compile.kind") in kinds]


@pytest.mark.parametrize("name", RUNS)
def test_phase_labels_equal_torchs_fields_on_a_recorded_gpu_run(replayed: dict[str, Replayed], name: str):
    """Each label named like a CompilationMetrics field sums to that field over torch's records, runtime ones
    included: ``autotune`` is max-autotune's template autotuning and precompiling while compiling plus the
    kernels' benchmarking and coordinate-descent search at their first run (torch's two autotune fields), and
    ``cudagraphs`` is each cudagraph tree's set-up and each graph it records (``runtime_cudagraphify_time_us``).
    On the H200, before the labels took every event torch adds into those fields, ``autotune`` missed 13.8 of
    14.3 s and ``cudagraphs`` 4.7 of 18 ms."""
    run = replayed[name]
    want: dict[str, float] = {}
    for r in run.torch["records"]:
        for field, (label, scale) in FIELD_LABELS.items():
            if isinstance(r.get(field), (int, float)):
                want[label] = want.get(label, 0.0) + r[field] * scale
    assert want.get("autotune", 0) > 0 and want.get("triton_compile", 0) > 0
    if name == "transformer_full":
        assert want["autotune"] > 20  # template autotuning and coordinate descent: most of this run's compile time
    else:
        assert want["cudagraphs"] > 0
    for label, seconds in want.items():
        # torch adds each event's time in whole microseconds
        assert run.phases.get(label, 0.0) == pytest.approx(seconds, abs=1e-3), (name, label)
        assert run.live["phase_sums"].get(label, 0.0) == pytest.approx(seconds, abs=1e-3), (name, label)


@pytest.mark.parametrize("name", RUNS)
def test_replay_of_a_gpu_log_equals_live_capture_on_that_gpu(replayed: dict[str, Replayed], name: str):
    """The same compiles, with torch's durations, the same phase spans per compile, the same runtime roots
    (cudagraph set-up and runtime autotuning after each compile) and the same phase sums, as the bridge made of
    the run live on the GPU, at full capture. The device is named live only: the log does not name it."""
    run = replayed[name]
    roots = _roots(run.spans, "frame", "backward", "runtime")
    live = run.live["roots"]
    assert sorted((r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]) for r in roots) == sorted(
        (r["kind"], r["id"]) for r in live
    )
    durations = {(r["kind"], r["id"]): r["duration_s"] for r in live if r["kind"] != "runtime"}
    assert {
        k: r["attrs"]["torch.compile.duration_s"]
        for r in roots
        if (k := (r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"])) in durations
    } == durations
    names: dict[str, dict[str, int]] = {}
    by_trace = {r["traceId"]: f"{r['attrs']['torch.compile.kind']} {r['attrs']['torch.compile.id']}" for r in roots}
    for s in run.spans:
        if s["traceId"] in by_trace:
            names.setdefault(by_trace[s["traceId"]], {}).setdefault(s["name"], 0)
            names[by_trace[s["traceId"]]][s["name"]] += 1
    assert names == run.live["span_names"]
    assert set(run.phases) == set(run.live["phase_sums"])
    for label, seconds in run.live["phase_sums"].items():
        assert run.phases[label] == pytest.approx(seconds, abs=1e-6), label
    assert all(r["attrs"]["torch.cuda.device.name"] == "NVIDIA H200" for r in live if r["kind"] != "runtime")
    assert not [r for r in roots if "torch.cuda.device.name" in r["attrs"]]


def test_cudagraph_recordings_and_runtime_roots_agree_with_torchs_own_count(replayed: dict[str, Replayed]):
    """A dynamic graph records a cudagraph for each new input size: four recordings in all (batch 8, the dynamic
    graph at 16 and again at 8, the CPU-tensor graph's cuda partition), as torch's cudagraph trees hold them. Each
    is a ``CUDAGraphNode.record`` span under its graph's ``torch.compile.runtime`` roots, whose time per graph is
    the ``duration_us`` of torch's runtime records."""
    run = replayed["cudagraphs_full"]
    trees = run.torch["cudagraph_trees"]
    assert trees["recorded_graphs"] == 4 and trees["unexpected_rerecords"] == 0
    records = [s for s in run.spans if s["name"] == "CUDAGraphNode.record"]
    assert len(records) == trees["recorded_graphs"] == len(run.torch["compilation_time_metrics"]["CUDAGraphNode.record"])
    runtime = _roots(run.spans, "runtime")
    by_trace = {r["traceId"]: r["attrs"]["torch.compile.id"] for r in runtime}
    assert sorted(by_trace[s["traceId"]] for s in records) == ["0/0", "0/1", "0/1", "2/0"]
    for name, r in replayed.items():
        want: dict[str, int] = {}
        for rec in r.torch["records"]:
            if rec.get("is_runtime"):
                want[rec["compile_id"]] = want.get(rec["compile_id"], 0) + rec["duration_us"]
        got: dict[str, int] = {}
        for root in _roots(r.spans, "runtime"):
            cid = root["attrs"]["torch.compile.id"]
            got[cid] = got.get(cid, 0) + int(root["endTimeUnixNano"]) - int(root["startTimeUnixNano"])
        assert set(got) == set(want), name
        for cid, us in want.items():
            assert got[cid] / 1000 == pytest.approx(us, abs=10 + 1e-3 * us), (name, cid)


def test_torchs_runtime_records_are_read_as_such_not_skipped(replayed: dict[str, Replayed]):
    """torch logs a compiled graph's runtime record (``compilation_metrics_runtime``) as its first calls end, after
    the runtime phases it sums. Replay read it as an artifact of no open compile and printed it as a skipped line
    (two on the transformer's log, nine on the cudagraphs one); it is the runtime record live capture gets."""
    for name, run in replayed.items():
        assert not run.stats.skipped, (name, run.stats.skipped)
        runtime = sum(1 for r in run.torch["records"] if r.get("is_runtime"))
        assert runtime == sum(n for k, n in run.stats.record_types.items() if k.endswith("_runtime")) > 0


def test_triton_kernel_builds_on_the_root_are_torchs_field(replayed: dict[str, Replayed]):
    """torch lists each compile's slowest Triton builds (``triton_kernel_compile_times_us``, timed in inductor's
    compile workers): the root counts and sums them, live and on replay."""
    for name, run in replayed.items():
        compiles = {
            (r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]): r["attrs"]
            for r in _roots(run.spans, "frame", "backward")
        }
        live = {(r["kind"], r["id"]): r["attrs"] for r in run.live["roots"]}
        checked = 0
        for rec in run.torch["records"]:
            if rec.get("is_runtime") or not rec.get("triton_kernel_compile_times_us"):
                continue
            listed = json.loads(rec["triton_kernel_compile_times_us"])
            key = ("frame" if rec.get("is_forward") is not False else "backward", rec["compile_id"])
            for attrs in (compiles[key], live[key]):
                assert int(attrs["torch.compile.triton.kernels_listed"]) == len(listed)  # OTLP JSON writes ints as strings
                assert attrs["torch.compile.triton.kernel_build_s"] == pytest.approx(sum(t for _, t in listed) / 1e6, abs=1e-6)
            checked += 1
        assert checked >= 2, name


def test_compile_ids_equal_tlparses_on_the_gpu_logs(replayed: dict[str, Replayed], tmp_path: Path):
    for name, run in replayed.items():
        log = tmp_path / f"{name}.log"  # tlparse reads no gzip
        log.write_bytes(gzip.decompress((DATA / f"{name}.log.gz").read_bytes()))
        ours = span_compile_ids(_roots(run.spans, "frame", "backward"))
        assert (
            ours == tlparse_compile_ids(log, tmp_path / name) == {r["id"] for r in run.live["roots"] if r["kind"] == "frame"}
        ), name
