"""Compile metrics as users consume them: a real Prometheus scraping real workloads, torchrun ranks,
the Pushgateway for short jobs, and OTLP metrics to a real collector (rotel)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import pytest
import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import torch_otel
from tests.helpers import WORKLOADS, bridge_lines, read_otlp_json_spans, run_python, start_python
from tests.servers import Prometheus, Pushgateway, Rotel, free_port, http_get, otlp_env, require, wait_until
from torch_otel._core.categories import RECOMPILE_CATEGORIES
from torch_otel._sinks.metrics import DURATION_BUCKETS, SERIES

MIXED = str(WORKLOADS / "mixed.py")
HOLD = str(WORKLOADS / "hold.py")


def _wait_for_output(log, needle: str, count: int = 1, proc=None, timeout: float = 240) -> None:  # type: ignore[no-untyped-def]
    def ready() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the workload exited early ({proc.returncode}):\n{log.read_text()[-3000:]}")
        return log.read_text(errors="replace").count(needle) >= count

    wait_until(ready, timeout, f"{needle!r} in {log}")


def _values(result: list[dict]) -> dict[str, float]:  # type: ignore[type-arg]
    """``{label=value,...}`` of each sample of a query result -> its value."""
    return {",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k != "__name__"): float(r["value"][1]) for r in result}


# Each series of the contract, as the PromQL a dashboard would run, for a workload with a graph break,
# recompiles of three kinds, a failure, a recompile-limit hit, compiled autograd and an inductor compile.
EXPECTED = [
    'torch_compile_frame_duration_seconds_count{rank="0",kind="frame",status="ok"}',
    'torch_compile_frame_duration_seconds_count{rank="0",kind="frame",status="failed"}',
    'torch_compile_frame_duration_seconds_count{rank="0",kind="compiled_autograd"}',
    'torch_compile_frame_duration_seconds_bucket{rank="0",le="1800.0"}',
    'torch_compile_phase_duration_seconds_count{rank="0",phase="dynamo_tracing"}',
    'torch_compile_phase_duration_seconds_count{rank="0",phase="aot_dispatcher"}',
    'torch_compile_phase_duration_seconds_count{rank="0",phase="guard_building"}',
    'torch_compile_phase_duration_seconds_count{rank="0",phase="backend_compile"}',
    'torch_compile_compiles_total{rank="0",kind="frame",status="ok"}',
    'torch_compile_recompiles_total{rank="0",reason="size_mismatch"}',
    'torch_compile_recompiles_total{rank="0",reason="dtype"}',
    'torch_compile_recompiles_total{rank="0",reason="requires_grad"}',
    'torch_compile_graph_breaks_total{rank="0",reason="GB0025"}',
    'torch_compile_failures_total{rank="0",fail_type="TorchRuntimeError"}',
    'torch_compile_recompile_limit_hits_total{rank="0"} == 1',
    'torch_compile_eager_fallbacks_total{rank="0",kind="frame"}',
    'torch_compile_cache_requests_total{rank="0",location="local",result=~"hit|miss"}',
    'torch_compile_guards_count{rank="0"}',
    'torch_compile_in_progress{rank="0",kind="frame"} == 0',
    'torch_compile_build_info{rank="0",torch_version="' + torch.__version__ + '"}',
]


def test_real_prometheus_scrapes_every_series_with_exemplars(tmp_path):
    port = free_port()
    release, log, traces = tmp_path / "release", tmp_path / "workload.log", tmp_path / "spans.jsonl"
    env = {
        "WITH_BRIDGE": "1",
        "COMPILED_AUTOGRAD": "1",
        "INDUCTOR": "1",
        "OTEL_TRACES_EXPORTER": "none",
        "TORCH_OTEL_TRACES_FILE": str(traces),
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        "RELEASE_FILE": str(release),
    }
    with Prometheus([f"127.0.0.1:{port}"]) as prom:
        proc = start_python([HOLD, MIXED], env, log)
        try:
            _wait_for_output(log, "HOLDING", proc=proc)
            t0 = time.time()
            for promql in EXPECTED:
                assert prom.wait_for(promql), promql
            # every series of the contract carries rank, and no label value is a path or a message
            for name in SERIES:
                for r in prom.query(f'{{__name__=~"{name}(_total|_count)?"}}'):
                    assert r["metric"]["rank"] == "0"
                    labels = dict(r["metric"])
                    # a graph's frame is tlparse's frame id (`!0/5`: frame 5 under compiled autograd 0), never a path
                    frame = labels.pop("frame", None)
                    assert frame is None or re.fullmatch(r"(!\d+/)?\d+|other", frame), r["metric"]
                    assert all("/" not in v and len(v) <= 64 for v in labels.values()), r["metric"]
            exemplars = wait_until(
                lambda: prom.api(
                    "query_exemplars",
                    query="torch_compile_frame_duration_seconds_bucket",
                    start=str(t0 - 600),
                    end=str(time.time()),
                ),
                30,
                "exemplars",
            )
            text = http_get(f"http://127.0.0.1:{port}/metrics")
        finally:
            release.touch()
            proc.wait(60)
    assert proc.returncode == 0, log.read_text()[-3000:]
    exemplar_ids = {e["labels"]["trace_id"] for series in exemplars for e in series["exemplars"]}
    roots = {s["traceId"] for s in read_otlp_json_spans(traces) if "torch.compile.kind" in s["attrs"]}
    assert exemplar_ids and exemplar_ids <= roots  # each exemplar opens a real compile trace

    (tmp_path / "exposition.txt").write_text(text)
    check = subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_torchrun_ranks_each_serve_their_own_port(tmp_path):
    base = free_port(consecutive=2)
    release, log = tmp_path / "release", tmp_path / "torchrun.log"
    env = {
        "WITH_BRIDGE": "1",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(base),
        "RELEASE_FILE": str(release),
        "OMP_NUM_THREADS": "1",
    }
    with Prometheus([f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]) as prom:
        proc = start_python(
            ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", HOLD, str(WORKLOADS / "ranks.py")], env, log
        )
        try:
            _wait_for_output(log, "HOLDING", count=2, proc=proc)
            # the series exist (at 0) from each rank's first compile: wait for the final values
            prom.wait_for('sum by (rank) (torch_compile_recompiles_total{rank="1"}) == 1')
            prom.wait_for('count(sum by (rank) (torch_compile_compiles_total{status="ok"}) > 0) == 2')
            compiles = prom.query("sum by (rank, instance) (torch_compile_compiles_total)")
            recompiles = _values(prom.query("sum by (rank) (torch_compile_recompiles_total)"))
        finally:
            release.touch()
            proc.wait(120)
    assert proc.returncode == 0, log.read_text()[-3000:]
    by_rank = {r["metric"]["rank"]: r["metric"]["instance"] for r in compiles}
    assert by_rank == {"0": f"127.0.0.1:{base}", "1": f"127.0.0.1:{base + 1}"}  # LOCAL_RANK offsets the port
    assert recompiles == {"rank=0": 0.0, "rank=1": 1.0}  # every rank's counters exist from its first compile


def test_short_job_pushes_to_the_pushgateway_at_exit():
    with Pushgateway() as gw:
        env = {
            "WITH_BRIDGE": "1",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "TORCH_OTEL_PUSHGATEWAY_URL": gw.url,
            "TORCH_OTEL_PUSHGATEWAY_JOB": "nightly",
            "RANK": "3",
        }
        r = run_python(MIXED, env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert not bridge_lines(r.stderr), r.stderr[-3000:]  # mixed.py's frame near the recompile limit aside
        families = {f.name: f for f in text_string_to_metric_families(gw.metrics())}
    samples = {
        (s.labels.get("kind"), s.labels.get("status")): s.value
        for s in families["torch_compile_compiles"].samples
        if s.name == "torch_compile_compiles_total" and s.labels.get("job") == "nightly" and s.labels.get("rank") == "3"
    }
    assert samples[("frame", "ok")] >= 5 and samples[("frame", "failed")] == 2
    limit = [
        s
        for s in families["torch_compile_recompile_limit_hits"].samples
        if s.name.endswith("_total") and s.labels["job"] == "nightly"
    ]
    assert [(s.labels["job"], s.labels["rank"], s.value) for s in limit] == [("nightly", "3", 1.0)]


def test_unreachable_pushgateway_is_one_warning_and_the_job_succeeds():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, never listening: connections are refused
        r = run_python(
            MIXED,
            {
                "WITH_BRIDGE": "1",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "TORCH_OTEL_PUSHGATEWAY_URL": f"127.0.0.1:{dead}",
            },
        )
    assert r.returncode == 0 and "done" in r.stdout
    ours = [line for line in bridge_lines(r.stderr) if line.startswith("torch-otel")]  # less the near-limit line
    assert len(ours) == 1 and f"127.0.0.1:{dead}" in ours[0] and "TORCH_OTEL_PUSHGATEWAY_URL" in ours[0], ours


def test_port_in_use_is_one_warning_and_spans_still_flow(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        traces = tmp_path / "spans.jsonl"
        r = run_python(
            MIXED,
            {
                "WITH_BRIDGE": "1",
                "OTEL_TRACES_EXPORTER": "none",
                "TORCH_OTEL_TRACES_FILE": str(traces),
                "OTEL_METRICS_EXPORTER": "prometheus",
                "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
            },
        )
    assert r.returncode == 0
    ours = [line for line in bridge_lines(r.stderr) if line.startswith("torch-otel")]  # less the near-limit line
    assert len(ours) == 1 and str(port) in ours[0] and "OTEL_EXPORTER_PROMETHEUS_PORT" in ours[0], ours
    assert any("torch.compile.kind" in sp["attrs"] for sp in read_otlp_json_spans(traces))


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_metrics_reach_a_real_collector_alongside_prometheus(tmp_path, protocol):
    prom_port = free_port()
    release, log = tmp_path / "release", tmp_path / "workload.log"
    with Rotel() as rotel:
        env = {
            "WITH_BRIDGE": "1",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp,prometheus",
            **otlp_env(rotel.endpoint(protocol), protocol),
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(prom_port),
            "OTEL_SERVICE_NAME": "trainer",
            "RELEASE_FILE": str(release),
        }
        proc = start_python([HOLD, MIXED], env, log)
        try:
            _wait_for_output(log, "HOLDING", proc=proc)
            scraped = {
                s.labels["status"]: s.value
                for f in text_string_to_metric_families(http_get(f"http://127.0.0.1:{prom_port}/metrics"))
                for s in f.samples
                if s.name == "torch_compile_compiles_total" and s.labels["kind"] == "frame"
            }
        finally:
            release.touch()
            proc.wait(60)
        assert proc.returncode == 0, log.read_text()[-3000:]
        got = wait_until(lambda: (g := rotel.received())["points"] and g, 30, "metrics at rotel")
    points = [p for p in got["points"] if p["attrs"].get("rank") == "0"]
    names = {p["metric"] for p in points}
    assert names >= {
        "torch_compile_frame_duration_seconds",
        "torch_compile_phase_duration_seconds",
        "torch_compile_compiles",
        "torch_compile_recompiles",
        "torch_compile_graph_breaks",
        "torch_compile_failures",
        "torch_compile_recompile_limit_hits",
        "torch_compile_guards",
        "torch_compile_in_progress",
        "torch_compile_build_info",
    }
    # the same numbers as the Prometheus endpoint served, on the job's resource
    final = {}
    for p in points:
        if p["metric"] == "torch_compile_compiles" and p["attrs"]["kind"] == "frame":
            final[p["attrs"]["status"]] = p["value"]  # cumulative: the last export wins
    assert final == scraped
    assert all(p["resource"].get("service.name") == "trainer" for p in points)
    roots = {s["trace_id"] for s in got["spans"] if "torch.compile.kind" in s["attrs"]}
    exemplars = {t for p in points if p["metric"] == "torch_compile_frame_duration_seconds" for t in p["exemplars"]}
    assert exemplars and exemplars <= roots


def test_otel_instruments_carry_the_prometheus_series():
    """In-process: the meter provider the application passes gets the same series, buckets and exemplars."""
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    registry = CollectorRegistry()
    torch_otel.instrument(tp, mp, registry=registry)
    torch._dynamo.config.automatic_dynamic_shapes = False
    f = torch.compile(lambda x: x * 3, backend="eager")
    f(torch.randn(2))
    f(torch.randn(5))
    torch_otel.uninstrument()
    metrics = {m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    compiles = {tuple(sorted(dp.attributes.items())): dp.value for dp in metrics["torch_compile_compiles"].data.data_points}
    assert compiles == {
        (("kind", "frame"), ("rank", "0"), ("status", "ok")): 2,
        (("kind", "frame"), ("rank", "0"), ("status", "failed")): 0,
    }
    assert registry.get_sample_value("torch_compile_compiles_total", {"rank": "0", "kind": "frame", "status": "ok"}) == 2
    (hist,) = metrics["torch_compile_frame_duration_seconds"].data.data_points
    assert tuple(hist.explicit_bounds) == DURATION_BUCKETS and hist.count == 2
    roots = {(s.context.trace_id, s.context.span_id) for s in spans.get_finished_spans() if s.name == "torch.compile"}
    assert hist.exemplars and {(e.trace_id, e.span_id) for e in hist.exemplars} <= roots
    recompiles = metrics["torch_compile_recompiles"].data.data_points
    assert [(dict(dp.attributes), dp.value) for dp in recompiles if dp.value] == [({"rank": "0", "reason": "size_mismatch"}, 1)]
    assert len(recompiles) == len(RECOMPILE_CATEGORIES)  # all at 0 from the first compile, so rate() sees the first one
    mp.shutdown()
    tp.shutdown()


def test_metrics_endpoint_binds_loopback_by_default():
    from torch_otel._otel.exposition import start_prometheus_server

    started = start_prometheus_server({"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}, CollectorRegistry())
    assert not isinstance(started, str), started
    server, port = started
    try:
        assert server.server_address[0] == "127.0.0.1"
        assert sys.platform != "linux" or port > 0
    finally:
        server.shutdown()
        server.server_close()
