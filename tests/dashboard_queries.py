"""The shipped dashboards' PromQL, as Grafana would send it: read by the tests that run it against a real store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
PROMETHEUS_UID, TEMPO_UID = "${datasource}", "${tempo}"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])  # collapsed rows


def prom_targets(dash: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every Prometheus query of a dashboard."""
    for p in panels(dash):
        for t in p.get("targets", []):
            if t.get("datasource", p.get("datasource", {})).get("uid") == PROMETHEUS_UID:
                yield p["title"], t["expr"]


def all_prom_targets() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL) of every shipped dashboard."""
    return [(p.stem, title, expr) for p in DASHBOARDS for title, expr in prom_targets(load(p))]


def substitute(expr: str, rank: str, job: str = "torch") -> str:
    """What Grafana sends: variables replaced, with $__rate_interval at its usual floor of 4x a 15 s scrape."""
    out = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "1h")
    return out.replace("$job", job).replace("$rank", rank)
