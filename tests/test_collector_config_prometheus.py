"""Structural checks of collector-config/prometheus.yml: its targets, and the real promtool over it and the rules."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.collector_helpers import ROOT, RULES_MOUNT, compose_services, host_port, load

# torchrun: each rank serves /metrics on OTEL_EXPORTER_PROMETHEUS_PORT (default 9464) + LOCAL_RANK.
DEFAULT_PROMETHEUS_PORT = 9464
EXAMPLE_NPROC_PER_NODE = 8


def scrape_targets(job_name: str) -> list[str]:
    (job,) = [j for j in load("prometheus.yml")["scrape_configs"] if j["job_name"] == job_name]
    return [t for sc in job["static_configs"] for t in sc["targets"]]


def test_prometheus_scrapes_every_local_rank():
    targets = scrape_targets("torch_compile")
    hosts = {host_port(t)[0] for t in targets}
    assert len(hosts) == 1, "the example lists one node"
    ports = sorted(host_port(t)[1] for t in targets)
    assert ports == [DEFAULT_PROMETHEUS_PORT + local_rank for local_rank in range(EXAMPLE_NPROC_PER_NODE)]


def test_prometheus_targets_are_compose_services():
    host, port = host_port(scrape_targets("otel-gateway")[0])
    assert host in compose_services()
    telemetry = load("gateway.yaml")["service"]["telemetry"]["metrics"]["readers"]
    assert port in {r["pull"]["exporter"]["prometheus"]["port"] for r in telemetry}


def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        msg = "promtool not found (Debian: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def test_prometheus_config_passes_promtool(tmp_path: Path):
    # promtool also checks every rule file that rule_files matches. The config names the
    # path inside the container (/etc/prometheus/rules, mounted from ../grafana/alerts), so
    # check a copy whose rule_files points at the repo's grafana/alerts/ instead: that way
    # promtool checks the real rules too.
    cfg = load("prometheus.yml")
    assert cfg["rule_files"] == [f"{RULES_MOUNT}/*.yml"]
    cfg = {**cfg, "rule_files": [str(ROOT / "grafana" / "alerts" / "*.yml")]}
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = subprocess.run([promtool(), "check", "config", str(copy)], capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    for rules in sorted((ROOT / "grafana" / "alerts").glob("*.yml")):
        assert rules.name in output, f"promtool did not check {rules.name}:\n{output}"
