"""The fleet's traces and metrics through real collectors, into a real trace store and a real Prometheus.

A real job of two nodes (``torch-otel run -- torchrun``, gloo, CPU; tests/workloads/fleet.py) runs 3 ranks: node a
has ranks 0 and 1, node b rank 2, the odd rank, which alone recompiles. Each node's ranks send OTLP to their node's
agent (collector-config/fleet/agent.yaml); the two agents spread traces by trace id, and metrics by service, over two
gateways (collector-config/fleet/gateway.yaml) that tail-sample the traces into Jaeger v2 (collector-config/jaeger.yaml)
and remote-write the metrics into Prometheus. Every collector is the one collector-config/build.sh builds, running the
shipped file; the command line changes only what a test on one machine must (--set): each listen address becomes
127.0.0.1 and a free port, and the agents list the two gateways with the static resolver (no DNS name resolves to
two loopback gateways here). The environment sets what the files read from it: the gateways' trace store and
Prometheus, ``SLOW_COMPILE_MS`` (the slow compile here takes seconds, not a minute) and ``ROUTINE_TRACES_PERCENT``
(half of the routine traces, so that the share the gateways keep is large enough to check trace by trace).

Between the job's first and second phase, gateway 2 is stopped (SIGTERM, as a rolling restart does); it is started
again after the second phase. The ranks' own record of every span they exported (``TORCH_OTEL_TRACES_FILE``) is
the truth Jaeger is held to.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard_queries import all_prom_targets, substitute
from tests.helpers import WORKLOADS, clean_env, read_otlp_json_spans
from tests.servers import HostsFile, Jaeger, Prometheus, collector, collector_binaries, free_port, wait_until, yaml_flow

SERVICE = "torch"  # the dashboards' $job: Prometheus's job label is the service name
SLOW_COMPILE_MS = 4000  # the job's slow compile sleeps 6 s in its backend; the others take well under 4 s
ROUTINE_PERCENT = 50
GATEWAYS = {"gw1": "127.0.0.2", "gw2": "127.0.0.3"}  # the headless service's records: two loopback addresses
DNS_NAME = "gateways"
DNS_INTERVAL_S = 2  # the agents' resolver interval here (15 s as shipped)
SALT = "torch-otel-gateway"  # fleet/gateway.yaml's share-of-the-rest hash_salt
NODES = {"a": [0, 1], "b": [2]}


class RemoteWritePrometheus(Prometheus):
    """Prometheus taking remote write, scraping nothing."""

    def flags(self) -> list[str]:
        return [*super().flags(), "--web.enable-remote-write-receiver"]

    @property
    def write_url(self) -> str:
        return f"{self.url}/api/v1/write"


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def share_keeps(trace_id: str, percent: float) -> bool:
    """The tail sampler's probabilistic policy: FNV-1a of salt and trace id at most the percentage of 2^64 - 1."""
    threshold = int(Decimal(2**64 - 1) * Decimal(str(percent)) / 100)
    return fnv1a64(SALT.encode() + bytes.fromhex(trace_id)) <= threshold


def kept_because(spans: list[dict[str, Any]]) -> list[str]:
    """Which of the gateway's policies keep a trace, read from the spans the ranks exported."""
    why = []
    if any(s.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR") for s in spans):
        why.append("failed-compiles")
    if any(s["attrs"].get("torch.compile.recompile_limit_exceeded") is True for s in spans):
        why.append("recompile-limit-hits")
    start = min(int(s["startTimeUnixNano"]) for s in spans)
    end = max(int(s["endTimeUnixNano"]) for s in spans)
    if end - start >= SLOW_COMPILE_MS * 1_000_000:
        why.append("slow-compiles")
    if any(s["attrs"].get("torch.compile.is_recompile") is True for s in spans):
        why.append("recompiles")
    if any("torch.compile.sampled_because" in s["attrs"] for s in spans):
        why.append("kept-by-rank-sampler")
    if any(s["attrs"].get("torch.startup.end") in ("step", "forward", "ready", "exit") for s in spans):
        why.append("start-ups")
    if not why and share_keeps(spans[0]["traceId"], ROUTINE_PERCENT):
        why.append("share-of-the-rest")
    return why


class Watch:
    """Polls Jaeger in the background: when each trace id, and each span of it, was first seen there."""

    def __init__(self, jaeger: Jaeger, since_ns: int) -> None:
        self.jaeger, self.since_ns = jaeger, since_ns
        self.first_seen: dict[str, float] = {}
        self.spans_seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                counts: dict[str, int] = defaultdict(int)
                for s in self.jaeger.spans(SERVICE, self.since_ns):
                    counts[s["traceId"]] += 1
                now = time.time()
                for t, n in counts.items():
                    self.first_seen.setdefault(t, now)
                    self.spans_seen[t] = n
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def launcher(node: str, ranks: list[int], agent_port: int, rdzv_port: int, tmp: Path) -> subprocess.Popen[bytes]:
    env = clean_env(
        {
            "OTEL_SERVICE_NAME": SERVICE,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{agent_port}",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "TORCH_OTEL_TRACES_FILE": str(tmp / "spans-{rank}.jsonl"),
            "GO_DIR": str(tmp / "go"),
            "SLOW_S": str(SLOW_COMPILE_MS / 1000 + 2),
            "ODD_RANK": "2",
            "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
            "TORCH_OTEL_DETAIL_RANKS": "all",  # every rank records the heavy histograms: the gateway sums three
        }
    )
    argv = [
        str(Path(sys.executable).parent / "torch-otel"),
        "run",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        str(len(ranks)),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{rdzv_port}",
        "--rdzv-id",
        "fleet-test",
        str(WORKLOADS / "fleet.py"),
    ]
    log = (tmp / f"node-{node}.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def settled_spans(tmp: Path) -> list[dict[str, Any]]:
    """Every span the ranks wrote to their spans files, once the files have stopped growing (their exporter batches)."""
    sizes: list[int] = []
    while len(sizes) < 3 or len(set(sizes[-3:])) > 1:
        time.sleep(0.5)
        sizes.append(sum(p.stat().st_size for p in tmp.glob("spans-*.jsonl")))
    return [s for p in sorted(tmp.glob("spans-*.jsonl")) for s in read_otlp_json_spans(p)]


def resolved(agents: Any, gateways: int) -> None:
    """Wait until every agent's resolver lists ``gateways`` gateways, and one more interval: each agent has two
    load-balancing exporters resolving on their own, and reports one number for both. (Go rereads /etc/hosts at most
    every 5 s.) A Kubernetes preStop hook waits a fixed time for the same."""
    gauge = "otelcol_loadbalancer_num_backends"
    wait_until(lambda: all(a.counter(gauge) == gateways for a in agents), 60, f"the agents to resolve {gateways} gateways")
    time.sleep(DNS_INTERVAL_S + 1)


def by_trace(spans: list[dict[str, Any]], since_s: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    """Spans by trace id; ``since_s``: only the traces that ended after it."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        out[s["traceId"]].append(s)
    return {t: ss for t, ss in out.items() if max(int(s["endTimeUnixNano"]) for s in ss) / 1e9 > since_s}


def compiles_by_kind_and_status(spans: list[dict[str, Any]], by_rank: bool = False) -> dict[tuple[str, ...], int]:
    """The compiles the ranks' spans record (their roots), counted by kind and status (and rank)."""
    out: dict[tuple[str, ...], int] = defaultdict(int)
    for s in spans:
        a = s["attrs"]
        if "torch.compile.kind" in a and not s.get("parentSpanId") and a["torch.compile.kind"] != "runtime":
            key = (a["torch.compile.kind"], "failed" if "error.type" in a else "ok")
            out[(str(a["torch.distributed.rank"]), *key) if by_rank else key] += 1
    return dict(out)


def by_kind_and_status(result: list[dict[str, Any]], by_rank: bool = False) -> dict[tuple[str, ...], int]:
    """A Prometheus vector by (kind, status) (and rank), its zero samples left out."""
    labels = ("rank", "kind", "status") if by_rank else ("kind", "status")
    return {tuple(r["metric"][k] for k in labels): round(float(r["value"][1])) for r in result if float(r["value"][1])}


def agent_sets(port: int) -> dict[str, Any]:
    """The agents' --set: the gateways' port, and a resolver interval short enough for a test."""
    sets: dict[str, Any] = {}
    for exporter in ("load_balancing/traces", "load_balancing/metrics"):
        sets[f"exporters::{exporter}::resolver::dns::port"] = yaml_flow(str(port))  # a YAML string, as the resolver wants
        sets[f"exporters::{exporter}::resolver::dns::interval"] = f"{DNS_INTERVAL_S}s"
    return sets


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The whole pipeline and the job, run once; what the tests read of it."""
    collector_binaries()
    tmp = tmp_path_factory.mktemp("fleet")
    (tmp / "go").mkdir()
    since = time.time_ns()
    with contextlib.ExitStack() as stack:
        jaeger = stack.enter_context(Jaeger(receivers=["gw1", "gw2"]))
        prom = stack.enter_context(RemoteWritePrometheus([]))
        port = free_port()
        gateways = [
            stack.enter_context(
                collector(
                    "fleet/gateway.yaml",
                    name,
                    otlp_host=address,
                    grpc_port=port,
                    env={
                        "TEMPO_ENDPOINT": jaeger.otlp(name),
                        "PROMETHEUS_REMOTE_WRITE_URL": prom.write_url,
                        "SLOW_COMPILE_MS": str(SLOW_COMPILE_MS),
                        "ROUTINE_TRACES_PERCENT": str(ROUTINE_PERCENT),
                    },
                )
            )
            for name, address in GATEWAYS.items()
        ]
        dns = HostsFile(tmp / "hosts", DNS_NAME)
        dns.resolve(list(GATEWAYS.values()))
        agents = {
            node: stack.enter_context(
                collector(
                    "fleet/agent.yaml", f"agent-{node}", sets=agent_sets(port), env={"GATEWAY_HOSTNAME": DNS_NAME}, wrap=dns.wrap
                )
            )
            for node in NODES
        }
        watch = Watch(jaeger, since)
        stack.callback(watch.stop)
        rdzv = free_port()
        procs = [launcher(node, ranks, agents[node].port("grpc::endpoint"), rdzv, tmp) for node, ranks in NODES.items()]
        logs = [tmp / f"node-{node}.log" for node in NODES]

        def phase(p: str) -> None:
            def all_done() -> bool:
                assert all(proc.poll() is None for proc in procs), "\n".join(lg.read_text()[-3000:] for lg in logs)
                text = "".join(lg.read_text(errors="replace") for lg in logs)
                return all(f"rank {r} {p}" in text for r in range(3))

            wait_until(all_done, 240, f"every rank to reach {p!r}")

        times: dict[str, float] = {}
        try:
            (tmp / "go" / "a").touch()
            phase("phase a")
            # Before any gateway moves: the by-job sum of the ranks' compile-duration histograms equals the count of
            # the compiles the ranks made, by kind and status (their root spans).
            want_by_job = compiles_by_kind_and_status(settled_spans(tmp))
            summed = f'sum by (kind, status) (torch_compile_frame_duration_seconds_count{{job="{SERVICE}"}})'
            with contextlib.suppress(AssertionError):
                wait_until(lambda: by_kind_and_status(prom.query(summed)) == want_by_job, 60, "the by-job sums")
            got_by_job = by_kind_and_status(prom.query(summed))
            # A rolling restart of gateway 2, as Kubernetes does it: the pod leaves the headless service's records,
            # its preStop hook waits while the agents re-resolve, then it gets SIGTERM (it decides and sends what it
            # holds, and takes no more). It comes back, and joins the records once ready.
            times["left_dns"] = time.time()
            dns.resolve([GATEWAYS["gw1"]])
            resolved(agents.values(), 1)
            times["stop"] = time.time()
            gateways[1].stop()
            times["stopped"] = time.time()
            (tmp / "go" / "b").touch()
            phase("phase b")
            # it stays down until phase b's kept traces are in Jaeger: the agents have sent them while it was out
            out = by_trace(settled_spans(tmp), since_s=times["stop"])
            out_kept = {t for t, spans in out.items() if kept_because(spans)}
            wait_until(lambda: all(watch.spans_seen.get(t, 0) >= len(out[t]) for t in out_kept), 60, "phase b's kept traces")
            times["out_kept"] = len(out_kept)
            gateways[1].start()
            dns.resolve(list(GATEWAYS.values()))
            times["started"] = time.time()
            resolved(agents.values(), 2)  # the agents see it again
            times["back"] = time.time()
            (tmp / "go" / "c").touch()
            phase("HOLDING")
            truth = settled_spans(tmp)
            traces = by_trace(truth)
            expected = {t: kept_because(spans) for t, spans in traces.items()}
            kept = {t for t, why in expected.items() if why}

            def arrived() -> bool:
                return all(watch.spans_seen.get(t, 0) >= len(traces[t]) for t in kept)

            with contextlib.suppress(AssertionError):
                wait_until(arrived, 120, "every kept trace whole in Jaeger")
            time.sleep(3)  # anything that should not be there has had time to arrive too
            stored = jaeger.spans(SERVICE, since)
            # metrics: the last export of every rank has reached Prometheus through a gateway
            prom.wait_for(f'count(torch_compile_recompile_limit_hits_total{{job="{SERVICE}"}} == 1) == 3', 60)
            prom.wait_for(f'count(torch_compile_cache_requests_total{{job="{SERVICE}"}}) > 0', 60)
            time.sleep(3)
            queries = {(d, title, expr): prom.query(substitute(expr, ".*", SERVICE)) for d, title, expr in all_prom_targets()}
            # Every rank's own series, through the per-rank pipeline, unchanged.
            per_rank = f'sum by (rank, kind, status) (torch_compile_compiles_total{{job="{SERVICE}"}})'
            want_per_rank = compiles_by_kind_and_status(truth, by_rank=True)
            with contextlib.suppress(AssertionError):
                wait_until(
                    lambda: by_kind_and_status(prom.query(per_rank), by_rank=True) == want_per_rank, 60, "every rank's compiles"
                )
            yield {
                "by_job": (got_by_job, want_by_job),
                "per_rank": (by_kind_and_status(prom.query(per_rank), by_rank=True), want_per_rank),
                "traces": traces,
                "expected": expected,
                "kept": kept,
                "stored": stored,
                "first_seen": dict(watch.first_seen),
                "times": times,
                "gateways": gateways,
                "agents": agents,
                "jaeger": jaeger,
                "queries": queries,
                "prom": prom,
            }
        except BaseException:
            for c in [jaeger, *gateways, *agents.values()]:
                print(f"--- {c.name} complained:", *c.complaints()[-20:], sep="\n")
            raise
        finally:
            (tmp / "go" / "release").touch()
            for name in "abc":
                (tmp / "go" / name).touch()
            for proc in procs:
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
            for proc, lg in zip(procs, logs, strict=True):
                assert proc.returncode == 0, lg.read_text(errors="replace")[-4000:]


def _by_trace(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        out[s["traceId"]].append(s)
    return out


def _describe(spans: list[dict[str, Any]]) -> str:
    """A trace in one line, for a failure's message."""
    root = min(spans, key=lambda s: int(s["startTimeUnixNano"]))
    took = (max(int(s["endTimeUnixNano"]) for s in spans) - int(root["startTimeUnixNano"])) / 1e9
    a = root["attrs"]
    return f"{root['traceId']} {root['name']} {a.get('torch.compile.id')} rank {a.get('torch.distributed.rank')} {took:.2f}s {kept_because(spans)}"


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    from tests.servers import otlp_value

    return {a["key"]: otlp_value(a["value"]) for a in span.get("attributes", [])}


def test_every_kept_trace_arrives_whole_once_through_one_gateway(fleet):
    traces, kept, stored = fleet["traces"], fleet["kept"], _by_trace(fleet["stored"])
    assert set(stored) == kept, (
        f"missing {[_describe(traces[t]) for t in kept - set(stored)]}, not to be kept {[_describe(traces[t]) for t in set(stored) - kept]}"
    )
    for t in kept:
        sent = {s["spanId"]: s for s in traces[t]}
        got = stored[t]
        ids = [s["spanId"] for s in got]
        assert len(ids) == len(set(ids)), f"{t}: a span stored twice"
        assert set(ids) == set(sent), f"{t}: missing {set(sent) - set(ids)}"
        for s in got:
            parent = s.get("parentSpanId")
            assert not parent or parent in sent or sent[s["spanId"]].get("parentSpanId") == parent, f"{t}: orphan {s['name']}"
            assert s["name"] == sent[s["spanId"]]["name"]
            assert len(s.get("events", [])) == len(sent[s["spanId"]].get("events", [])), f"{t}: {s['name']}'s events"
            assert {k: v for k, v in _attrs(s).items() if k != "test.via"}.keys() == sent[s["spanId"]]["attrs"].keys()
        via = {_attrs(s)["test.via"] for s in got}
        assert len(via) == 1, f"{t}'s spans came through both gateways: {via}"


def test_the_traces_an_sre_needs_are_kept_and_the_routine_ones_thinned(fleet):
    traces, expected = fleet["traces"], fleet["expected"]
    roots = {
        t: r for t, spans in traces.items() for r in spans if "torch.compile.kind" in r["attrs"] and not r.get("parentSpanId")
    }
    # each rank's start-up: a trace of its own, kept whole on every rank
    startups = {t: r for t, spans in traces.items() for r in spans if r["name"] == "torch.startup"}
    assert len(startups) == 3, sorted(r["attrs"] for r in startups.values())
    assert all(t in fleet["kept"] for t in startups), "every rank's start-up"
    kinds: dict[str, set[str]] = defaultdict(set)
    for t, why in expected.items():
        for w in why:
            kinds[w].add(t)
    # the job made every kind of trace the gateways are written to keep
    assert kinds["failed-compiles"] and kinds["recompile-limit-hits"] and kinds["slow-compiles"] and kinds["recompiles"]
    # the odd rank's compiles: those of rank 2 that no other rank made (its recompile of routine_c0)
    made: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in roots.values():
        a = r["attrs"]
        made[(a.get("code.function.name"), a["torch.compile.id"])].add(str(a.get("torch.distributed.rank")))
    odd = [t for t, r in roots.items() if made[(r["attrs"].get("code.function.name"), r["attrs"]["torch.compile.id"])] == {"2"}]
    assert odd and all(t in fleet["kept"] for t in odd), "the odd rank's compiles"
    routine = [t for t, why in expected.items() if not why or why == ["share-of-the-rest"]]
    share = [t for t in routine if expected[t]]
    assert 0 < len(share) < len(routine), (len(share), len(routine))  # thinned, by trace id, as documented
    # the gateways' own count of their decisions agrees (gateway 2's counters restarted with it)
    sampled = sum(
        g.counter("otelcol_processor_tail_sampling_global_count_traces_sampled", sampled="true") for g in fleet["gateways"]
    )
    assert 0 < sampled <= len(fleet["kept"])


def test_resource_attributes_survive(fleet):
    stored = fleet["stored"]
    ranks = defaultdict(set)
    for s in stored:
        r = s["resource"]
        assert r["service.name"] == SERVICE
        assert r["torch.elastic.run_id"] == "fleet-test"
        assert r["host.name"] and r["torch.distributed.world_size"] == 3
        ranks[r["torch.distributed.rank"]].add(r["process.pid"])
    assert set(ranks) == {0, 1, 2} and all(len(p) == 1 for p in ranks.values())


def test_a_rolling_restart_of_a_gateway_moves_its_traces_and_loses_none(fleet):
    """Gateway 2 left the agents' DNS records, was stopped and started again, and rejoined: while it was out, every
    kept trace went through gateway 1; once back, it took its share again. Nothing was lost or split (test above)."""
    times, first_seen, stored = fleet["times"], fleet["first_seen"], _by_trace(fleet["stored"])
    via = {t: _attrs(spans[0])["test.via"] for t, spans in stored.items()}

    def ended(t: str) -> float:
        return max(int(s["endTimeUnixNano"]) for s in fleet["traces"][t]) / 1e9

    out = [t for t in stored if times["stop"] < ended(t) < times["started"]]
    assert len(out) == times["out_kept"]
    after = [t for t in stored if ended(t) > times["back"]]
    assert out and {via[t] for t in out} == {"gw1"}, (
        "a trace went to the gateway that had left: "
        + str([(round(ended(t) - times["stop"], 1), round(times["started"] - ended(t), 1), via[t]) for t in out])
        + str(times)
    )
    # Trace ids are spread by hash: with phase c's 12 routine frames (about 6 kept) one gateway took them all in a CI
    # run. Now it has 36, about 18 kept, and the recompile: that happens by chance about once in 100,000 runs.
    shares = Counter(via[t] for t in after)
    assert after and set(shares) == {"gw1", "gw2"}, f"after gateway 2 came back, the kept traces went through {shares}"
    delays = sorted(first_seen[t] - ended(t) for t in stored)
    print(
        f"kept {len(stored)} traces; from a compile's end to its trace in Jaeger: median {delays[len(delays) // 2]:.1f} s, "
        f"max {delays[-1]:.1f} s (Jaeger polled every 0.5 s)"
    )


def test_every_ranks_numbers_and_their_sum_over_the_job_are_the_ranks_own(fleet):
    got, want = fleet["per_rank"]
    assert got == want
    got, want = fleet["by_job"]
    assert got == want, "the gateway's sum over the ranks (cumulative_to_delta ... delta_to_cumulative)"


def test_metrics_through_the_gateways_feed_every_dashboard_panel(fleet):
    empty = [f"{d}: {title}: {expr}" for (d, title, expr), result in fleet["queries"].items() if not result]
    assert not empty, "\n".join(empty)
    prom = fleet["prom"]
    ranks = {r["metric"]["rank"] for r in prom.query(f'torch_compile_compiles_total{{job="{SERVICE}"}}')}
    assert ranks == {"0", "1", "2"}
    # the two heavy histograms are summed over the job's ranks: one series per label set, no rank
    summed = prom.query(f'torch_compile_phase_duration_seconds_count{{job="{SERVICE}"}}')
    assert summed and all("rank" not in r["metric"] and "host_name" not in r["metric"] for r in summed)


def test_no_collector_complains(fleet):
    for c in [*fleet["gateways"], *fleet["agents"].values()]:
        assert not c.complaints(), f"{c.name}:\n" + "\n".join(c.complaints())
    jaeger = [ln for ln in fleet["jaeger"].complaints() if "ui assets not embedded" not in ln]
    assert not jaeger, "\n".join(jaeger)
