"""Structural checks of collector-config/: the Collector, Prometheus, Tempo and docker compose files.

Docker cannot run in the test environment, so these files are checked by construction: they
parse, the collector pipelines only name components the file defines, the compose file pins its
images, mounts paths that exist and publishes on 127.0.0.1 only, and the ports and host names
agree across the files and the README. prometheus.yml is checked by the real promtool.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "collector-config"
README = CONFIG_DIR / "README.md"
COMPOSE = "docker-compose.yaml"
COLLECTOR_CONFIGS = ("agent.yaml", "gateway.yaml")
EXPECTED_FILES = ("agent.yaml", "gateway.yaml", "prometheus.yml", "tempo.yaml", COMPOSE, "README.md")

# The grafana/ files and folders the compose stack needs (written as a separate piece of work).
# docker-compose.yaml may bind-mount only paths listed here; each must exist in the repo.
GRAFANA_PATHS = (
    "grafana/alerts",
    "grafana/alerts/torch-compile-rules.yml",
    "grafana/dashboards",
    "grafana/provisioning",
    "grafana/provisioning/datasources/datasources.yaml",
    "grafana/provisioning/dashboards/dashboards.yaml",
)

# Services the configs refer to by host name.
REQUIRED_SERVICES = ("gateway", "prometheus", "tempo", "grafana")

# Which config file is written for which compose image (its header names the pinned image).
CONFIG_IMAGES = {
    "agent.yaml": "gateway",
    "gateway.yaml": "gateway",
    "prometheus.yml": "prometheus",
    "tempo.yaml": "tempo",
}

# torchrun: each rank serves /metrics on OTEL_EXPORTER_PROMETHEUS_PORT (default 9464) + LOCAL_RANK.
DEFAULT_PROMETHEUS_PORT = 9464
EXAMPLE_NPROC_PER_NODE = 8
RULES_MOUNT = "/etc/prometheus/rules"
SIGNALS = {"traces", "metrics", "logs"}
KINDS = ("receivers", "processors", "exporters")


@functools.cache
def load(name: str) -> Any:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def compose_services() -> dict[str, Any]:
    return load(COMPOSE)["services"]


def env_default(value: str) -> str:
    """``${env:NAME:-default}`` -> ``default``; anything else unchanged."""
    m = re.fullmatch(r"\$\{env:\w+:-(.*)\}", value)
    return m.group(1) if m else value


def host_port(endpoint: str) -> tuple[str, int]:
    endpoint = env_default(str(endpoint))
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        assert parts.hostname and parts.port, endpoint
        return parts.hostname, parts.port
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def component_type(component_id: str) -> str:
    """``otlp/tempo`` -> ``otlp``."""
    return component_id.split("/", 1)[0]


def published_ports(service: dict[str, Any]) -> list[tuple[str | None, int, int]]:
    """(host ip or None, host port, container port) for each entry of ``ports``."""
    out = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            out.append((entry.get("host_ip"), int(entry.get("published", entry["target"])), int(entry["target"])))
            continue
        spec = str(entry).split("/", 1)[0]
        m = re.fullmatch(r"(?:(\[[^\]]+\]|[^:]+):)?(?:(\d+):)?(\d+)", spec)
        assert m, f"cannot parse port entry {entry!r}"
        ip, host, container = m.groups()
        if host is None and ip is not None and ip.isdigit():  # "3000:3000"
            ip, host = None, ip
        out.append((ip, int(host or container), int(container)))
    return out


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of the bind mounts; named volumes are left out."""
    out = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type") == "bind":
                out.append((entry["source"], entry["target"]))
            continue
        source, target = str(entry).split(":")[:2]
        if source.startswith((".", "/", "~")):
            out.append((source, target))
    return out


def repo_relative(host_path: str) -> str:
    path = (CONFIG_DIR / host_path).resolve()
    assert path.is_relative_to(ROOT), f"{host_path} points outside the repository"
    return path.relative_to(ROOT).as_posix()


# --- every file parses -----------------------------------------------------------------------


def test_expected_files_present():
    missing = [name for name in EXPECTED_FILES if not (CONFIG_DIR / name).is_file()]
    assert not missing


@pytest.mark.parametrize("path", sorted([*CONFIG_DIR.glob("*.yaml"), *CONFIG_DIR.glob("*.yml")]), ids=lambda p: p.name)
def test_yaml_parses(path: Path):
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict) and doc, f"{path.name} is not a YAML mapping"


def test_no_latest_tags_anywhere():
    for path in CONFIG_DIR.iterdir():
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
    assert host_port(protocols["grpc"]["endpoint"]) == ("0.0.0.0", 4317)
    assert host_port(protocols["http"]["endpoint"]) == ("0.0.0.0", 4318)


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
    assert component_type(exporter_id) == "otlp"
    host, port = host_port(cfg["exporters"][exporter_id]["endpoint"])
    assert host == "gateway" and host in compose_services()
    assert port == host_port(load("gateway.yaml")["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]


def test_gateway_exporters():
    cfg = load("gateway.yaml")
    exporters, pipelines = cfg["exporters"], cfg["service"]["pipelines"]
    # traces -> Tempo's OTLP gRPC receiver
    host, port = host_port(exporters["otlp/tempo"]["endpoint"])
    tempo_grpc = load("tempo.yaml")["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert host == "tempo" and port == host_port(tempo_grpc)[1]
    assert "otlp/tempo" in pipelines["traces"]["exporters"]
    # metrics -> Prometheus, resource attributes kept as labels, exemplars in OpenMetrics
    rw = urlsplit(exporters["prometheusremotewrite"]["endpoint"])
    assert (rw.hostname, rw.port, rw.path) == ("prometheus", 9090, "/api/v1/write")
    for exporter_id in ("prometheusremotewrite", "prometheus"):
        assert exporters[exporter_id]["resource_to_telemetry_conversion"]["enabled"] is True
        assert exporter_id in pipelines["metrics"]["exporters"]
    assert exporters["prometheus"]["enable_open_metrics"] is True
    assert pipelines["logs"]["exporters"] == ["debug"]


# --- docker compose --------------------------------------------------------------------------


def test_compose_has_required_services():
    missing = set(REQUIRED_SERVICES) - set(compose_services())
    assert not missing


@pytest.mark.parametrize("service", REQUIRED_SERVICES)
def test_compose_image_pinned(service: str):
    image = compose_services()[service]["image"]
    m = re.fullmatch(r"[\w.\-/]+(?::(?P<tag>[\w][\w.\-]*))?(?:@sha256:[0-9a-f]{64})?", image)
    assert m, f"unexpected image reference {image!r}"
    assert m["tag"] or "@sha256:" in image, f"{service}: image {image!r} has no tag"
    assert m["tag"] != "latest", f"{service}: image {image!r} is not pinned"


def test_every_compose_image_pinned():
    for name, service in compose_services().items():
        image = service.get("image", "")
        assert re.search(r":[\w][\w.\-]*$|@sha256:", image) and not image.endswith(":latest"), f"{name}: {image!r}"


def test_compose_bind_mounts_exist():
    for name, service in compose_services().items():
        for source, _ in bind_mounts(service):
            rel = repo_relative(source)
            if rel.startswith("grafana/"):
                assert rel in GRAFANA_PATHS, f"{name} mounts {rel}: add it to GRAFANA_PATHS in this test"
            assert (ROOT / rel).exists(), f"{name} mounts {source}, which does not exist ({rel})"


@pytest.mark.parametrize("rel", GRAFANA_PATHS)
def test_grafana_paths_exist(rel: str):
    assert (ROOT / rel).exists(), f"{rel} is mounted by collector-config/{COMPOSE} but is missing"


def test_compose_ports_bind_loopback_only():
    for name, service in compose_services().items():
        for ip, host, _ in published_ports(service):
            assert ip == "127.0.0.1", f"{name} publishes port {host} on {ip or 'all interfaces'}"


def test_compose_ports_match_readme():
    rows = re.findall(r"^\|\s*(\d{4,5})\s*\|\s*([\w-]+)\s*\|", README.read_text(), flags=re.M)
    documented = {(int(port), service) for port, service in rows}
    published = {(host, name) for name, service in compose_services().items() for _, host, _ in published_ports(service)}
    assert documented == published


def test_compose_images_match_readme():
    rows = re.findall(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*$", README.read_text(), flags=re.M)
    documented = {f"{image}:{tag}" for image, tag in rows}
    assert documented == {s["image"] for s in compose_services().values()}


@pytest.mark.parametrize(("name", "service"), CONFIG_IMAGES.items())
def test_config_header_names_its_image(name: str, service: str):
    image = compose_services()[service]["image"]
    assert image in (CONFIG_DIR / name).read_text(), f"{name} should say it is written for {image}"


def test_compose_gateway_uses_gateway_yaml():
    gateway = compose_services()["gateway"]
    mounts = dict(bind_mounts(gateway))
    config_path = mounts["./gateway.yaml"]
    assert f"--config={config_path}" in gateway["command"]
    assert {host for _, host, _ in published_ports(gateway)} >= {4317, 4318}


def test_compose_prometheus_flags_and_mounts():
    prom = compose_services()["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    assert "--web.enable-remote-write-receiver" in prom["command"]
    mounts = dict(bind_mounts(prom))
    config_file = next(a.split("=", 1)[1] for a in prom["command"] if a.startswith("--config.file="))
    assert mounts["./prometheus.yml"] == config_file
    assert mounts["../grafana/alerts"] == RULES_MOUNT
    assert load("prometheus.yml")["rule_files"] == [f"{RULES_MOUNT}/*.yml"]


def test_compose_tempo_uses_tempo_yaml():
    tempo = compose_services()["tempo"]
    config_path = dict(bind_mounts(tempo))["./tempo.yaml"]
    assert f"-config.file={config_path}" in tempo["command"]
    http_port = load("tempo.yaml")["server"]["http_listen_port"]
    assert http_port in {container for _, _, container in published_ports(tempo)}


def test_compose_grafana_mounts():
    mounts = dict(bind_mounts(compose_services()["grafana"]))
    assert mounts["../grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["../grafana/dashboards"] == "/var/lib/grafana/dashboards"


# --- prometheus.yml --------------------------------------------------------------------------


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
