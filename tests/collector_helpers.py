"""What the collector-config/ tests share: where the files are, how they are read, and how endpoints are parsed.

Used by tests/test_collector_config_*.py, one file per subject: the collectors, docker compose,
prometheus.yml, the fleet layout, and the fleet's tail sampling over real compiles.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "collector-config"
README = CONFIG_DIR / "README.md"
COMPOSE = "docker-compose.yaml"
FLEET_AGENT = "fleet/agent.yaml"
FLEET_GATEWAY = "fleet/gateway.yaml"
COLLECTOR_CONFIGS = ("agent.yaml", "gateway.yaml", FLEET_AGENT, FLEET_GATEWAY, "local.yaml")
RULES_MOUNT = "/etc/prometheus/rules"


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


def tail_sampling() -> dict[str, Any]:
    return load(FLEET_GATEWAY)["processors"]["tail_sampling"]
