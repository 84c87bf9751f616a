"""Structural checks of the fleet layout (collector-config/fleet/): node agents and a gateway tier.

Checked against the bridge: the tail-sampling policies name every reason the rank sampler gives,
and the heavy series the gateway sums over ranks are the bridge's own histograms. The real collector
running this layout on a real job, its policies deciding real compiles: test_collector_pipeline.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.collector_helpers import (
    FLEET_AGENT,
    FLEET_GATEWAY,
    README,
    ROOT,
    component_type,
    compose_services,
    env_default,
    host_port,
    load,
    tail_sampling,
)
from torch_otel._features.startup.attribution import ENDS
from torch_otel._sinks.metrics import SERIES
from torch_otel.sampling import SAMPLED_BECAUSE, RankSampler

# OpenTelemetry SDK default: a BatchSpanProcessor exports every 5 s (OTEL_BSP_SCHEDULE_DELAY).
SDK_SPAN_EXPORT_DELAY_S = 5.0
# The load_balancing exporter's resolvers; a config names exactly one.
RESOLVERS = {"dns", "static", "k8s"}
# Resource attributes that tell one rank's process from another's (docs/distributed.md).
PER_PROCESS_RESOURCE = {
    "host.name",
    "process.pid",
    "torch.distributed.rank",
    "torch.distributed.local_rank",
    "service.instance.id",
}


def seconds(duration: str) -> float:
    """A collector duration (``30s``, ``500ms``, ``5m``) in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(duration))
    assert m, f"unexpected duration {duration!r}"
    return float(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def fleet_pipelines(name: str) -> dict[str, Any]:
    return load(name)["service"]["pipelines"]


def processor_types(pipeline: dict[str, Any]) -> list[str]:
    return [component_type(p) for p in pipeline.get("processors") or []]


def policies_of(type_: str) -> list[dict[str, Any]]:
    return [p[type_] for p in tail_sampling()["policies"] if p["type"] == type_]


def heavy_series() -> set[str]:
    """The series the fleet gateway sums over ranks: those metrics_transform/by_job aggregates."""
    transforms = load(FLEET_GATEWAY)["processors"]["metrics_transform/by_job"]["transforms"]
    return {t["include"] for t in transforms}


def ottl_names(condition: str, op: str) -> set[str]:
    """The metric names an OTTL condition compares ``name`` with, by ``op`` (``==`` or ``!=``)."""
    return set(re.findall(rf'\bname\s*{re.escape(op)}\s*"([^"]+)"', condition))


def readme_fleet_section() -> str:
    text = README.read_text()
    start = text.index("\n## Fleet")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def readme_manifests() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", readme_fleet_section(), flags=re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if isinstance(doc, dict)]


def test_fleet_agent_routes_traces_by_trace_id_and_metrics_apart():
    cfg = load(FLEET_AGENT)
    pipelines = cfg["service"]["pipelines"]
    (traces,) = pipelines["traces"]["exporters"]
    (metrics,) = pipelines["metrics"]["exporters"]
    assert pipelines["logs"]["exporters"] == [traces], "a compile's log records go where its spans go"
    assert component_type(traces) == component_type(metrics) == "load_balancing"
    assert traces != metrics, "metrics must not go through the trace-id balancer"
    assert cfg["exporters"][traces]["routing_key"] == "traceID"
    # every rank of a job to one gateway: the gateway's cumulative_to_delta/delta_to_cumulative state
    assert cfg["exporters"][metrics]["routing_key"] == "service"


def test_fleet_agent_resolves_the_gateways_by_the_headless_service():
    cfg = load(FLEET_AGENT)
    lbs = {k: v for k, v in cfg["exporters"].items() if component_type(k) == "load_balancing"}
    assert len(lbs) == 2
    resolvers = [lb["resolver"] for lb in lbs.values()]
    assert resolvers[0] == resolvers[1], "both exporters must hash over the same gateway list"
    assert set(resolvers[0]) & RESOLVERS == set(resolvers[0]) and len(resolvers[0]) == 1, resolvers[0]
    for lb in lbs.values():
        assert "endpoint" not in lb["protocol"]["otlp"], "the exporter sets one endpoint per gateway"
    dns = resolvers[0]["dns"]
    gateway_grpc = host_port(load(FLEET_GATEWAY)["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]
    assert int(dns["port"]) == gateway_grpc
    assert seconds(dns["timeout"]) < seconds(dns["interval"])
    # the default name is the headless service of the README's manifest
    (service,) = [m for m in readme_manifests() if m.get("kind") == "Service"]
    assert service["spec"]["clusterIP"] == "None", "a normal service hides the gateways behind one virtual IP"
    assert gateway_grpc in {p["port"] for p in service["spec"]["ports"]}
    meta = service["metadata"]
    assert env_default(dns["hostname"]) == f"{meta['name']}.{meta['namespace']}.svc.cluster.local"


def test_fleet_gateway_tail_samples_traces_before_tempo():
    cfg = load(FLEET_GATEWAY)
    traces = cfg["service"]["pipelines"]["traces"]
    assert processor_types(traces) == ["memory_limiter", "tail_sampling", "batch"]
    (exporter,) = traces["exporters"]
    tempo_grpc = load("tempo.yaml")["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert host_port(cfg["exporters"][exporter]["endpoint"]) == ("tempo", host_port(tempo_grpc)[1])


def test_tail_sampling_policies():
    ts = tail_sampling()
    names = [p["name"] for p in ts["policies"]]
    assert len(names) == len(set(names)), "policy names tell the decisions apart in the gateway's metrics"
    assert [p["status_codes"] for p in policies_of("status_code")] == [["ERROR"]]
    assert policies_of("boolean_attribute") == [
        {"key": "torch.compile.recompile_limit_exceeded", "value": True},
        {"key": "torch.compile.is_recompile", "value": True},
    ]
    # the two thresholds an SRE tunes come from the environment, with the defaults the README gives
    (latency,) = policies_of("latency")
    assert latency["threshold_ms"] == "${env:SLOW_COMPILE_MS:-60000}"
    (share,) = policies_of("probabilistic")
    assert share["sampling_percentage"] == "${env:ROUTINE_TRACES_PERCENT:-1}"
    sdk, startups = policies_of("string_attribute")
    assert sdk["key"] == SAMPLED_BECAUSE
    # each process's start-up trace, on every rank, whatever ended it (one trace per process)
    assert startups == {"key": "torch.startup.end", "values": list(ENDS)}
    # a compile's spans are built at its end and leave together: one SDK export, one agent batch
    agent_batch = seconds(load(FLEET_AGENT)["processors"]["batch"]["timeout"])
    wait = seconds(ts["decision_wait"])
    assert wait >= 2 * (SDK_SPAN_EXPORT_DELAY_S + agent_batch)
    assert ts["num_traces"] >= 2 * ts["expected_new_traces_per_sec"] * wait
    assert ts["decision_cache"]["sampled_cache_size"] >= ts["num_traces"]


def test_tail_sampling_keeps_every_reason_the_rank_sampler_gives():
    sampler = RankSampler("0")
    frame = {"torch.compile.kind": "frame", "torch.distributed.rank": 3}
    reasons = {
        sampler.reason({**frame, "torch.distributed.rank": 0}),
        sampler.reason({**frame, "error.type": "BackendCompilerFailed"}),
        sampler.reason({**frame, "error.type": "Unsupported", "torch.compile.recompile_limit_exceeded": True}),
        sampler.reason({**frame, "torch.compile.is_recompile": True}),
    }
    for d in (1.0, 1.0, 1.0, 10.0):  # a usual compile, then one ten times as slow
        why = sampler.reason({**frame, "torch.compile.duration_s": d})
    reasons.add(why)
    assert None not in reasons and len(reasons) == 5, reasons
    sdk = next(p for p in policies_of("string_attribute") if p["key"] == SAMPLED_BECAUSE)
    assert reasons <= set(sdk["values"]), f"the gateway would thin what the rank sampler kept: {reasons - set(sdk['values'])}"


def test_heavy_series_are_the_bridges_histograms_with_rank():
    heavy = heavy_series()
    assert heavy == {"torch_compile_phase_duration_seconds", "torch_compile_frame_duration_seconds"}
    transforms = load(FLEET_GATEWAY)["processors"]["metrics_transform/by_job"]["transforms"]
    for t in transforms:
        series = SERIES[t["include"]]
        assert series.instrument == "histogram" and "rank" in series.labels
        assert t["match_type"] == "strict" and t["action"] == "update"
        (op,) = t["operations"]
        assert op["action"] == "aggregate_labels" and op["aggregation_type"] == "sum"
        assert op["label_set"] == [label for label in series.labels if label != "rank"]


def test_per_rank_and_by_job_pipelines_split_the_heavy_series():
    cfg = load(FLEET_GATEWAY)
    procs, pipelines, heavy = cfg["processors"], cfg["service"]["pipelines"], heavy_series()
    metric_pipelines = {k: v for k, v in pipelines.items() if component_type(k) == "metrics"}
    assert set(metric_pipelines) == {"metrics/per_rank", "metrics/by_job"}
    for pipeline in metric_pipelines.values():
        assert pipeline["receivers"] == ["otlp"] and pipeline["exporters"] == ["prometheus_remote_write"]
    # per rank: the filter drops a metric when a condition holds: exactly the heavy ones
    (drop,) = [p for p in pipelines["metrics/per_rank"]["processors"] if component_type(p) == "filter"]
    conditions = procs[drop]["metrics"]["metric"]
    assert {n for c in conditions for n in ottl_names(c, "==")} == heavy and len(conditions) == len(heavy)
    # by job: drops whatever is none of them
    (keep,) = [p for p in pipelines["metrics/by_job"]["processors"] if component_type(p) == "filter"]
    (condition,) = procs[keep]["metrics"]["metric"]
    assert ottl_names(condition, "!=") == heavy and " or " not in condition
    assert set(procs["cumulative_to_delta/by_job"]["include"]["metrics"]) == heavy


def test_by_job_pipeline_order():
    types = processor_types(fleet_pipelines(FLEET_GATEWAY)["metrics/by_job"])
    order = ["filter", "cumulative_to_delta", "transform", "groupbyattrs", "metrics_transform", "delta_to_cumulative"]
    positions = [types.index(t) for t in order]
    assert positions == sorted(positions), types
    # the ranks' resources are equal before they are merged, and merged before their points are summed
    batch_merge = types.index("batch")
    assert types.index("transform") < batch_merge < types.index("groupbyattrs")
    # the summed points are restamped just before they are accumulated
    assert types[types.index("delta_to_cumulative") - 1] == "transform"
    assert load(FLEET_GATEWAY)["processors"]["cumulative_to_delta/by_job"]["initial_value"] == "auto"


def test_by_job_forgets_rank_host_and_process():
    cfg = load(FLEET_GATEWAY)
    by_job = cfg["service"]["pipelines"]["metrics/by_job"]["processors"]
    (strip,) = [p for p in by_job if component_type(p) == "transform" and p != "transform/restamp"]
    (stmts,) = cfg["processors"][strip]["metric_statements"]
    assert stmts["context"] == "resource"
    (keep_keys,) = stmts["statements"]
    m = re.fullmatch(r"keep_keys\(attributes, (\[.*\])\)", keep_keys)
    assert m, keep_keys
    kept = set(json.loads(m[1]))
    assert "service.name" in kept, "Prometheus's job label"
    assert not kept & PER_PROCESS_RESOURCE
    restamp = cfg["processors"]["transform/restamp"]["metric_statements"]
    assert [s["context"] for s in restamp] == ["datapoint"]


def _promql_exprs() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "grafana" / "alerts").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [(path.name, str(rule["expr"])) for rule in group["rules"]]

    def walk(name: str, node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                out.append((name, node["expr"]))
            for v in node.values():
                walk(name, v)
        elif isinstance(node, list):
            for v in node:
                walk(name, v)

    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        walk(path.name, json.loads(path.read_text()))
    return out


def test_no_rule_or_panel_needs_the_summed_series_by_rank():
    heavy = heavy_series()
    exprs = [(name, e) for name, e in _promql_exprs() if any(h in e for h in heavy)]
    assert exprs, "the dashboards and alerts use the heavy series"
    for name, expr in exprs:
        assert not re.search(r"\b(?:by|without)\s*\([^)]*\brank\b", expr), f"{name}: {expr}"
        assert not re.search(r'\brank\s*(?:=|!=)\s*"', expr), f"{name} picks a rank: {expr}"


def test_readme_fleet_section():
    section = readme_fleet_section()
    for name in (FLEET_AGENT, FLEET_GATEWAY):
        assert f"`{name}`" in section
    assert "bench/fleet/traces.py" in section  # the sizing is measured, and says by what
    assert "headless" in section and "preStop" in section
    assert '"$OTELCOL" validate --config=' in README.read_text()
    image = compose_services()["gateway"]["image"]
    assert image in section
    for policy in tail_sampling()["policies"]:
        assert f"`{policy['name']}`" in section, f"the README's policy table lacks {policy['name']}"
    for processor in fleet_pipelines(FLEET_GATEWAY)["metrics/by_job"]["processors"][1:-1]:
        assert f"`{processor}`" in section, f"the README's steps lack {processor}"
