"""A job of thousands of ranks, simulated, against a real Prometheus running the shipped rules unchanged.

    .venv/bin/python bench/fleet.py [--sizes 1024,4096] [--detail-ranks all,rank0] [--out bench/fleet_results.json]

About 13 minutes for both sizes and both policies on 2 cores. For each size and detail-ranks policy:

1. A server process (this file, ``--serve``) holds every simulated rank's exposition as bytes, built
   once by :func:`rank_exposition`: the series a real rank produced (a real rank's ``TORCH_TRACE``
   log replayed through the bridge's own metrics path), relabelled per rank. One asyncio server on
   one 127.0.0.1 port serves all ranks, one path each (``/rank/N``); only the fingerprint lines are
   rebuilt when they change.
2. Debian's ``prometheus`` scrapes every rank as its own target (``__metrics_path__`` and
   ``instance`` set per target, ``job`` from the scrape config) and evaluates
   ``grafana/alerts/torch-compile-rules.yml`` as shipped. Only scrape and evaluation intervals are
   set here (15 s each by default).
3. Compiles arrive: every rank steps its fingerprints through the same values (all ranks at once;
   Prometheus's scrapes, spread over the interval, see them over up to one interval). Then one odd
   rank compiles something the others do not (a recompile, which misses the cache and adds a graph).
   /api/v1/alerts is polled every second: the time from the odd rank's change to
   TorchCompileRankDivergence pending and firing, and the ranks it names.
4. Measured: series in the head, Prometheus's RSS and CPU, scrape durations, each rule's and each
   group's evaluation time (/api/v1/rules, every evaluation seen), and every dashboard panel's
   PromQL timed through /api/v1/query (3 runs each, median) with $job, $rank=.* and
   $__rate_interval=1m substituted as Grafana would.

Writes ``bench/fleet_results.json`` and prints a markdown table. Nothing here asserts a number.
Every process it starts is stopped on exit, Ctrl-C and errors included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

TRACE = ROOT / "tests" / "data" / "cold-cache-cpp-3-ranks" / "dedicated_log_torch_trace_rank_0.log.gz"
RULES = ROOT / "grafana" / "alerts" / "torch-compile-rules.yml"
DASHBOARDS = ROOT / "grafana" / "dashboards"
JOB = "torch"
RUN_ID = "fleet-sim"
FP = "torch_compile_rank_fingerprint"
ALERT = "TorchCompileRankDivergence"
ASPECTS = ("compiles", "cache", "collectives", "graphs")
POLICIES = ("all", "rank0")
RANKS_PER_NODE = 8  # instance = node<rank // 8>:<9464 + rank % 8>, as 8 ranks per host would be scraped

# Seconds after every rank's series are in: compiles arrive on every rank twice, then on the odd rank alone.
SHARED_STEPS_AT = (15.0, 45.0)
ODD_AT = 60.0
ALERT_TIMEOUT = 180.0

# --------------------------------------------------------------------------------------------------
# What one simulated rank serves
# --------------------------------------------------------------------------------------------------

_MASK = (1 << 53) - 1


def _hash53(text: str) -> int:
    """As torch_otel._divergence folds a compile's facts (53-bit blake2b): fingerprints look like real ones."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "big") & _MASK


@functools.lru_cache(maxsize=4)
def _real_rank_text(trace: str, detail: bool = True) -> str:
    """A real rank's /metrics: its TORCH_TRACE log replayed through the bridge's own metrics path.

    ``detail``: served as a detail rank (every series), else as a further rank (the bridge's bounded set).
    """
    from prometheus_client import CollectorRegistry, generate_latest

    from torch_otel._metrics import CompileMetrics, PrometheusBackend
    from torch_otel._ranks import RankSet
    from torch_otel._replay import ReplayStats, replay_file

    reg = CollectorRegistry()
    metrics = CompileMetrics([PrometheusBackend(reg)], run_id=RUN_ID, detail_ranks=RankSet("all" if detail else "none"))
    replay_file(Path(trace), [metrics], ReplayStats())
    return generate_latest(reg).decode()


_RANK_LABEL = re.compile(r'([{,])rank="[^"]*"')
_ASPECT_LABEL = re.compile(r'aspect="([^"]*)"')


def _sample_name(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0]


def _fmt(value: float) -> str:
    return repr(float(value))  # as prometheus_client writes a float; exact below 2**53


def rank_exposition(
    rank: int,
    world: int,
    detail_ranks: str = "all",
    fingerprints: dict[str, float] | None = None,
    trace: Path = TRACE,
) -> str:
    """The text a simulated rank ``rank`` of a ``world``-rank job serves on /metrics.

    The series a real rank produced (``trace`` replayed through the bridge's metrics path), with its
    ``rank`` label set to ``rank``. ``detail_ranks``: ``all`` (every rank serves everything:
    ``TORCH_OTEL_DETAIL_RANKS=all``) or ``rank0`` (the default: rank 0 serves everything, the others the bridge's
    bounded set). ``fingerprints``:
    the value of ``torch_compile_rank_fingerprint`` per aspect (default: the real rank's). The
    fingerprint lines must stay one per aspect, in this format: the server rebuilds only them.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a world of {world}")
    if detail_ranks not in POLICIES:
        raise ValueError(f"detail_ranks={detail_ranks!r}: one of {', '.join(POLICIES)}")
    detail = detail_ranks == "all" or rank == 0
    families: list[tuple[list[str], list[str]]] = []  # (comment lines, sample lines) per metric family
    for line in _real_rank_text(str(trace), detail).splitlines():
        if line.startswith("#"):
            if line.startswith("# HELP") or not families or families[-1][1]:
                families.append(([], []))
            families[-1][0].append(line)
            continue
        if not line.strip():
            continue
        name = _sample_name(line)
        line = _RANK_LABEL.sub(lambda m: f'{m.group(1)}rank="{rank}"', line)
        if name == FP and fingerprints is not None:
            m = _ASPECT_LABEL.search(line)
            assert m is not None, line
            line = f"{line.rsplit(' ', 1)[0]} {_fmt(fingerprints[m.group(1)])}"
        if not families:
            families.append(([], []))
        families[-1][1].append(line)
    out = [line for comments, samples in families if samples for line in (*comments, *samples)]
    return "\n".join(out) + "\n"


def base_fingerprints(trace: Path = TRACE) -> dict[str, int]:
    """The real rank's fingerprints: where every simulated rank starts."""
    out = {}
    for line in _real_rank_text(str(trace)).splitlines():
        if line.startswith(FP + "{"):
            m = _ASPECT_LABEL.search(line)
            assert m is not None
            out[m.group(1)] = int(float(line.rsplit(" ", 1)[1]))
    assert set(out) == set(ASPECTS), out
    return out


def fingerprints_at(base: dict[str, int], step: int, odd: bool) -> dict[str, float]:
    """Fingerprints after ``step`` more frame compiles (each a cache hit, one graph, no collectives).

    ``odd``: the rank also compiled something the others did not: a recompile of frame 0 (``0/1``),
    which missed the caches and produced one more graph. Folded as the bridge folds (hash sums mod 2**53).
    """
    v = dict(base)
    compiles = [(f"{k}/0", "fx_graph:hit aot_autograd:hit") for k in range(1, step + 1)]
    if odd:
        compiles.append(("0/1", "fx_graph:miss aot_autograd:miss"))
    for key, cache in compiles:
        v["compiles"] = (v["compiles"] + _hash53(key)) & _MASK
        v["cache"] = (v["cache"] + _hash53(f"{key} {cache}")) & _MASK
        v["graphs"] += 1
    return {k: float(x) for k, x in v.items()}


# --------------------------------------------------------------------------------------------------
# The server process: every rank's exposition on one port, one path per rank
# --------------------------------------------------------------------------------------------------


class _Fleet:
    def __init__(self, world: int, policy: str, trace: Path) -> None:
        self.world = world
        self.base = base_fingerprints(trace)
        self.head: list[bytes] = []
        self.tail: list[bytes] = []
        self.fp_prefix: list[list[tuple[str, str]]] = []  # per rank: (aspect, line up to its value)
        self.series: list[int] = []
        for rank in range(world):
            text = rank_exposition(rank, world, policy, None, trace)
            lines = text.splitlines()
            idx = [i for i, line in enumerate(lines) if line.startswith(FP + "{")]
            assert idx == list(range(idx[0], idx[0] + len(ASPECTS))), "fingerprint lines must be consecutive"
            self.head.append(("\n".join(lines[: idx[0]]) + "\n").encode())
            self.tail.append(("\n".join(lines[idx[-1] + 1 :]) + "\n").encode())
            prefixes = []
            for i in idx:
                m = _ASPECT_LABEL.search(lines[i])
                assert m is not None
                prefixes.append((m.group(1), lines[i].rsplit(" ", 1)[0]))
            self.fp_prefix.append(prefixes)
            self.series.append(sum(1 for line in lines if line and not line.startswith("#")))
        self.requests = 0
        self.bytes = 0
        self.set_state(0, -1)

    def set_state(self, step: int, odd: int) -> None:
        shared = fingerprints_at(self.base, step, False)
        odd_fp = fingerprints_at(self.base, step, True)
        fp = []
        for rank in range(self.world):
            values = odd_fp if rank == odd else shared
            fp.append("".join(f"{p} {_fmt(values[a])}\n" for a, p in self.fp_prefix[rank]).encode())
        self.fp = fp  # one assignment: a scrape sees the old list or the new one
        self.step, self.odd = step, odd

    def body(self, rank: int) -> list[bytes]:
        return [self.head[rank], self.fp[rank], self.tail[rank]]


def _response(status: str, ctype: str, parts: list[bytes]) -> list[bytes]:
    n = sum(len(p) for p in parts)
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {n}\r\n\r\n".encode()
    return [head, *parts]


class _Http(asyncio.Protocol):
    fleet: _Fleet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            self.transport.writelines(self._handle(parts[1].decode() if len(parts) > 1 else "/"))  # type: ignore[attr-defined]

    def _handle(self, target: str) -> list[bytes]:
        f = self.fleet
        url = urllib.parse.urlsplit(target)
        if url.path.startswith("/rank/"):
            try:
                body = f.body(int(url.path[6:]))
            except (ValueError, IndexError):
                return _response("404 Not Found", "text/plain", [b"no such rank\n"])
            f.requests += 1
            f.bytes += sum(len(b) for b in body)
            return _response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
        if url.path == "/control":
            q = dict(urllib.parse.parse_qsl(url.query))
            f.set_state(int(q.get("step", f.step)), int(q.get("odd", f.odd)))
            return _response("200 OK", "application/json", [json.dumps({"at": time.time()}).encode()])
        if url.path == "/stats":
            t = os.times()
            stats = {
                "requests": f.requests,
                "bytes": f.bytes,
                "cpu_s": t.user + t.system,
                "series_total": sum(f.series),
                "series_rank0": f.series[0],
                "series_further": f.series[-1],
                "bytes_rank0": sum(len(b) for b in f.body(0)),
                "bytes_further": sum(len(b) for b in f.body(f.world - 1)),
            }
            return _response("200 OK", "application/json", [json.dumps(stats).encode()])
        return _response("404 Not Found", "text/plain", [b"not found\n"])


def serve(world: int, policy: str, trace: Path) -> None:
    """Run the fleet's server until killed; print ``PORT n`` once every rank's bytes are built."""
    _Http.fleet = _Fleet(world, policy, trace)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Http, "127.0.0.1", 0, backlog=4096)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


# --------------------------------------------------------------------------------------------------
# Processes, ports, HTTP
# --------------------------------------------------------------------------------------------------

_CHILDREN: list[subprocess.Popen[bytes]] = []


def _stop(proc: subprocess.Popen[bytes], grace: float = 60) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc in _CHILDREN:
        _CHILDREN.remove(proc)


def _stop_all() -> None:
    for proc in reversed(list(_CHILDREN)):
        _stop(proc, 20)


def _free_port() -> int:
    """A port below the kernel's ephemeral range that nobody listens on now (as tests/servers.py picks them)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(15000, max(15001, low - 1))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def http_get(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        return r.read()


class Prom:
    def __init__(self, workdir: Path, world: int, server_port: int, scrape: str, evaluation: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit("prometheus is not installed (apt-get install prometheus)")
        targets = []
        for rank in range(world):
            node, slot = divmod(rank, RANKS_PER_NODE)
            labels = {"__metrics_path__": f"/rank/{rank}", "instance": f"node{node:04d}:{9464 + slot}"}
            targets.append({"targets": [f"127.0.0.1:{server_port}"], "labels": labels})
        config = {
            "global": {"scrape_interval": scrape, "evaluation_interval": evaluation},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": JOB, "static_configs": targets}],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        for attempt in range(3):
            self.port = _free_port()
            self.log = (workdir / f"prometheus{attempt}.log").open("wb")
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / f'data{attempt}'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=self.log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            _CHILDREN.append(self.proc)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    http_get(f"{self.url}/-/ready", timeout=1)
                    return
                except OSError:
                    time.sleep(0.2)
            _stop(self.proc)
        raise RuntimeError(f"prometheus did not start: {(workdir / 'prometheus2.log').read_text()[-2000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, timeout: float = 120, **params: str) -> Any:
        body = json.loads(http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout))
        if body.get("status") != "success":
            raise RuntimeError(body)
        return body["data"]

    def scalar(self, promql: str) -> float | None:
        result = self.api("query", query=promql)["result"]
        return float(result[0]["value"][1]) if result else None

    def self_metrics(self, names: tuple[str, ...]) -> dict[str, float]:
        """Prometheus's own /metrics: the named series summed over their label sets."""
        out: dict[str, float] = {}
        for line in http_get(f"{self.url}/metrics").decode().splitlines():
            if line.startswith("#"):
                continue
            name = _sample_name(line)
            if name == "prometheus_target_interval_length_seconds" and 'quantile="0.99"' in line:
                out["scrape_interval_p99"] = max(out.get("scrape_interval_p99", 0.0), float(line.rsplit(" ", 1)[1]))
            if name in names:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def proc_status(self) -> dict[str, float]:
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
        return out


SELF_METRICS = (
    "prometheus_tsdb_head_series",
    "prometheus_tsdb_head_chunks",
    "process_resident_memory_bytes",
    "go_memstats_heap_inuse_bytes",
    "process_cpu_seconds_total",
    "prometheus_rule_group_iterations_missed_total",
    "prometheus_target_scrapes_exceeded_sample_limit_total",
    "prometheus_target_scrape_pool_exceeded_target_limit_total",
)


# --------------------------------------------------------------------------------------------------
# One run: a size and a policy
# --------------------------------------------------------------------------------------------------


def _start_server(world: int, policy: str, trace: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    log = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", str(world), "--detail-ranks", policy, "--trace", str(trace)],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    _CHILDREN.append(proc)
    assert proc.stdout is not None
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(300)
    if not line or not line[0].startswith(b"PORT "):
        _stop(proc)
        raise RuntimeError(f"the fleet server did not start: {(workdir / 'server.log').read_text()[-2000:]}")
    return proc, int(line[0].split()[1])


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rfc3339(ts: str) -> float:
    from datetime import datetime

    ts = re.sub(r"(\.\d{6})\d+", r"\1", ts.replace("Z", "+00:00"))
    return datetime.fromisoformat(ts).timestamp()


def _dashboard_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        dash = json.loads(path.read_text())
        panels = [p2 for p in dash["panels"] for p2 in (p, *p.get("panels", []))]
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t and t.get("datasource", p.get("datasource", {})).get("uid") == "${datasource}":
                    out.append((path.stem, p["title"], t["expr"]))
        for v in dash["templating"]["list"]:
            q = v.get("query")
            if isinstance(q, dict) and "label_values" in q.get("query", ""):
                out.append((path.stem, f"variable ${v['name']}", q["query"]))
    return out


def _substitute(expr: str) -> str:
    """What Grafana sends for job=torch, rank=All (.*), with $__rate_interval at 4x a 15 s scrape."""
    out = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "1h")
    return out.replace("$job", JOB).replace("$rank", ".*")


def _time_query(prom: Prom, expr: str, reps: int = 3) -> dict[str, Any]:
    expr = _substitute(expr)
    m = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
    times, n = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        if m:
            data = prom.api(f"label/{m.group(2)}/values", **{"match[]": m.group(1)})
            n = len(data)
        else:
            data = prom.api("query", query=expr)
            n = len(data["result"])
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "max_s": max(times), "result_len": n}


def _summarise(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values), "n": len(values)} if values else {}


def _machine_cpu() -> tuple[float, float]:
    """The machine's busy CPU seconds (all cores), and CPU-stall time (/proc/pressure/cpu "some", seconds)."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    busy = (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")
    stall = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        stall = int(some.rsplit("total=", 1)[1]) / 1e6
    return busy, stall


def _rule_series(evals: dict[str, float], ready: float) -> list[tuple[float, float]]:
    """{lastEvaluation: seconds} -> [(evaluation time after Prometheus was ready, seconds)], in order."""
    return sorted((_rfc3339(k) - ready, v) for k, v in evals.items())


def run_one(world: int, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"torch-otel-fleet-{world}-{policy}-"))
    odd = world * 3 // 4 + 1  # a rank in a node of its own, not 0
    out: dict[str, Any] = {"ranks": world, "detail_ranks": policy, "odd_rank": odd}
    tag = f"[{world} ranks, {policy}]"
    server = prom = None
    busy0, stall0 = _machine_cpu()
    wall0, self0 = time.time(), time.process_time()
    try:
        t0 = time.monotonic()
        server, sport = _start_server(world, policy, args.trace, workdir)
        out["server_build_s"] = time.monotonic() - t0
        base = f"http://127.0.0.1:{sport}"
        stats0 = json.loads(http_get(f"{base}/stats"))
        out["served"] = {k: stats0[k] for k in ("series_total", "series_rank0", "series_further", "bytes_rank0", "bytes_further")}
        print(
            f"{tag} server up in {out['server_build_s']:.1f}s: {stats0['series_total']:,} series "
            f"(rank 0 {stats0['series_rank0']}, others {stats0['series_further']})",
            flush=True,
        )
        prom = Prom(workdir, world, sport, args.scrape_interval, args.eval_interval)
        ready = time.time()
        print(f"{tag} prometheus ready on :{prom.port}", flush=True)
        # every rank's series, and the 5 series Prometheus adds per target (up, scrape_duration_seconds, ...)
        expected = stats0["series_total"] + 5 * world

        samples: list[dict[str, Any]] = []
        rule_evals: dict[tuple[str, str], dict[str, float]] = {}  # (group, rule) -> {lastEvaluation: seconds}
        group_evals: dict[str, dict[str, float]] = {}
        alert_polls: list[dict[str, Any]] = []
        steps_done = 0
        t_odd: float | None = None
        series_in_at: float | None = None
        first_pending = first_firing = None
        false_alarms: list[dict[str, Any]] = []
        cpu_mark: tuple[float, float, float] | None = None
        next_sample = 0.0
        while True:
            now = time.time()
            rel = now - ready
            # the timeline starts once every rank's series are in (or after 180 s, whatever is in by then)
            t_base = series_in_at if series_in_at is not None else (180.0 if rel >= 180 else None)
            if t_base is not None:
                while steps_done < len(SHARED_STEPS_AT) and rel >= t_base + SHARED_STEPS_AT[steps_done]:
                    steps_done += 1
                    json.loads(http_get(f"{base}/control?step={steps_done}&odd=-1"))
                if t_odd is None and rel >= t_base + ODD_AT:
                    t_odd = json.loads(http_get(f"{base}/control?step={steps_done}&odd={odd}"))["at"]
                    print(f"{tag} rank {odd} compiled something the others did not", flush=True)
            t_q = time.perf_counter()
            alerts = [a for a in prom.api("alerts")["alerts"] if a["labels"].get("alertname") == ALERT]
            poll_s = time.perf_counter() - t_q
            seen = [
                {
                    "rank": a["labels"].get("rank"),
                    "aspect": a["labels"].get("aspect"),
                    "state": a["state"],
                    "activeAt": a["activeAt"],
                }
                for a in alerts
            ]
            alert_polls.append({"t": now, "poll_s": poll_s, "alerts": seen})
            if t_odd is None:
                false_alarms.extend({"t_rel": rel, **a} for a in seen)
            elif seen:
                if first_pending is None:
                    first_pending = now
                if first_firing is None and any(a["state"] == "firing" for a in seen):
                    first_firing = now
            if now >= next_sample:
                next_sample = now + (5 if series_in_at is not None else 2)
                snap = {"t_rel": rel, **prom.self_metrics(SELF_METRICS), **prom.proc_status()}
                snap["server_cpu_s"] = _proc_cpu(server.pid)
                samples.append(snap)
                if series_in_at is None and snap.get("prometheus_tsdb_head_series", 0) >= expected:
                    series_in_at = rel
                    cpu_mark = (time.time(), snap["process_cpu_seconds_total"], snap["server_cpu_s"])
                    print(f"{tag} every rank's series in after {rel:.0f}s", flush=True)
                for g in prom.api("rules")["groups"]:
                    if g.get("lastEvaluation", "").startswith("0001"):
                        continue
                    group_evals.setdefault(g["name"], {})[g["lastEvaluation"]] = g["evaluationTime"]
                    for r in g["rules"]:
                        if not r.get("lastEvaluation", "").startswith("0001"):
                            rule_evals.setdefault((g["name"], r["name"]), {})[r["lastEvaluation"]] = r["evaluationTime"]
            if first_firing is not None and now - first_firing > 2:
                break
            if t_odd is not None and now - t_odd > ALERT_TIMEOUT:
                print(f"{tag} {ALERT} did not fire within {ALERT_TIMEOUT:.0f}s", flush=True)
                break
            time.sleep(max(0.0, 1.0 - (time.time() - now)))

        # the steady window, from every series in until the alert fired: CPU used per second
        last = samples[-1]
        if cpu_mark is not None and last["t_rel"] + ready > cpu_mark[0]:
            span = last["t_rel"] + ready - cpu_mark[0]
            out["cpu_cores_steady"] = {
                "prometheus": (last["process_cpu_seconds_total"] - cpu_mark[1]) / span,
                "server": (last["server_cpu_s"] - cpu_mark[2]) / span,
                "window_s": span,
            }
        out["series_in_s"] = series_in_at
        out["memory_steady"] = {
            k: last.get(k) for k in ("VmRSS", "VmHWM", "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
        }
        out["head_series"] = last.get("prometheus_tsdb_head_series")
        out["head_chunks"] = last.get("prometheus_tsdb_head_chunks")
        out["rule_iterations_missed"] = last.get("prometheus_rule_group_iterations_missed_total")
        out["scrape_interval_p99_s"] = last.get("scrape_interval_p99")

        # the alert
        alert: dict[str, Any] = {"false_alarms_before_odd": false_alarms[:20], "false_alarm_count": len(false_alarms)}
        if t_odd is not None:
            alert["odd_at_s"] = t_odd - ready
            alert["pending_after_s"] = None if first_pending is None else first_pending - t_odd
            alert["firing_after_s"] = None if first_firing is None else first_firing - t_odd
            after = [a for p in alert_polls if p["t"] >= t_odd for a in p["alerts"]]
            if after:
                # the evaluation that made it pending, by its own timestamp (the API shows it once that evaluation ends)
                alert["active_at_after_s"] = min(_rfc3339(a["activeAt"]) for a in after) - t_odd
            alert["ranks_named_after_odd"] = sorted({a["rank"] for a in after})
            alert["aspects_named"] = sorted({a["aspect"] for a in after})
        alert["alerts_poll_s"] = _summarise([p["poll_s"] for p in alert_polls])
        out["alert"] = alert
        print(f"{tag} alert: {json.dumps({k: v for k, v in alert.items() if 'false_alarms' not in k})}", flush=True)

        # scrapes
        out["scrapes"] = {
            "targets_up": prom.scalar(f'count(up{{job="{JOB}"}} == 1)'),
            "targets": prom.scalar(f'count(up{{job="{JOB}"}})'),
            "duration_p50_s": prom.scalar(f'quantile(0.5, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_p99_s": prom.scalar(f'quantile(0.99, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_max_2m_s": prom.scalar(f'max(max_over_time(scrape_duration_seconds{{job="{JOB}"}}[2m]))'),
            "samples_per_round": prom.scalar(f'sum(scrape_samples_scraped{{job="{JOB}"}})'),
        }

        # every dashboard query, after the alert fired (the data is in, and a few scrapes old)
        queries = []
        for dash, title, expr in _dashboard_queries():
            queries.append({"dashboard": dash, "panel": title, "expr": expr, **_time_query(prom, expr)})
        out["queries"] = queries
        by_dash: dict[str, list[float]] = {}
        for q in queries:
            by_dash.setdefault(q["dashboard"], []).append(q["median_s"])
        out["dashboards"] = {d: {**_summarise(v), "queries": len(v)} for d, v in by_dash.items()}

        # did any other rank get named, up to now (a few evaluations after the alert fired)?
        late = [a for a in prom.api("alerts")["alerts"] if a["labels"].get("alertname") == ALERT]
        alert["ranks_named_at_end"] = sorted({a["labels"].get("rank") for a in late})
        alert["states_at_end"] = sorted({a["state"] for a in late})
        alert["only_the_odd_rank"] = alert.get("ranks_named_after_odd") == [str(odd)] and alert["ranks_named_at_end"] == [
            str(odd)
        ]

        # rule evaluation times: every evaluation seen, and those that began once every series was in
        steady_from = series_in_at if series_in_at is not None else float("inf")
        out["rules"] = {}
        for (g, r), d in rule_evals.items():
            ts = _rule_series(d, ready)
            out["rules"][f"{g}/{r}"] = {
                "all": _summarise([v for _, v in ts]),
                "steady": _summarise([v for t, v in ts if t >= steady_from]),
            }
        out["groups"] = {}
        for g, d in group_evals.items():
            ts = _rule_series(d, ready)
            out["groups"][g] = {
                "all": _summarise([v for _, v in ts]),
                "steady": _summarise([v for t, v in ts if t >= steady_from]),
                "evaluations": [(round(t, 1), round(v, 4)) for t, v in ts],
            }

        end = {**prom.self_metrics(SELF_METRICS), **prom.proc_status()}
        out["memory_end"] = {
            k: end.get(k) for k in ("VmRSS", "VmHWM", "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
        }
        # the kernel updates VmHWM lazily: the peak is the larger of it and every VmRSS read
        out["memory_peak"] = max([end.get("VmHWM", 0), end.get("VmRSS", 0), *(x.get("VmRSS", 0) for x in samples)])
        out["rule_iterations_missed_end"] = end.get("prometheus_rule_group_iterations_missed_total")
        out["samples"] = samples
        stats1 = json.loads(http_get(f"{base}/stats"))
        out["server"] = {"requests": stats1["requests"], "bytes": stats1["bytes"], "cpu_s": stats1["cpu_s"]}

        # the whole run's CPU on this machine: ours (Prometheus, the server, this process) and everyone else's
        busy1, stall1 = _machine_cpu()
        wall = time.time() - wall0
        ours = _proc_cpu(prom.proc.pid) + _proc_cpu(server.pid) + time.process_time() - self0
        out["machine_cpu"] = {
            "wall_s": wall,
            "busy_cores": (busy1 - busy0) / wall,
            "ours_cores": ours / wall,
            "others_cores": max(0.0, (busy1 - busy0 - ours) / wall),
            "cpu_stall_share": (stall1 - stall0) / wall,
            "prometheus_cores": _proc_cpu(prom.proc.pid) / wall,
        }
        print(f"{tag} machine: {json.dumps({k: round(v, 2) for k, v in out['machine_cpu'].items()})}", flush=True)
        return out
    finally:
        if prom is not None:
            t0 = time.monotonic()
            _stop(prom.proc)
            out["prometheus_stop_s"] = time.monotonic() - t0
            prom.log.close()
        if server is not None:
            _stop(server)
        shutil.rmtree(workdir, ignore_errors=True)
        out["wall_s"] = time.monotonic() - t_start


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f} MiB"


def _s(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f} s"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms"


def _cols(runs: list[dict[str, Any]]) -> list[str]:
    return [f"{r['ranks']:,} ranks, {r['detail_ranks']}" for r in runs]


def _steady(d: dict[str, Any]) -> dict[str, float]:
    return d.get("steady") or d.get("all") or {}


def table(runs: list[dict[str, Any]]) -> str:
    """The main results: one column per run."""

    def row(name: str, fn: Any) -> str:
        cells = []
        for r in runs:
            try:
                cells.append(fn(r))
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                cells.append("-")
        return f"| {name} | " + " | ".join(cells) + " |"

    def grp(r: dict[str, Any], g: str) -> str:
        v = _steady(r["groups"][g])
        return f"{_ms(v.get('median'))} / {_ms(v.get('max'))}"

    def slowest(r: dict[str, Any]) -> str:
        q = max(r["queries"], key=lambda q: q["median_s"])
        return f"{_ms(statistics.median(x['median_s'] for x in r['queries']))} / {_ms(q['median_s'])} ({q['panel']})"

    rows = [
        "| | " + " | ".join(_cols(runs)) + " |",
        "|---|" + "---|" * len(runs),
        row("series per rank, rank 0 / others", lambda r: f"{r['served']['series_rank0']} / {r['served']['series_further']}"),
        row(
            "bytes per scrape, rank 0 / others",
            lambda r: f"{r['served']['bytes_rank0'] / 1024:.1f} / {r['served']['bytes_further'] / 1024:.1f} KiB",
        ),
        row("series stored (prometheus_tsdb_head_series)", lambda r: f"{r['head_series']:,.0f}"),
        row("every rank's series in, after Prometheus started", lambda r: _s(r["series_in_s"], 0)),
        row(
            "Prometheus RSS, steady / peak (VmRSS, VmHWM)",
            lambda r: f"{_mb(r['memory_steady']['VmRSS'])} / {_mb(r['memory_peak'])}",
        ),
        row("Go heap in use (steady)", lambda r: _mb(r["memory_steady"]["go_memstats_heap_inuse_bytes"])),
        row("RSS per stored series", lambda r: f"{r['memory_steady']['VmRSS'] / r['head_series']:,.0f} B"),
        row("Prometheus CPU once the series are in", lambda r: f"{r['cpu_cores_steady']['prometheus']:.2f} cores"),
        row(
            "machine over the run: busy / ours / other processes",
            lambda r: " / ".join(f"{r['machine_cpu'][k]:.2f}" for k in ("busy_cores", "ours_cores", "others_cores")) + " cores",
        ),
        row("CPU stall (/proc/pressure/cpu some)", lambda r: f"{r['machine_cpu']['cpu_stall_share']:.0%}"),
        row(
            "scrape duration p50 / p99 (last scrape of each target)",
            lambda r: f"{_ms(r['scrapes']['duration_p50_s'])} / {_ms(r['scrapes']['duration_p99_s'])}",
        ),
        row("targets up", lambda r: f"{r['scrapes']['targets_up']:,.0f} / {r['scrapes']['targets']:,.0f}"),
        row("group torch-compile, evaluation median / max", lambda r: grp(r, "torch-compile")),
        row("group torch-compile-divergence, evaluation median / max", lambda r: grp(r, "torch-compile-divergence")),
        row("rule group evaluations missed (over the interval)", lambda r: f"{r['rule_iterations_missed_end']:.0f}"),
        row("false divergence alerts while compiles arrived on every rank", lambda r: str(r["alert"]["false_alarm_count"])),
        row(
            "odd rank's compile to TorchCompileRankDivergence pending / firing (seen in /api/v1/alerts)",
            lambda r: f"{_s(r['alert']['pending_after_s'])} / {_s(r['alert']['firing_after_s'])}",
        ),
        row("... pending, by the evaluation's own timestamp (activeAt)", lambda r: _s(r["alert"]["active_at_after_s"])),
        row(
            "names the odd rank, and only it",
            lambda r: (
                ("yes" if r["alert"]["only_the_odd_rank"] else "NO: " + ",".join(r["alert"]["ranks_named_at_end"]))
                + f" ({', '.join(r['alert']['aspects_named'])})"
            ),
        ),
        row("dashboard queries: median / slowest", slowest),
        row("run's wall time", lambda r: _s(r["wall_s"], 0)),
    ]
    return "\n".join(rows)


def rules_table(runs: list[dict[str, Any]]) -> str:
    names = list(runs[0]["rules"])
    rows = ["| rule, evaluation median / max | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for n in names:
        cells = []
        for r in runs:
            v = _steady(r["rules"].get(n, {}))
            cells.append(f"{_ms(v.get('median'))} / {_ms(v.get('max'))}")
        rows.append(f"| {n.split('/', 1)[1]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def dashboards_table(runs: list[dict[str, Any]]) -> str:
    dashes = list(runs[0]["dashboards"])
    rows = ["| dashboard (queries), median / max | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for d in dashes:
        cells = [f"{_ms(r['dashboards'][d]['median'])} / {_ms(r['dashboards'][d]['max'])}" for r in runs]
        rows.append(f"| {d} ({runs[0]['dashboards'][d]['queries']}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def slowest_table(runs: list[dict[str, Any]], n: int = 5) -> str:
    """The slowest queries of the largest run, with the same query's time in the others."""
    big = max(runs, key=lambda r: (r["ranks"], r["head_series"]))
    top = sorted(big["queries"], key=lambda q: -q["median_s"])[:n]
    rows = ["| slowest queries (median of 3) | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for q in top:
        cells = []
        for r in runs:
            m = [x for x in r["queries"] if x["expr"] == q["expr"] and x["panel"] == q["panel"]]
            cells.append(_ms(m[0]["median_s"]) if m else "-")
        rows.append(f"| {q['dashboard']}: {q['panel']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _for_durations() -> dict[str, str]:
    import yaml

    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r.get("for", "0s") for g in groups for r in g["rules"] if "alert" in r}


def _prometheus_version() -> str:
    r = subprocess.run([shutil.which("prometheus") or "prometheus", "--version"], capture_output=True, text=True, check=False)
    return (r.stdout + r.stderr).splitlines()[0] if (r.stdout + r.stderr) else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--sizes", default="1024,4096", help="comma-separated numbers of ranks")
    p.add_argument("--detail-ranks", default="all,rank0", help=f"comma-separated policies: {', '.join(POLICIES)}")
    p.add_argument("--scrape-interval", default="15s")
    p.add_argument("--eval-interval", default="15s")
    p.add_argument("--trace", type=Path, default=TRACE, help="the real rank's TORCH_TRACE log every simulated rank serves")
    p.add_argument("--out", type=Path, default=HERE / "fleet_results.json")
    p.add_argument("--serve", type=int, metavar="WORLD", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.detail_ranks, args.trace)
        return 0

    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even where a shell started us with it ignored
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.detail_ranks.split(",")
    for pol in policies:
        if pol not in POLICIES:
            p.error(f"--detail-ranks: {pol!r} is not one of {', '.join(POLICIES)}")
    t0 = time.monotonic()
    runs = []
    try:
        for world in sizes:
            for pol in policies:
                runs.append(run_one(world, pol, args))
    finally:
        _stop_all()
    result = {
        "command": "python bench/fleet.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "wall_s": time.monotonic() - t0,
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "prometheus": _prometheus_version(),
        },
        "config": {
            "scrape_interval": args.scrape_interval,
            "evaluation_interval": args.eval_interval,
            "rules_file": str(RULES.relative_to(ROOT)),
            "for": _for_durations(),
            "shared_compiles_at_s": SHARED_STEPS_AT,
            "odd_rank_compiles_at_s": ODD_AT,
            "trace": str(args.trace.relative_to(ROOT)) if args.trace.is_relative_to(ROOT) else str(args.trace),
        },
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print()
    print(table(runs))
    print()
    print(rules_table(runs))
    print()
    print(dashboards_table(runs))
    print()
    print(slowest_table(runs))
    print(f"\n{len(runs)} runs in {result['wall_s']:.0f} s; {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        _stop_all()
