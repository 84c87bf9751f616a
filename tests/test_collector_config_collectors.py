"""Structural checks of collector-config/'s files, and of its collectors: the agent and the gateway.

These files are checked by construction: every file parses, and no image is unpinned; the collector
pipelines only name components the file defines, and use each one (the collector rejects an undefined
one, and silently ignores an unused one); the ports agree with the README. The collector
collector-config/build.sh builds validates every config, the fleet's too.

The other subjects: each config run by that collector (test_collector_config_run.py), the fleet end to
end (test_collector_pipeline.py), docker compose (test_collector_config_compose.py), prometheus.yml
(test_collector_config_prometheus.py) and the fleet layout (test_collector_config_fleet.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.collector_helpers import (
    COLLECTOR_CONFIGS,
    COMPOSE,
    CONFIG_DIR,
    FLEET_AGENT,
    FLEET_GATEWAY,
    README,
    component_type,
    compose_services,
    host_port,
    load,
)
from tests.servers import collector_binaries

EXPECTED_FILES = (
    "agent.yaml",
    "gateway.yaml",
    "local.yaml",
    "jaeger.yaml",
    "prometheus.yml",
    "tempo.yaml",
    COMPOSE,
    "README.md",
    FLEET_AGENT,
    FLEET_GATEWAY,
    "build.sh",
)
SIGNALS = {"traces", "metrics", "logs"}
KINDS = ("receivers", "processors", "exporters")


# --- every file parses -----------------------------------------------------------------------


def test_expected_files_present():
    missing = [name for name in EXPECTED_FILES if not (CONFIG_DIR / name).is_file()]
    assert not missing


@pytest.mark.parametrize(
    "path",
    sorted([*CONFIG_DIR.rglob("*.yaml"), *CONFIG_DIR.rglob("*.yml")]),
    ids=lambda p: p.relative_to(CONFIG_DIR).as_posix(),
)
def test_yaml_parses(path: Path):
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict) and doc, f"{path.name} is not a YAML mapping"


def test_no_latest_tags_anywhere():
    for path in CONFIG_DIR.rglob("*"):
        if path.is_file():
            assert ":latest" not in path.read_text(), path.name


# --- collector configs -----------------------------------------------------------------------


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_pipelines_reference_defined_components(name: str):
    cfg = load(name)
    pipelines = cfg["service"]["pipelines"]
    assert {component_type(p) for p in pipelines} == SIGNALS, "one pipeline per signal"
    for pipeline_id, pipeline in pipelines.items():
        for kind in KINDS:
            defined = set(cfg.get(kind) or {})
            refs = pipeline.get(kind) or []
            if kind != "processors":
                assert refs, f"{pipeline_id} has no {kind}"
            undefined = [r for r in refs if r not in defined]
            assert not undefined, f"{name}: pipeline {pipeline_id} names undefined {kind} {undefined}"
    undefined_ext = set(cfg["service"].get("extensions") or []) - set(cfg.get("extensions") or {})
    assert not undefined_ext, f"{name}: service names undefined extensions {undefined_ext}"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_every_component_is_used(name: str):
    cfg = load(name)
    pipelines = cfg["service"]["pipelines"].values()
    for kind in KINDS:
        used = {ref for p in pipelines for ref in p.get(kind) or []}
        unused = set(cfg.get(kind) or {}) - used
        assert not unused, f"{name}: {kind} defined but in no pipeline: {unused}"
    unused_ext = set(cfg.get("extensions") or {}) - set(cfg["service"].get("extensions") or [])
    assert not unused_ext, f"{name}: extensions defined but not enabled: {unused_ext}"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_memory_limiter_first_batch_last(name: str):
    for pipeline_id, pipeline in load(name)["service"]["pipelines"].items():
        procs = [component_type(p) for p in pipeline.get("processors") or []]
        assert procs[:1] == ["memory_limiter"], f"{name}: {pipeline_id} must start with memory_limiter: {procs}"
        assert procs[-1:] == ["batch"], f"{name}: {pipeline_id} must end with batch: {procs}"
    limiter = load(name)["processors"]["memory_limiter"]
    assert limiter["check_interval"]
    assert 0 < limiter["spike_limit_percentage"] < limiter["limit_percentage"] <= 100


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_otlp_receiver_ports(name: str):
    protocols = load(name)["receivers"]["otlp"]["protocols"]
    host = "127.0.0.1" if name == "local.yaml" else "0.0.0.0"  # one machine's collector takes no traffic from outside
    assert host_port(protocols["grpc"]["endpoint"]) == (host, 4317)
    assert host_port(protocols["http"]["endpoint"]) == (host, 4318)


def readme_ports(label: str) -> set[int]:
    """Ports the README gives for ``label``: "4317 (OTLP gRPC)" in prose, or a "| 4317 | ... | OTLP gRPC ..." table row."""
    text = README.read_text()
    prose = re.findall(rf"\b(\d{{4,5}}) \({re.escape(label)}\)", text)
    rows = re.findall(rf"^\|\s*(\d{{4,5}})\s*\|[^|\n]*\|\s*{re.escape(label)}\b", text, flags=re.M)
    return {int(p) for p in prose + rows}


def test_agent_ports_match_readme():
    protocols = load("agent.yaml")["receivers"]["otlp"]["protocols"]
    assert readme_ports("OTLP gRPC") == {host_port(protocols["grpc"]["endpoint"])[1]}
    assert readme_ports("OTLP HTTP") == {host_port(protocols["http"]["endpoint"])[1]}


def test_agent_resource_adds_host_name():
    attrs = load("agent.yaml")["processors"]["resource"]["attributes"]
    host = [a for a in attrs if a["key"] == "host.name"]
    assert host and host[0]["action"] in ("insert", "upsert") and host[0]["value"]


def test_agent_exports_to_the_gateway():
    cfg = load("agent.yaml")
    (exporter_id,) = {e for p in cfg["service"]["pipelines"].values() for e in p["exporters"]}
    assert component_type(exporter_id) == "otlp_grpc"
    host, port = host_port(cfg["exporters"][exporter_id]["endpoint"])
    assert host == "gateway" and host in compose_services()
    assert port == host_port(load("gateway.yaml")["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]


def test_gateway_exporters():
    cfg = load("gateway.yaml")
    exporters, pipelines = cfg["exporters"], cfg["service"]["pipelines"]
    # traces -> Tempo's OTLP gRPC receiver
    host, port = host_port(exporters["otlp_grpc/tempo"]["endpoint"])
    tempo_grpc = load("tempo.yaml")["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert host == "tempo" and port == host_port(tempo_grpc)[1]
    assert "otlp_grpc/tempo" in pipelines["traces"]["exporters"]
    # metrics -> Prometheus, resource attributes kept as labels, exemplars in OpenMetrics
    rw = urlsplit(exporters["prometheus_remote_write"]["http"]["endpoint"])
    assert (rw.hostname, rw.port, rw.path) == ("prometheus", 9090, "/api/v1/write")
    for exporter_id in ("prometheus_remote_write", "prometheus"):
        assert exporters[exporter_id]["resource_constant_labels"] == {"included": ["*"], "excluded": ["torch.version"]}
        assert exporter_id in pipelines["metrics"]["exporters"]
    assert exporters["prometheus"]["enable_open_metrics"] is True
    assert pipelines["logs"]["exporters"] == ["debug"]


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_the_built_collector_validates_every_config(name: str):
    """``validate`` of the collector build.sh builds: what the docs tell an SRE to run on a changed config."""
    exe = collector_binaries()[0]
    proc = subprocess.run([exe, "validate", f"--config={CONFIG_DIR / name}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
