"""collector-config/'s files run by the collector that collector-config/build.sh builds, and by Jaeger v2.

- Every shipped config starts, runs and stops without a warning or an error from the collector (an unknown key is
  an error at start; a deprecated name or setting is a warning).
- The single-gateway layout (agent.yaml, gateway.yaml) carries a real job's traces into Jaeger and its metrics into
  Prometheus (remote write) and onto the gateway's /metrics, whole.
- A typo is found by the collector's ``validate``, the command the README gives.
- The README's "Without Docker" commands (local.yaml, jaeger.yaml) run as written, with every listen address moved
  to a free port on 127.0.0.1 (``--set``), and show a job's traces in Jaeger's API and its metrics on /metrics.

The fleet layout end to end (agents, load balancing, tail sampling): test_collector_pipeline.py.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

import pytest

from tests.collector_helpers import CONFIG_DIR, README, load
from tests.helpers import WORKLOADS, read_otlp_json_spans, run_cli
from tests.servers import BUILD, Jaeger, OtelCollector, Prometheus, collector, collector_binaries, free_port, http_get, wait_until

LOCAL_MARK = "<!-- local-stack: tests/test_collector_config_run.py runs these -->"

# What each config needs to start on one machine: its listen addresses beyond OTLP and the health check, and where
# its exporters connect: {otlp} and {write} are the ``sinks`` fixture's.
RUNS: dict[str, dict[str, Any]] = {
    "agent.yaml": {"env": {"GATEWAY_ENDPOINT": "{otlp}"}},
    "gateway.yaml": {
        "listen": ["exporters::prometheus::endpoint"],
        "sets": {
            "exporters::otlp_grpc/tempo::endpoint": "{otlp}",
            "exporters::prometheus_remote_write::http::endpoint": "{write}",
        },
    },
    # the headless service's name resolves to one address here; the resolver's port is the sink's
    "fleet/agent.yaml": {
        "env": {"GATEWAY_HOSTNAME": "localhost"},
        "sets": {f"exporters::load_balancing/{s}::resolver::dns::port": '"{port}"' for s in ("traces", "metrics")},
    },
    "fleet/gateway.yaml": {"env": {"TEMPO_ENDPOINT": "{otlp}", "PROMETHEUS_REMOTE_WRITE_URL": "{write}"}},
    "local.yaml": {"listen": ["exporters::prometheus::endpoint"], "sets": {"exporters::otlp_grpc/jaeger::endpoint": "{otlp}"}},
}
JAEGER_UI_NOTE = "ui assets not embedded"  # a source build has no UI: Jaeger says so, once, at start


def test_every_collector_config_is_run_here():
    configs = [p.relative_to(CONFIG_DIR).as_posix() for p in CONFIG_DIR.rglob("*.yaml") if "builder" not in p.parts]
    shipped = {name for name in configs if "receivers" in load(name)}
    assert shipped == set(RUNS) | {"jaeger.yaml"}


def test_the_suite_builds_nothing_the_readmes_command_built(started_with):
    """The README's test command runs collector-config/build.sh in the user's environment, then pytest, whose conftest
    moves XDG_CACHE_HOME for the bridge's own files: build.sh run the suite's way must find the same binaries and build
    nothing (it built them again, for 1,315 s, inside the first collector test on a loaded machine: issue 49)."""
    readme = subprocess.run(BUILD, env=started_with, capture_output=True, text=True, timeout=45 * 60, stdin=subprocess.DEVNULL)
    if readme.returncode != 0:  # no Go, no module proxy: as every collector test, it cannot run
        (pytest.fail if os.environ.get("CI") else pytest.skip)((readme.stderr.strip().splitlines() or ["failed"])[-1])
    suite = subprocess.Popen(
        BUILD, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        said = suite.stderr.readline() if suite.stderr else ""  # "collector-config/build.sh: building ..." or nothing
        if said:
            os.killpg(suite.pid, signal.SIGKILL)  # a build has begun: minutes the suite must not spend
        out, rest = suite.communicate(timeout=600)
    finally:
        if suite.poll() is None:
            os.killpg(suite.pid, signal.SIGKILL)
            suite.wait()
    assert not said, f"the suite's build.sh builds again: {said.strip()} {rest.strip()}"
    assert suite.returncode == 0 and out.split() == readme.stdout.split(), (out, readme.stdout)


@pytest.fixture(scope="module")
def sinks():  # type: ignore[no-untyped-def]
    """Somewhere real for every exporter to connect to while a config idles: Jaeger's OTLP receiver (for OTLP
    exporters: nothing is sent, so it takes every signal) and a Prometheus taking remote write."""
    with Jaeger() as jaeger, RemoteWritePrometheus([]) as prom:
        yield jaeger.otlp(), f"{prom.url}/api/v1/write"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_config_starts_runs_and_stops_without_a_complaint(name: str, sinks):
    otlp, write = sinks
    run = RUNS[name]

    def fill(values: dict[str, str]) -> dict[str, str]:
        return {k: v.format(otlp=otlp, write=write, port=otlp.rpartition(":")[2]) for k, v in values.items()}

    with collector(
        name, name.replace("/", "-"), sets=fill(run.get("sets", {})), env=fill(run.get("env", {})), listen=run.get("listen")
    ) as c:
        time.sleep(3)  # a resolver's first lookups, every exporter's connection, the first ticks of every processor
        assert "otelcol_process_uptime" in c.telemetry()
    assert "Shutdown complete" in c.output()
    assert not c.complaints(), "\n".join(c.complaints())


def test_jaeger_config_starts_and_answers_queries():
    with Jaeger() as jaeger:
        assert jaeger.services() == []
    complaints = [ln for ln in jaeger.complaints() if JAEGER_UI_NOTE not in ln]
    assert not complaints, "\n".join(complaints)


def test_a_typo_is_found_by_validate(tmp_path):
    exe = collector_binaries()[0]
    typo = tmp_path / "gateway.yaml"
    typo.write_text((CONFIG_DIR / "gateway.yaml").read_text().replace("send_batch_size:", "send_batch_sise:", 1))
    proc = subprocess.run([exe, "validate", f"--config={typo}"], capture_output=True, text=True, timeout=60)  # the collector
    assert proc.returncode != 0 and "send_batch_sise" in proc.stderr, proc.stderr
    # the command the README gives for it
    assert re.search(r'"\$OTELCOL" validate --config=collector-config/\S+\.yaml', README.read_text())


def _spans_by_trace(spans: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for s in spans:
        out[s["traceId"]].add(s["spanId"])
    return out


class RemoteWritePrometheus(Prometheus):
    def flags(self) -> list[str]:
        return [*super().flags(), "--web.enable-remote-write-receiver"]


def test_the_single_gateway_layout_carries_a_job_whole(tmp_path):
    """A job -> agent.yaml -> gateway.yaml -> Jaeger (every trace: no sampling here) and Prometheus (remote write), and
    the gateway's own /metrics."""
    with Jaeger() as jaeger, RemoteWritePrometheus([]) as prom:
        gateway_sets = {
            "exporters::otlp_grpc/tempo::endpoint": jaeger.otlp(),
            "exporters::prometheus_remote_write::http::endpoint": f"{prom.url}/api/v1/write",
        }
        with collector("gateway.yaml", "gateway", sets=gateway_sets, listen=["exporters::prometheus::endpoint"]) as gw:
            with collector("agent.yaml", "agent", env={"GATEWAY_ENDPOINT": gw.address("grpc::endpoint")}) as agent:
                env = {
                    "OTEL_SERVICE_NAME": "single",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{agent.address('grpc::endpoint')}",
                    "OTEL_METRICS_EXPORTER": "otlp",
                    "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                    "OTEL_BSP_SCHEDULE_DELAY": "200",
                    "TORCH_OTEL_TRACES_FILE": str(tmp_path / "spans.jsonl"),
                }
                since = time.time_ns()
                proc = run_cli("run", "--", sys.executable, str(WORKLOADS / "mixed.py"), env=env, script=True)
                assert proc.returncode == 0, proc.stderr[-3000:]
                sent = _spans_by_trace(read_otlp_json_spans(tmp_path / "spans.jsonl"))
                assert len(sent) >= 10
                wait_until(lambda: _spans_by_trace(jaeger.spans("single", since)) == sent, 60, "every trace whole in Jaeger")
                prom.wait_for('torch_compile_recompile_limit_hits_total{job="single"} == 1', 60)
                exposition = http_get(f"http://{gw.address('exporters::prometheus::endpoint')}/metrics")
                assert re.search(r'^torch_compile_compiles_total\{.*job="single".*\} \d', exposition, re.M), exposition[:2000]
        for c in (gw, agent):
            assert not c.complaints(), f"{c.name}:\n" + "\n".join(c.complaints())


# --- the README's commands for a machine without Docker ------------------------------------------------------------


def readme_local_commands() -> list[str]:
    m = re.search(re.escape(LOCAL_MARK) + r"\n```sh\n(.*?)\n```", README.read_text(), re.S)
    assert m, f"{README.name}: no command block after {LOCAL_MARK}"
    return [ln for ln in m.group(1).replace("\\\n", " ").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_readme_commands_without_docker():
    """Each line as written, but that every address the README's servers listen on is a free port here: the servers get
    ``--set`` flags to move them, and the job and the curl commands are pointed at the moved ones."""
    otelcol, jaeger_exe = collector_binaries()
    lines = readme_local_commands()
    assert lines[0] == "read -r OTELCOL JAEGER < <(bash collector-config/build.sh | paste -sd ' ')", lines[0]
    jaeger_line, collector_line, job_line, *checks = lines[1:]
    assert jaeger_line == '"$JAEGER" --config=collector-config/jaeger.yaml &', jaeger_line
    assert collector_line == '"$OTELCOL" --config=collector-config/local.yaml &', collector_line
    assert checks and all(c.startswith("curl ") for c in checks), checks
    # The addresses the shipped files listen on (the README's commands rely on them), moved.
    jaeger_cfg, local_cfg = load("jaeger.yaml"), load("local.yaml")
    jaeger_keys = {
        "receivers::otlp::protocols::grpc::endpoint": jaeger_cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        "receivers::otlp::protocols::http::endpoint": jaeger_cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        "extensions::jaeger_query::http::endpoint": jaeger_cfg["extensions"]["jaeger_query"]["http"]["endpoint"],
        "extensions::jaeger_query::grpc::endpoint": jaeger_cfg["extensions"]["jaeger_query"]["grpc"]["endpoint"],
        "extensions::healthcheckv2::http::endpoint": jaeger_cfg["extensions"]["healthcheckv2"]["http"]["endpoint"],
    }
    local_keys = {
        "receivers::otlp::protocols::grpc::endpoint": local_cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        "receivers::otlp::protocols::http::endpoint": local_cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        "extensions::health_check::endpoint": local_cfg["extensions"]["health_check"]["endpoint"],
        "exporters::prometheus::endpoint": local_cfg["exporters"]["prometheus"]["endpoint"],
    }
    assert local_cfg["exporters"]["otlp_grpc/jaeger"]["endpoint"] == jaeger_keys["receivers::otlp::protocols::grpc::endpoint"]
    new = {old: f"127.0.0.1:{free_port()}" for old in [*jaeger_keys.values(), *local_keys.values()]}
    jaeger = Jaeger(addresses={k: new[v] for k, v in jaeger_keys.items()})
    local = OtelCollector(
        otelcol,
        CONFIG_DIR / "local.yaml",
        "local",
        {k: new[v] for k, v in local_keys.items()},
        "extensions::health_check::endpoint",
        sets={"exporters::otlp_grpc/jaeger::endpoint": new[jaeger_keys["receivers::otlp::protocols::grpc::endpoint"]]},
    )
    with jaeger, local:
        words = shlex.split(job_line)
        env = {}
        while re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        assert words == ["torch-otel", "run", "--", "python", "train.py"], words
        # the job's default endpoint is the collector's shipped address, moved here; quicker exports for a test
        default = "127.0.0.1:4317"
        assert local_keys["receivers::otlp::protocols::grpc::endpoint"] == default
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{new[default]}",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        proc = run_cli("run", "--", sys.executable, str(WORKLOADS / "mixed.py"), env=env, script=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for check in checks:
            for old, moved in new.items():
                check = check.replace(old, moved)

            def answer(check: str = check) -> str:
                # the README's own check, as the user runs it in a shell
                return subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=30).stdout

            want = '"torch.compile"' if "/api/v3/traces" in check else "torch_compile_compiles_total"
            wait_until(lambda a=answer, w=want: w in a(), 60, f"{want} from {check}")
    assert not local.complaints(), "\n".join(local.complaints())
