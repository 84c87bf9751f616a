"""Structural checks of collector-config/: the Collector, Prometheus, Tempo and docker compose files.

Docker cannot run in the test environment, so these files are checked by construction: they
parse, the collector pipelines only name components the file defines, the compose file pins its
images, mounts paths that exist and publishes on 127.0.0.1 only, and the ports and host names
agree across the files and the README. prometheus.yml is checked by the real promtool.

The fleet layout (collector-config/fleet/) is checked the same way, and against the bridge: the
tail-sampling policies name what real compiles' spans carry and every reason the rank sampler
gives, and the heavy series the gateway sums over ranks are the bridge's own histograms. With an
otelcol-contrib binary at hand (PATH or OTELCOL_CONTRIB), every collector config is also run
through its `validate`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import torch
import yaml
from opentelemetry.sdk.trace import ReadableSpan

from torch_otel._metrics import SERIES
from torch_otel.sampling import SAMPLED_BECAUSE, RankSampler

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "collector-config"
README = CONFIG_DIR / "README.md"
COMPOSE = "docker-compose.yaml"
FLEET_AGENT = "fleet/agent.yaml"
FLEET_GATEWAY = "fleet/gateway.yaml"
COLLECTOR_CONFIGS = ("agent.yaml", "gateway.yaml", FLEET_AGENT, FLEET_GATEWAY)
EXPECTED_FILES = ("agent.yaml", "gateway.yaml", "prometheus.yml", "tempo.yaml", COMPOSE, "README.md", FLEET_AGENT, FLEET_GATEWAY)

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


# --- fleet/: node agents, gateway tier -------------------------------------------------------

# OpenTelemetry SDK default: a BatchSpanProcessor exports every 5 s (OTEL_BSP_SCHEDULE_DELAY).
SDK_SPAN_EXPORT_DELAY_S = 5.0
# The loadbalancing exporter's resolvers; a config names exactly one.
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


def tail_sampling() -> dict[str, Any]:
    return load(FLEET_GATEWAY)["processors"]["tail_sampling"]


def policies_of(type_: str) -> list[dict[str, Any]]:
    return [p[type_] for p in tail_sampling()["policies"] if p["type"] == type_]


def heavy_series() -> set[str]:
    """The series the fleet gateway sums over ranks: those metricstransform/by_job aggregates."""
    transforms = load(FLEET_GATEWAY)["processors"]["metricstransform/by_job"]["transforms"]
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
    assert component_type(traces) == component_type(metrics) == "loadbalancing"
    assert traces != metrics, "metrics must not go through the trace-id balancer"
    assert cfg["exporters"][traces]["routing_key"] == "traceID"
    # every rank of a job to one gateway: the gateway's cumulativetodelta/deltatocumulative state
    assert cfg["exporters"][metrics]["routing_key"] == "service"


def test_fleet_agent_resolves_the_gateways_by_the_headless_service():
    cfg = load(FLEET_AGENT)
    lbs = {k: v for k, v in cfg["exporters"].items() if component_type(k) == "loadbalancing"}
    assert len(lbs) == 2
    resolvers = [lb["resolver"] for lb in lbs.values()]
    assert resolvers[0] == resolvers[1], "both exporters must hash over the same gateway list"
    assert set(resolvers[0]) & RESOLVERS == set(resolvers[0]) and len(resolvers[0]) == 1, resolvers[0]
    for lb in lbs.values():
        assert "endpoint" not in lb["protocol"]["otlp"], "the exporter sets one endpoint per gateway"
    dns = resolvers[0]["dns"]
    gateway_grpc = host_port(load(FLEET_GATEWAY)["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]
    assert dns["port"] == gateway_grpc
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
    assert policies_of("boolean_attribute") == [{"key": "torch.compile.recompile_limit_exceeded", "value": True}]
    (latency,) = policies_of("latency")
    assert latency["threshold_ms"] > 0
    (share,) = policies_of("probabilistic")
    assert 0 < share["sampling_percentage"] < 100
    (sdk,) = policies_of("string_attribute")
    assert sdk["key"] == SAMPLED_BECAUSE
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
    (sdk,) = policies_of("string_attribute")
    assert reasons <= set(sdk["values"]), f"the gateway would thin what the rank sampler kept: {reasons - set(sdk['values'])}"


def _policy_keeps(policy: dict[str, Any], spans: list[ReadableSpan]) -> bool:
    """The tail_sampling processor's rule for the deterministic policy types, over one trace."""
    kind = policy["type"]
    cfg = policy[kind]
    attrs = [{**dict(s.resource.attributes), **dict(s.attributes or {})} for s in spans]
    if kind == "status_code":
        return any(s.status.status_code.name in cfg["status_codes"] for s in spans)
    if kind == "boolean_attribute":
        return any(a.get(cfg["key"]) is cfg["value"] for a in attrs)
    if kind == "string_attribute":
        return any(a.get(cfg["key"]) in cfg["values"] for a in attrs)
    if kind == "latency":
        duration_ns = max(s.end_time for s in spans) - min(s.start_time for s in spans)
        return duration_ns >= cfg["threshold_ms"] * 1_000_000
    raise AssertionError(f"no model of policy type {kind}")


def test_tail_sampling_policies_on_real_compiles(cap):
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.recompile_limit = 2

    def shift(x):  # noqa: ANN001, ANN202
        return x + 1

    fn = torch.compile(shift, backend="eager")
    for n in range(1, 5):  # 0/0, a recompile 0/1, then the limit hit 0/2, then eager
        fn(torch.randn(n))

    def broken(gm, example_inputs):  # noqa: ANN001, ANN202
        raise RuntimeError("a backend that fails")

    with pytest.raises(Exception, match="a backend that fails"):
        torch.compile(lambda x: x.cos() * 3, backend=broken)(torch.randn(4))

    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in cap.spans():
        traces[span.context.trace_id].append(span)
    deterministic = [p for p in tail_sampling()["policies"] if p["type"] != "probabilistic"]
    kept_by: dict[str, set[str]] = {}
    for spans in traces.values():
        (root,) = [s for s in spans if s.parent is None]
        assert root.attributes and "torch.compile.kind" in root.attributes, "one trace per compile"
        # the phases lie inside the root: the trace's duration, which the latency policy reads, is the compile's
        assert min(s.start_time for s in spans) == root.start_time and max(s.end_time for s in spans) == root.end_time
        key = root.attributes.get("error.type") and (
            "limit" if root.attributes.get("torch.compile.recompile_limit_exceeded") else "failed"
        )
        kept_by[f"{key or 'ok'} {root.attributes['torch.compile.id']}"] = {
            p["name"] for p in deterministic if _policy_keeps(p, spans)
        }
    limit_hit = next(k for k in kept_by if k.startswith("limit "))
    failed = next(k for k in kept_by if k.startswith("failed "))
    by_type = {p["name"]: p["type"] for p in deterministic}
    assert {by_type[n] for n in kept_by[limit_hit]} == {"status_code", "boolean_attribute"}, kept_by
    assert {by_type[n] for n in kept_by[failed]} == {"status_code"}, kept_by
    plain = {k: v for k, v in kept_by.items() if k.startswith("ok ")}
    assert len(plain) == 2 and not any(plain.values()), f"left to the probabilistic share: {kept_by}"


def test_heavy_series_are_the_bridges_histograms_with_rank():
    heavy = heavy_series()
    assert heavy == {"torch_compile_phase_duration_seconds", "torch_compile_frame_duration_seconds"}
    transforms = load(FLEET_GATEWAY)["processors"]["metricstransform/by_job"]["transforms"]
    for t in transforms:
        series = SERIES[t["include"]]
        assert series.kind == "histogram" and "rank" in series.labels
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
        assert pipeline["receivers"] == ["otlp"] and pipeline["exporters"] == ["prometheusremotewrite"]
    # per rank: the filter drops a metric when a condition holds: exactly the heavy ones
    (drop,) = [p for p in pipelines["metrics/per_rank"]["processors"] if component_type(p) == "filter"]
    conditions = procs[drop]["metrics"]["metric"]
    assert {n for c in conditions for n in ottl_names(c, "==")} == heavy and len(conditions) == len(heavy)
    # by job: drops whatever is none of them
    (keep,) = [p for p in pipelines["metrics/by_job"]["processors"] if component_type(p) == "filter"]
    (condition,) = procs[keep]["metrics"]["metric"]
    assert ottl_names(condition, "!=") == heavy and " or " not in condition
    assert set(procs["cumulativetodelta/by_job"]["include"]["metrics"]) == heavy


def test_by_job_pipeline_order():
    types = processor_types(fleet_pipelines(FLEET_GATEWAY)["metrics/by_job"])
    order = ["filter", "cumulativetodelta", "transform", "groupbyattrs", "metricstransform", "deltatocumulative"]
    positions = [types.index(t) for t in order]
    assert positions == sorted(positions), types
    # the ranks' resources are equal before they are merged, and merged before their points are summed
    batch_merge = types.index("batch")
    assert types.index("transform") < batch_merge < types.index("groupbyattrs")
    # the summed points are restamped just before they are accumulated
    assert types[types.index("deltatocumulative") - 1] == "transform"
    assert load(FLEET_GATEWAY)["processors"]["cumulativetodelta/by_job"]["initial_value"] == "auto"


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
    assert "rules of thumb" in section.lower()
    assert "otelcol-contrib validate" in section and "headless" in section
    image = compose_services()["gateway"]["image"]
    assert image in section
    for policy in tail_sampling()["policies"]:
        assert f"`{policy['name']}`" in section, f"the README's policy table lacks {policy['name']}"
    for processor in fleet_pipelines(FLEET_GATEWAY)["metrics/by_job"]["processors"][1:-1]:
        assert f"`{processor}`" in section, f"the README's steps lack {processor}"


def otelcol_contrib() -> str:
    exe = os.environ.get("OTELCOL_CONTRIB") or shutil.which("otelcol-contrib")
    if not exe:
        pytest.skip("no otelcol-contrib binary (PATH or OTELCOL_CONTRIB): see collector-config/README.md#fleet")
    return exe


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_collector_config_passes_otelcol_validate(name: str):
    exe = otelcol_contrib()
    proc = subprocess.run([exe, "validate", f"--config={CONFIG_DIR / name}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
