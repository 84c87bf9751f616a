"""A real torchrun job through a VictoriaMetrics pipeline started from collector-config/'s files and commands.

Two real ``torch-otel run -- torchrun --nproc-per-node 3`` jobs (gloo, CPU; tests/workloads/diverge.py) serve
their ranks' /metrics: one whose rank 2 alone breaks its graph, one whose ranks compile the same things 2 s
apart. Two vmagent members share the 6 ranks (collector-config/victoriametrics/vmagent-scrape.yml), one
VictoriaMetrics stores them, vmalert evaluates grafana/alerts/torch-compile-rules.yml, and an Alertmanager
(collector-config/victoriametrics/alertmanager.yml) receives the alerts. A vmagent on
collector-config/victoriametrics/vmagent-node.yml scrapes the first job's ranks into a VictoriaMetrics of its own.

Every process runs a command line of collector-config/README.md's block, changed only as its "What is checked
here, and how" says (loopback addresses and free ports, temporary directories, 1 s evaluation). Skipped when
Debian's victoria-metrics or prometheus-alertmanager is not installed (.ci/run installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, clean_env, stop_processes, torchrun_under_torch_otel
from tests.servers import VM_PACKAGES, Command, free_port, http_get, require, wait_until

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "collector-config" / "victoriametrics"
README = ROOT / "collector-config" / "README.md"
RULES = ROOT / "grafana" / "alerts" / "torch-compile-rules.yml"
MARK = "<!-- vm-pipeline-commands: tests/test_vm_pipeline.py runs these -->"
ALERT = "TorchCompileRankDivergence"
PROGRAMS = ("victoria-metrics", "vmagent", "vmalert", "prometheus-alertmanager")

# job label (from its targets file) -> (diverge.py scenario, odd rank, the aspects that must name it)
JOBS: dict[str, tuple[str, int, set[str]]] = {
    "diverge": ("graph_break", 2, {"compiles", "graphs"}),
    "control": ("control", -1, set()),
}
HOSTS = ("victoria-metrics:8428", "alertmanager:9093")  # the README's URLs, pointed at the test's processes


def readme_commands() -> list[tuple[dict[str, str], list[str]]]:
    """The README's pipeline commands: (environment assignments, argv), in the README's order."""
    m = re.search(re.escape(MARK) + r"\n```sh\n(.*?)\n```", README.read_text(), re.S)
    assert m, f"{README.name}: no command block after {MARK}"
    out = []
    for line in m.group(1).replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line)
        env = {}
        while re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        out.append((env, words))
    return out


def _flag(words: list[str], name: str) -> str | None:
    for w in words:
        if w.lstrip("-").split("=", 1)[0] == name:
            return w.split("=", 1)[1]
    return None


def localize(words: list[str], port: int, workdir: Path, urls: dict[str, str]) -> list[str]:
    """A README command for this machine: listen on 127.0.0.1:``port``, state under ``workdir``, the README's hosts
    at ``urls``, repository paths absolute, 1 s evaluation. Everything else as written."""
    binary = shutil.which(words[0])
    assert binary, words[0]
    out = [binary]
    for w in words[1:]:
        flag, eq, value = w.partition("=")
        name = flag.lstrip("-")
        if not eq:
            pass
        elif name in ("httpListenAddr", "web.listen-address"):
            value = f"127.0.0.1:{port}"
        elif value.startswith(("/var/lib/", "/etc/")):
            workdir.mkdir(parents=True, exist_ok=True)
            value = str(workdir / value.strip("/").replace("/", "_"))
        elif name == "evaluationInterval":
            value = "1s"
        elif value and not value.startswith("/") and (ROOT / value).exists():
            value = str(ROOT / value)
        else:
            for host, url in urls.items():
                value = value.replace(f"http://{host}", url)
        out.append(f"{flag}{eq}{value}")
    return out


def _env(env: dict[str, str], shared: Path, **values: str) -> dict[str, str]:
    """A README command's environment: its paths under ``shared`` (the same for every process), or ``values``."""
    out = dict(os.environ)
    for key, value in env.items():
        if key in values:
            out[key] = values[key]
        else:
            assert value.startswith(("/var/lib/", "/etc/")), (key, value)
            out[key] = str(shared / value.strip("/").replace("/", "_"))
    return out


def _start(stack: contextlib.ExitStack, name: str, env: dict[str, str], words: list[str], urls: dict[str, str]):
    cmd = Command(name, lambda port, wd: localize(words, port, wd, urls), env)
    return stack.enter_context(cmd)


def _api(url: str, path: str, **params: str) -> Any:
    body = json.loads(http_get(f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10))
    assert body["status"] == "success", body
    return body["data"]


def _query(vm: Command, promql: str) -> list[dict[str, Any]]:
    return _api(vm.url, "query", query=promql, nocache="1")["result"]


def _am_alerts(am: Command) -> list[dict[str, Any]]:
    return json.loads(http_get(f"{am.url}/api/v2/alerts", timeout=10))


def _torchrun(job: str, tmp: Path, port: int) -> subprocess.Popen[bytes]:
    scenario, odd, _ = JOBS[job]
    env = {
        "SCENARIO": scenario,
        "ODD_RANK": str(odd),
        "SKEW_S": "2",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        "RELEASE_FILE": str(tmp / "release"),
        "OMP_NUM_THREADS": "1",
    }
    with (tmp / f"{job}.log").open("wb") as out:
        argv = torchrun_under_torch_otel(3, WORKLOADS / "diverge.py")
        return subprocess.Popen(argv, env=clean_env(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Any:
    for program in PROGRAMS:
        require(program, VM_PACKAGES)
    tmp = tmp_path_factory.mktemp("vm-pipeline")
    shared = tmp / "shared"
    commands = readme_commands()
    by_role: dict[str, tuple[dict[str, str], list[str]]] = {}
    for env, words in commands:
        role = words[0]
        if role == "vmagent":
            config = Path(_flag(words, "promscrape.config") or "").name
            role = f"vmagent-{_flag(words, 'promscrape.cluster.memberNum')}" if config == "vmagent-scrape.yml" else config
        assert role not in by_role, f"two README commands for {role}"
        by_role[role] = (env, words)
    assert set(by_role) == {*PROGRAMS[:1], "vmagent-0", "vmagent-1", "vmalert", PROGRAMS[3], "vmagent-node.yml"}, by_role

    # the launcher's part: one targets file per job, in the directory every member reads; a 1 s scrape
    ports = {job: free_port(consecutive=3) for job in JOBS}
    targets_dir = Path(_env(by_role["vmagent-0"][0], shared)["TORCH_OTEL_TARGETS_DIR"])
    targets_dir.mkdir(parents=True)
    for job, base in ports.items():
        labels = {"job": job, "__scrape_interval__": "1s", "__scrape_timeout__": "1s"}
        (targets_dir / f"{job}.json").write_text(
            json.dumps([{"targets": [f"127.0.0.1:{base + i}" for i in range(3)], "labels": labels}])
        )
    # the node agent's config, with the first job's 3 ports where the file lists 9464 to 9471 (as its header says)
    node_config = tmp / "vmagent-node.yml"
    text = (CONFIG / "vmagent-node.yml").read_text()
    listed = re.findall(r"^( +)- 127\.0\.0\.1:94(?:6[4-9]|7[01])\n", text, flags=re.M)
    assert len(listed) == 8, text
    ours = "".join(f"{listed[0]}- 127.0.0.1:{ports['diverge'] + i}\n" for i in range(3))
    node_config.write_text(re.sub(r"(?:^ +- 127\.0\.0\.1:94(?:6[4-9]|7[01])\n)+", ours, text, flags=re.M))

    t0 = time.monotonic()
    procs = {job: _torchrun(job, tmp, ports[job]) for job in JOBS}
    with contextlib.ExitStack() as stack:

        @stack.callback
        def _release() -> None:
            (tmp / "release").touch()
            stop_processes(procs.values(), wait=60)

        env, words = by_role["victoria-metrics"]
        vm = _start(stack, "victoria-metrics", _env(env, shared), words, {})
        env, words = by_role["prometheus-alertmanager"]
        am = _start(stack, "alertmanager", _env(env, shared), words, {})
        urls = {HOSTS[0]: vm.url, HOSTS[1]: am.url}
        members = []
        for n in (0, 1):
            env, words = by_role[f"vmagent-{n}"]
            members.append(_start(stack, f"vmagent{n}", _env(env, shared), words, urls))
        env, words = by_role["vmalert"]
        ruler = _start(stack, "vmalert", _env(env, shared), words, urls)
        # the node agent, into a VictoriaMetrics of its own (a job is scraped one way or the other, never both)
        env, words = by_role["victoria-metrics"]
        node_vm = _start(stack, "victoria-metrics-node", _env(env, shared), words, {})
        env, words = by_role["vmagent-node.yml"]
        words = [w if not w.startswith("-promscrape.config=") else f"-promscrape.config={node_config}" for w in words]
        node_agent = _start(stack, "vmagent-node", _env(env, shared, NODE_NAME="node-a"), words, {HOSTS[0]: node_vm.url})
        yield {
            "tmp": tmp,
            "ports": ports,
            "procs": procs,
            "vm": vm,
            "am": am,
            "members": members,
            "ruler": ruler,
            "node_vm": node_vm,
            "node_agent": node_agent,
            "t0": t0,
        }


def _divergence(alerts: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(a["labels"]["job"], a["labels"]["rank"], a["labels"]["aspect"]) for a in alerts if a["labels"]["alertname"] == ALERT}


def test_the_alert_names_the_odd_rank_at_the_alertmanager_and_never_the_job_that_compiled_alike(pipeline):
    am, tmp = pipeline["am"], pipeline["tmp"]
    want = {("diverge", str(odd), aspect) for job, (_, odd, aspects) in JOBS.items() for aspect in aspects}
    seen: set[tuple[str, str, str]] = set()

    def arrived() -> bool:
        for job, p in pipeline["procs"].items():
            assert p.poll() is None, f"{job} exited early:\n{(tmp / f'{job}.log').read_text(errors='replace')[-3000:]}"
        seen.update(_divergence(_am_alerts(am)))
        assert not {s for s in seen if s[0] == "control"}, sorted(seen)  # never, at any poll
        return want <= seen

    wait_until(arrived, 150, f"{ALERT} to name {sorted(want)} at the Alertmanager")
    took = time.monotonic() - pipeline["t0"]
    time.sleep(3)  # a few evaluations more: nothing else arrives
    alerts = _am_alerts(am)
    assert _divergence(alerts) == want, sorted(_divergence(alerts))
    assert seen == want, sorted(seen)
    a = next(a for a in alerts if a["labels"]["alertname"] == ALERT)
    assert a["labels"]["severity"] == "critical" and a["labels"]["run_id"]
    assert a["annotations"]["summary"].startswith("Rank 2 of diverge compiled differently from the other ranks: ")
    assert a["receivers"] == [{"name": "torch-compile-critical"}]
    # one notification group per job and run: every odd rank and aspect of it together
    groups = [
        g for g in json.loads(http_get(f"{am.url}/api/v2/alerts/groups", timeout=10)) if g["labels"].get("alertname") == ALERT
    ]
    assert len(groups) == 1 and set(groups[0]["labels"]) == {"alertname", "job", "run_id"}, groups
    assert groups[0]["receiver"]["name"] == "torch-compile-critical" and len(groups[0]["alerts"]) == len(want)
    # vmalert says the same, and so do the alert's series it wrote to the store (ALERTS, as Prometheus keeps them)
    firing = [x for x in _api(pipeline["ruler"].url, "alerts")["alerts"] if x["state"] == "firing"]
    assert _divergence(firing) == want

    def stored() -> set[tuple[str, str, str]]:
        odd = _query(pipeline["vm"], f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}')
        return {(r["metric"]["job"], r["metric"]["rank"], r["metric"]["aspect"]) for r in odd}

    wait_until(lambda: stored() == want, 30, f"the store's ALERTS series to name {sorted(want)}")  # vmalert flushes every 5 s
    assert stored() == want
    print(f"\n{ALERT} at the Alertmanager {took:.0f} s after the jobs started")


def test_the_two_members_share_the_ranks_and_the_store_has_them_all(pipeline):
    ports, vm = pipeline["ports"], pipeline["vm"]
    want = {f"http://127.0.0.1:{base + i}/metrics" for base in ports.values() for i in range(3)}
    shares = [
        {t["scrapeUrl"]: t for t in _api(m.url, "targets")["activeTargets"] if t["labels"]["job"] in JOBS}
        for m in pipeline["members"]
    ]
    assert set(shares[0]).isdisjoint(shares[1]) and set(shares[0]) | set(shares[1]) == want, shares
    up = wait_until(lambda: len(r := _query(vm, 'up{job=~"diverge|control"} == 1')) == 6 and r, 30, "every rank up")
    assert {(r["metric"]["job"], r["metric"]["instance"]) for r in up} == {
        (job, f"127.0.0.1:{base + i}") for job, base in ports.items() for i in range(3)
    }
    fps = _query(vm, "count by (job, run_id) (torch_compile_rank_fingerprint)")
    assert {r["metric"]["job"]: r["value"][1] for r in fps} == {"diverge": "12", "control": "12"}  # 3 ranks x 4 aspects


def test_the_node_agent_names_each_rank_by_node_and_port(pipeline):
    base, vm = pipeline["ports"]["diverge"], pipeline["node_vm"]
    want = {f"node-a:{base + i}" for i in range(3)}

    def scraped() -> bool:
        up = _query(vm, 'up{job="torch"} == 1')
        fps = _query(vm, "torch_compile_rank_fingerprint")
        return {r["metric"]["instance"] for r in up} == want and {r["metric"]["instance"] for r in fps} == want

    wait_until(scraped, 60, f"the node agent's series with instance in {sorted(want)}")
    ranks = {
        r["metric"]["instance"]: r["metric"]["rank"] for r in _query(vm, 'torch_compile_rank_fingerprint{aspect="compiles"}')
    }
    assert ranks == {f"node-a:{base + i}": str(i) for i in range(3)}


def test_every_shipped_file_is_run_by_a_readme_command():
    used = {Path(v).name for _, words in readme_commands() for w in words[1:] if "=" in w for v in [w.split("=", 1)[1]]}
    shipped = {p.name for p in CONFIG.iterdir() if p.is_file()}
    assert shipped and shipped <= used, shipped - used
    assert RULES.name in used


def test_no_rule_combines_a_recorded_series_with_another_series():
    """vmalert (and the Mimir and Thanos rulers) read a recorded series back only a while after they wrote it: a rule
    that combined it with another series would compare two moments. So a rule reads the ranks' own series, or one
    recorded series alone. With the rules before issue 36 (the alert read a recorded rule together with the ranks'
    series, and that rule read two others), bench/fleet/metrics.py's vmalert named every rank of a 1,024-rank job when one
    rank diverged (docs/benchmarks.md)."""
    import yaml

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    assert recorded
    for r in rules:
        name = r.get("record") or r.get("alert")
        used = {n for n in recorded if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", r["expr"])}
        raw = set(re.findall(r"(?<![\w:])torch_(?:compile|otel)_\w+(?![\w:])", r["expr"]))
        assert len(used) <= 1 and not (used and raw), f"{name} reads {sorted(used)} with {sorted(raw)}"
