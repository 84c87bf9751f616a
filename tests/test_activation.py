"""Zero-code activation and OTLP configuration, against a real OTLP receiver (rotel) on loopback.

Covers the three ways to turn the bridge on without editing the training code,
OTLP over gRPC and HTTP, headers, resource attributes, torchrun ranks, SIGTERM,
a dead endpoint, forked children, log records, and every invalid setting.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import WORKLOADS, bridge_lines, frame_roots, run, run_cli, run_python, torchrun_under_torch_otel, without_paths
from tests.servers import Rotel, Tap, free_port, otlp_env, wait_until

# Marked ``release`` (run on every torch release in the matrix, noxfile.py): the tests whose outcome depends on torch's
# release: each way of turning the bridge on (over one protocol: OTLP's two are the SDK's, not torch's), torchrun's
# ranks, forked children and torch's warnings. Settings, headers and dead collectors are the bridge's alone: the full
# suite's release checks them.

BIN = Path(sys.executable).parent
MIXED = str(WORKLOADS / "mixed.py")
TINY = "import torch; f = torch.compile(lambda x: x.sin() + 1, backend='eager'); f(torch.randn(3)); print('done')"


def _torch_version() -> str:
    """The installed torch's own version string, build tag included (``2.15.0+cu132``), as the bridge reports it."""
    import torch

    return str(torch.__version__)


def _command(way: str, script: str) -> tuple[list[str], dict[str, str]]:
    """The argv and extra env that run ``script`` with the bridge turned on ``way``."""
    if way == "import":
        return [sys.executable, script], {"WITH_BRIDGE": "1"}
    if way == "opentelemetry-instrument":
        return [str(BIN / "opentelemetry-instrument"), sys.executable, script], {}
    return [str(BIN / "torch-otel"), "run", "--", sys.executable, script], {}


def _run(argv: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run(argv, env=env, timeout=timeout)


def _otlp_env(rotel: Rotel, protocol: str) -> dict[str, str]:
    return {
        **otlp_env(rotel.endpoint(protocol), protocol),
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_SERVICE_NAME": "trainer",
        "OTEL_RESOURCE_ATTRIBUTES": "team=ml,deployment.environment=ci",
    }


@pytest.mark.parametrize("protocol", [pytest.param("grpc", marks=pytest.mark.release), "http/protobuf"])
@pytest.mark.parametrize("way", ["import", "opentelemetry-instrument", "torch-otel run"])
def test_each_zero_code_way_exports_traces_and_metrics(way, protocol):
    with Rotel() as rotel:
        argv, env = _command(way, MIXED)
        r = _run(argv, {**env, **_otlp_env(rotel, protocol)})
        assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
        assert not bridge_lines(r.stderr), r.stderr[-3000:]  # nothing to complain about
        got = wait_until(lambda: (g := rotel.received())["points"] and frame_roots(g).get("3/2") and g, 30, "spans and metrics")
    roots = frame_roots(got)
    assert {"0/0", "0/1", "0/2", "2/0", "3/0", "3/1", "3/2"} <= set(roots)
    assert roots["3/2"]["status_code"] == "STATUS_CODE_ERROR"  # the recompile limit
    assert roots["2/0"]["attrs"]["error.type"] == "TorchRuntimeError"
    resource = roots["0/0"]["resource"]
    assert resource["service.name"] == "trainer" and resource["team"] == "ml"
    assert resource["torch.version"] == _torch_version() and resource["host.name"] and resource["process.pid"]
    assert resource["telemetry.distro.name"] == "torch-otel"
    assert {p["metric"] for p in got["points"]} >= {"torch_compile_frame_duration_seconds", "torch_compile_recompiles"}


@pytest.mark.release
def test_opentelemetry_instrument_respects_disabled_instrumentations(tmp_path):
    traces = tmp_path / "spans.jsonl"
    argv, _ = _command("opentelemetry-instrument", MIXED)
    r = _run(
        argv,
        {
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "torch",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "TORCH_OTEL_TRACES_FILE": str(traces),
        },
    )
    assert r.returncode == 0 and "done" in r.stdout
    assert not traces.exists()


def test_headers_reach_the_receiver_and_never_appear_in_output():
    secret = "s3cr3t-token-4242"
    with Rotel() as rotel:
        tap = Tap(rotel.http_port)
        try:
            r = run_python(
                MIXED,
                {
                    "WITH_BRIDGE": "1",
                    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{tap.port}",
                    "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{secret},x-team=ml",
                    "OTEL_METRICS_EXPORTER": "otlp",
                },
            )
            assert r.returncode == 0, r.stderr[-3000:]
            wait_until(lambda: frame_roots(rotel.received()), 30, "spans")
            wire = tap.text().lower()
        finally:
            tap.close()
    for path in ("post /v1/traces", "post /v1/metrics"):
        assert path in wire
    assert f"authorization: bearer {secret}" in wire and "x-team: ml" in wire
    assert secret not in r.stdout + r.stderr


@pytest.mark.release
def test_torchrun_two_ranks_under_torch_otel_run():
    with Rotel() as rotel:
        r = _run(
            torchrun_under_torch_otel(2, WORKLOADS / "ranks.py"),
            {**_otlp_env(rotel, "grpc"), "OMP_NUM_THREADS": "1"},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        got = wait_until(lambda: (g := rotel.received())["points"] and len(_ranks(g)) == 2 and g, 30, "both ranks")
    by_rank = _ranks(got)
    assert set(by_rank) == {"0", "1"}
    for rank, spans in by_rank.items():
        res = spans[0]["resource"]
        assert res["torch.distributed.world_size"] == "2" and res["torch.distributed.local_rank"] == rank
        assert res.get("torch.elastic.run_id")
    assert len({s["resource"]["process.pid"] for s in by_rank["0"] + by_rank["1"]}) == 2
    # rank 1 recompiled on a new dtype; rank 0 did not
    assert {s["attrs"]["torch.compile.id"] for s in by_rank["1"]} == {"0/0", "0/1"}
    assert {s["attrs"]["torch.compile.id"] for s in by_rank["0"]} == {"0/0"}
    assert {p["attrs"]["rank"] for p in got["points"] if p["metric"] == "torch_compile_compiles"} == {"0", "1"}


def _ranks(received: dict) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    out: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for s in received["spans"]:
        if s["attrs"].get("torch.compile.kind") == "frame":
            out.setdefault(s["resource"].get("torch.distributed.rank", "?"), []).append(s)
    return out


def test_dead_endpoint_costs_the_job_nothing_but_one_line():
    closed = free_port()  # nothing listens here
    base = _timed({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
    dead = _timed(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed}",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
        }
    )
    assert dead[1].returncode == 0 and "done" in dead[1].stdout
    ours = [ln for ln in bridge_lines(dead[1].stderr) if ln.startswith("torch-otel")]
    assert len(ours) == 1 and f"127.0.0.1:{closed}" in ours[0], ours
    # the exporters' retry chatter is folded into that line (looked for outside the paths torch's own lines print)
    assert "opentelemetry" not in without_paths(dead[1].stderr).lower(), dead[1].stderr[-3000:]
    # the bridge adds no traceback: torch logs its own for the workload's failing compile, as in the run without it
    assert dead[1].stderr.count("Traceback") == base[1].stderr.count("Traceback"), dead[1].stderr[-3000:]
    # Bounded, not benchmarked: the exporters get at most TORCH_OTEL_SHUTDOWN_TIMEOUT (5 s) at exit; without that
    # bound, exit waited for their retries (~18 s here). The margin above 5 s is for a loaded machine.
    assert dead[0] < base[0] + 9, (dead[0], base[0])


def _timed(env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = run_python(MIXED, {"WITH_BRIDGE": "1", **env})
    return time.monotonic() - t0, r


@pytest.mark.release
def test_forked_children_export_their_own_compiles_once():
    with Rotel() as rotel:
        r = run_python(str(WORKLOADS / "forks.py"), {"WITH_BRIDGE": "1", **_otlp_env(rotel, "grpc")}, timeout=300)
        assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
        got = wait_until(lambda: (g := rotel.received()) and len(_frame_roots(g)) >= 3 and g, 30, "parent and two children")
    roots = _frame_roots(got)
    parent_pid = roots[0]["resource"]["process.pid"]  # the resource is the parent's, inherited by fork
    by_process = sorted((s["attrs"].get("process.pid", parent_pid), s["attrs"]["torch.compile.id"]) for s in roots)
    children = [pid for pid, cid in by_process if pid != parent_pid]
    assert len(by_process) == 3 and len(set(children)) == 2, by_process  # each process once, nothing duplicated
    assert sorted(cid for _, cid in by_process) == ["0/0", "1/0", "1/0"]
    assert all(s["attrs"]["process.parent_pid"] == parent_pid for s in roots if "process.pid" in s["attrs"])


def _frame_roots(received: dict) -> list[dict]:  # type: ignore[type-arg]
    return [s for s in received["spans"] if s["attrs"].get("torch.compile.kind") == "frame"]


@pytest.mark.release
def test_compile_warnings_become_log_records_in_the_compile_trace():
    with Rotel() as rotel:
        r = run_python(MIXED, {"WITH_BRIDGE": "1", **_otlp_env(rotel, "grpc"), "OTEL_LOGS_EXPORTER": "otlp"})
        assert r.returncode == 0, r.stderr[-3000:]
        got = wait_until(lambda: (g := rotel.received())["logs"] and frame_roots(g).get("3/2") and g, 30, "log records")
    roots = {(s["trace_id"], s["id"]): cid for cid, s in frame_roots(got).items()}
    by_compile = {}
    for rec in got["logs"]:
        by_compile.setdefault(roots.get((rec.get("trace_id"), rec.get("span_id"))), []).append(rec)
    limit = by_compile["3/2"]
    assert any("recompile_limit" in rec["body"] and rec["severitytext"] == "WARNING" for rec in limit)
    breaks = by_compile["0/0"]
    assert any(rec["attrs"].get("torch.compile.graph_break.code") == "GB0025" for rec in breaks)
    assert None not in by_compile  # every record sits in its compile's trace


# Each bad setting, with the words its one line must hold. The OTLP settings of a signal are checked one after another
# and the first bad one is that signal's only line (torch_otel/_otel/providers.py, otlp_problem), so each bad OTLP
# setting has a process of its own; a setting read apart from them (the bridge's own, Prometheus's port, which
# exporters to use) is reported whatever else is wrong, so it shares a process with one of them (fewer starts of torch).
INVALID = {
    "endpoint-not-a-url": [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url", "is not a URL"),
        ("TORCH_OTEL_SHUTDOWN_TIMEOUT", "forever", "TORCH_OTEL_SHUTDOWN_TIMEOUT"),
    ],
    "endpoint-a-bare-word": [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "notaurl", "is not a URL"),  # a bare word, not a host name
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "99999", "is not a port"),
    ],
    "protocol": [("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon", "use grpc or http/protobuf")],
    "headers": [("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign-secret", "key=value pairs")],
    "certificate": [("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "not a readable file")],
    "traces-timeout": [("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon", "not a positive number")],
    "compression": [("OTEL_EXPORTER_OTLP_COMPRESSION", "zip", "use gzip, deflate or none")],
    "exporters": [
        ("OTEL_TRACES_EXPORTER", "zipkin2", "use one of otlp, console, none"),
        ("OTEL_METRICS_EXPORTER", "statsd", "use one of prometheus, otlp, console, none"),
    ],
}


@pytest.mark.parametrize("case", list(INVALID))
def test_each_invalid_setting_is_one_line_and_training_goes_on(case):
    bad = INVALID[case]
    with Rotel() as rotel:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_METRICS_EXPORTER": "otlp,prometheus"}
        env["OTEL_EXPORTER_PROMETHEUS_PORT"] = "0"
        env.update({variable: value for variable, value, _ in bad})
        r = _run([sys.executable, "-c", "import torch_otel.auto\n" + TINY], env, timeout=120)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]
    ours = [ln for ln in bridge_lines(r.stderr) if ln.startswith("torch-otel")]
    said = []
    for variable, value, needle in bad:
        its = [ln for ln in ours if variable in ln and needle in ln]
        assert len(its) == 1, (variable, ours)  # its one line
        said += its
        if "HEADERS" in variable:
            assert value not in r.stderr  # a header may hold a secret: never echoed
    assert sorted(said) == sorted(ours), (bad, ours)  # one line for each bad setting, and no other line
    assert "Traceback" not in r.stderr


def test_torch_otel_run_without_a_command_is_one_line():
    r = run_cli("run", script=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "torch-otel run -- python train.py" in r.stderr
    r = run_cli("run", "--", "no-such-program-xyz", script=True)
    assert r.returncode == 127 and "no-such-program-xyz" in r.stderr


def test_torch_otel_run_chains_an_existing_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    r = _run(
        [
            str(BIN / "torch-otel"),
            "run",
            "--",
            sys.executable,
            "-c",
            # the bridge arms as torch's compiler is imported
            "import os, torch._dynamo, torch_otel; print(os.environ.get('USER_SITECUSTOMIZE_RAN'), torch_otel.is_instrumented())",
        ],
        {"PYTHONPATH": str(tmp_path), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    )
    assert r.stdout.split() == ["1", "True"], r.stderr[-2000:]


def test_a_dead_collector_costs_one_line_per_rank_that_lost_data_and_none_from_the_launcher():
    """torchrun's launcher compiles nothing: it never arms, so it has nothing to lose and says nothing.

    Each rank loses its spans and metrics (the collector is down from start to exit): one line each,
    not one per signal, nor one more at exit.
    """
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    r = _run(
        torchrun_under_torch_otel(2, WORKLOADS / "ranks.py"),
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": dead,
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OMP_NUM_THREADS": "1",
        },
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ours = [ln for ln in bridge_lines(r.stderr) if ln.startswith("torch-otel")]
    assert len(ours) == 2, ours
    assert all(dead.split("//")[1] in ln and "dropped" in ln for ln in ours), ours
