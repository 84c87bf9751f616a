"""Structural checks of collector-config/docker-compose.yaml, against the other files and the README.

The compose file pins its images, mounts paths that exist and publishes on 127.0.0.1 only, and
its ports, images and mounted config files agree with the README and the configs.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.collector_helpers import (
    COMPOSE,
    CONFIG_DIR,
    FLEET_AGENT,
    FLEET_GATEWAY,
    README,
    ROOT,
    RULES_MOUNT,
    compose_services,
    load,
)

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
    FLEET_AGENT: "gateway",
    FLEET_GATEWAY: "gateway",
    "prometheus.yml": "prometheus",
    "tempo.yaml": "tempo",
}


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
