"""A fleet's traces through the shipped two-tier collector pipeline into Jaeger v2, measured at 1,024 and 16,384 ranks.

    .venv/bin/python -m bench.fleet.traces [--sizes 1024,16384] [--samplers off,on] [--rate 25000] [--no-saturate]
                                           [--restart-cases a,b,c,...] [--recording DIR]
                                           [--out bench/results/fleet_traces_results.json]

About 20 minutes on 2 cores. The pipeline is the one tests/test_collector_pipeline.py runs: two node agents
(collector-config/fleet/agent.yaml) load-balance by trace id over two gateways (collector-config/fleet/gateway.yaml,
tail sampling at its defaults) that send what they keep to Jaeger v2 (collector-config/jaeger.yaml), every collector
the one collector-config/build.sh builds, every file as shipped but for what one machine needs (--set: loopback
addresses, the gateways resolved through a hosts file of the agents' own; Jaeger keeps up to 2 million traces in place
of 100,000, so that nothing is evicted before it is read back).

1. **Recorded.** A real 3-rank job (``torch-otel run -- torchrun``, gloo, CPU; tests/workloads/fleet.py: a graph
   break and its backward, recompiles, a failed compile, a recompile-limit hit, compiled autograd, an inductor
   compile and a slow one on rank 0, routine frames, and one odd rank's recompile) writes every span it exports to
   ``TORCH_OTEL_TRACES_FILE``: one OTLP-JSON line per export of the SDK's batch span processor (default settings).
   It runs twice: with the SDK's default sampler (``off``) and with the bridge's rank sampler (``on``,
   ``OTEL_TRACES_SAMPLER=torch_otel_rank``: rank 0 keeps every compile, the others only their failed,
   recompile-limit, slow compiles and recompiles). ``--recording DIR`` keeps (or reuses) the two recordings.
2. **Replayed** as many ranks: each export becomes one OTLP/gRPC request of protobuf built from it once, with fresh
   trace and span ids per rank and compile (links too: a backward's link names its forward's new ids), the rank's
   own resource (service.name, torch.distributed.rank, local_rank, world_size, host.name: 8 ranks a node,
   process.pid, service.instance.id, torch.elastic.run_id) and the root's torch.distributed.rank attribute, its
   times moved so that the export's last span ends when it is sent. Synthetic rank 0 replays recorded rank 0, one
   odd rank (3/4 of the way) recorded rank 2, every other rank recorded rank 1. Ranks are in lockstep, as a
   synchronous job's are: every rank's first export, then every rank's second, ... Nodes alternate between the two
   agents. The sender is this process; its CPU is not the collectors'.
3. **Rate model.** A real cold start spreads a rank's compiles over minutes; this machine cannot carry 16,384 ranks'
   worth in real time. The replay is compressed to ``--rate`` spans per second (offered; reported as achieved), and
   what is measured is each collector's CPU seconds (/proc/<pid>/stat) for the spans it handled: spans per second
   per core, which sizing divides into a real job's rate (``sizing`` in the results). One more run at the largest
   size sends as fast as the agents take it (``--saturate``, on by default).
4. **Measured** per size and sampler: spans per second per core (agents, gateways, Jaeger), each process's peak RSS
   (VmHWM), the traces in each gateway's tail-sampling table, the share of the kept traces that arrive whole (every
   span, no duplicate, one gateway; a random sample read back by id from Jaeger's API v3, raw), the same sample's
   dropped counterparts (absent), span totals (sent, accepted by each tier, stored), and the time from a compile's
   end (its root span's end time) until its trace can be read whole from Jaeger (a sample of kept traces polled by
   id).
5. **A gateway restarted under steady load** (512 ranks, 120 traces/s; every trace kept: ROUTINE_TRACES_PERCENT=100,
   so that each trace sent is expected in Jaeger). A quarter of the traces reach the agents in two exports 2 s apart
   (the phase spans, then the root: the batch span processor's timer fired between them), so that a trace can
   straddle the event. Cases (``RESTART_CASES``): ``a`` static resolver, SIGTERM, started again 20 s later; ``b``
   DNS, a Kubernetes rolling restart (the gateway leaves the records, a preStop wait until the agents have
   re-resolved, SIGTERM, start, rejoin); ``c`` DNS, abrupt (SIGTERM and removal at once); ``c-dns5s`` the same with the
   agents resolving every 5 s; ``d`` DNS, SIGKILL (a crash; removed from the records 2 s later, as the endpoint
   controller would); ``d-static`` SIGKILL under the static resolver; ``d-static-batch1s`` the same with the
   gateways' batch timeout at 1 s; ``c-lbq`` (c) with the load_balancing exporter's own queue and retry on; not run
   by default, ``c-agentbatch1s`` and ``d-static-agentbatch1s``: (c) and ``d-static`` with the agents' batch timeout
   at 1 s. Every trace sent is read back by id: lost, partial, split over both gateways, duplicated spans; a third
   of them are polled while the load runs: delayed.

Writes ``--out`` (JSON) and prints a summary. Nothing here asserts a number. Every process it starts is stopped on
exit.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import http.client
import json
import os
import platform
import random
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from bench import RESULTS  # noqa: E402
from tests.helpers import WORKLOADS, clean_env, spans_to_file, torchrun_under_torch_otel  # noqa: E402
from tests.servers import HostsFile, Jaeger, collector, collector_binaries, free_port, wait_until, yaml_flow  # noqa: E402

GATEWAYS = {"gw1": "127.0.0.2", "gw2": "127.0.0.3"}  # the headless service's records: two loopback addresses
DNS_NAME = "gateways"
SALT = "torch-otel-gateway"  # fleet/gateway.yaml's share-of-the-rest hash_salt
SLOW_COMPILE_MS = 60000  # fleet/gateway.yaml's default
ROUTINE_PERCENT = 1.0  # fleet/gateway.yaml's default
RANKS_PER_NODE = 8
JAEGER_MAX_TRACES = 2_000_000
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


# ---------------------------------------------------------------------------------------------------------------------
# The gateway's policies, read from the spans a rank sent (as tests/test_collector_pipeline.py reads them)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


_SALT = SALT.encode()


def share_keeps(trace_id: bytes, percent: float) -> bool:
    """The probabilistic policy: FNV-1a of salt and trace id at most the percentage of 2^64 - 1."""
    if percent >= 100:
        return True
    threshold = int(Decimal(2**64 - 1) * Decimal(str(percent)) / 100)
    return fnv1a64(_SALT + trace_id) <= threshold


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {kv["key"]: next(iter(kv["value"].values())) if kv["value"] else None for kv in span.get("attributes", [])}


def policy_reasons(spans: list[dict[str, Any]]) -> list[str]:
    """The gateway policies but the probabilistic share that keep a trace of these spans."""
    why = []
    attrs = [_attrs(s) for s in spans]
    if any(s.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR") for s in spans):
        why.append("failed-compiles")
    if any(a.get("torch.compile.recompile_limit_exceeded") is True for a in attrs):
        why.append("recompile-limit-hits")
    start = min(int(s["startTimeUnixNano"]) for s in spans)
    end = max(int(s["endTimeUnixNano"]) for s in spans)
    if end - start >= SLOW_COMPILE_MS * 1_000_000:
        why.append("slow-compiles")
    if any(a.get("torch.compile.is_recompile") is True for a in attrs):
        why.append("recompiles")
    if any("torch.compile.sampled_because" in a for a in attrs):
        why.append("kept-by-rank-sampler")
    return why


# ---------------------------------------------------------------------------------------------------------------------
# OTLP protobuf, built once from the recorded OTLP-JSON and patched per rank and compile


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Any:
    """(field number, wire type, value start, value end) of each field of the message in buf[start:end]."""
    i = start
    while i < end:
        tag, i = _read_varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            _, j = _read_varint(buf, i)
        elif wt == 1:
            j = i + 8
        elif wt == 5:
            j = i + 4
        elif wt == 2:
            n, i = _read_varint(buf, i)
            j = i + n
        else:
            raise ValueError(f"protobuf wire type {wt}")
        yield num, wt, i, j
        i = j


RANK_KEY = "torch.distributed.rank"
_PLACEHOLDER = {1: 1, 2: 200, 3: 20000}  # a rank whose varint is this many bytes long
_AR8, _AR16 = np.arange(8), np.arange(16)


@dataclass
class Template:
    """Recorded spans (one export, or part of one) as ScopeSpans fields of protobuf, with the offsets patched per send.

    Ids are indices into an id space (``trace_ids``, ``span_ids``): a trace sent in two parts shares one.
    """

    variants: dict[int, bytes]  # length of the rank's varint -> ScopeSpans fields (ResourceSpans field 2), concatenated
    offsets: dict[int, dict[str, np.ndarray]]
    n_spans: int
    max_end: int  # ns: the latest span end in the recording
    trace_index: list[int]  # the id-space trace index of each trace here, in order of first appearance
    n_trace_ids: int  # the id space's size
    n_span_ids: int


def id_space(spans: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The trace and span ids these spans name: their own first (traces in order of first appearance), then those
    only their links name (another compile's trace: given fresh ids too, the same within one send)."""
    trace_ids = list(dict.fromkeys(s["traceId"] for s in spans))
    span_ids = [s["spanId"] for s in spans]
    for s in spans:
        for link in s.get("links", []):
            if link["traceId"] not in trace_ids:
                trace_ids.append(link["traceId"])
            if link["spanId"] not in span_ids:
                span_ids.append(link["spanId"])
    return trace_ids, span_ids


def build_template(scope_spans: list[dict[str, Any]], ids: tuple[list[str], list[str]] | None = None) -> Template:
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1 import trace_pb2

    spans_json = [s for ss in scope_spans for s in ss.get("spans", [])]
    trace_ids, span_ids = ids or id_space(spans_json)
    tix, six = {t: i for i, t in enumerate(trace_ids)}, {s: i for i, s in enumerate(span_ids)}
    variants, offsets = {}, {}
    for vlen, placeholder in _PLACEHOLDER.items():
        parts = []
        for ss in scope_spans:
            ss = copy.deepcopy(ss)
            for s in ss.get("spans", []):
                for obj in [s, *s.get("links", [])]:
                    for k in ("traceId", "spanId", "parentSpanId"):
                        if obj.get(k):
                            obj[k] = base64.b64encode(bytes.fromhex(obj[k])).decode()
                for kv in s.get("attributes", []):
                    if kv["key"] == RANK_KEY and "intValue" in kv["value"]:
                        kv["value"]["intValue"] = str(placeholder)
            body = json_format.ParseDict(ss, trace_pb2.ScopeSpans()).SerializeToString()
            parts.append(b"\x12" + varint(len(body)) + body)
        buf = b"".join(parts)
        o: dict[str, list[int]] = {k: [] for k in ("tid", "tid_i", "sid", "sid_i", "pid", "pid_i", "ts", "ts_val", "rank")}
        n = 0
        for _, _, ss_start, ss_end in _fields(buf, 0, len(buf)):
            for num, _, s_start, s_end in _fields(buf, ss_start, ss_end):
                if num != 2:
                    continue
                sj = spans_json[n]
                n += 1
                n_link = 0
                for f, wt, a, b in _fields(buf, s_start, s_end):
                    if f == 1:
                        o["tid"].append(a)
                        o["tid_i"].append(tix[sj["traceId"]])
                    elif f == 2:
                        o["sid"].append(a)
                        o["sid_i"].append(six[sj["spanId"]])
                    elif f == 4 and b > a:
                        o["pid"].append(a)
                        o["pid_i"].append(six[sj["parentSpanId"]])
                    elif f in (7, 8) and wt == 1:
                        o["ts"].append(a)
                        o["ts_val"].append(struct.unpack_from("<Q", buf, a)[0])
                    elif f == 9:  # an attribute: the rank's value is patched
                        kv = {ff: (aa, bb) for ff, _, aa, bb in _fields(buf, a, b)}
                        if 1 in kv and 2 in kv and buf[kv[1][0] : kv[1][1]] == RANK_KEY.encode():
                            for vf, vwt, va, vb in _fields(buf, *kv[2]):
                                if vf == 3 and vwt == 0 and vb - va == vlen:
                                    o["rank"].append(va)
                    elif f == 13:  # a link (a backward's to its forward): the linked trace's ids
                        link = sj["links"][n_link]
                        n_link += 1
                        for lf, _, la, lb in _fields(buf, a, b):
                            if lf == 1 and lb - la == 16:
                                o["tid"].append(la)
                                o["tid_i"].append(tix[link["traceId"]])
                            elif lf == 2 and lb - la == 8:
                                o["sid"].append(la)
                                o["sid_i"].append(six[link["spanId"]])
                    elif f == 11:  # an event: its time
                        for ef, ewt, ea, _ in _fields(buf, a, b):
                            if ef == 1 and ewt == 1:
                                o["ts"].append(ea)
                                o["ts_val"].append(struct.unpack_from("<Q", buf, ea)[0])
        assert n == len(spans_json)
        arrays = {k: np.array(v, dtype=np.int64) for k, v in o.items() if k != "ts_val"}
        arrays["ts_val"] = np.array(o["ts_val"], dtype=np.uint64)
        variants[vlen], offsets[vlen] = buf, arrays
    order = list(dict.fromkeys(tix[s["traceId"]] for s in spans_json))
    max_end = max(int(s["endTimeUnixNano"]) for s in spans_json)
    return Template(variants, offsets, len(spans_json), max_end, order, len(trace_ids), len(span_ids))


def fresh_ids(n_traces: int, n_spans: int) -> tuple[np.ndarray, np.ndarray]:
    rnd = np.frombuffer(os.urandom(16 * n_traces + 8 * n_spans), dtype=np.uint8)
    return rnd[: 16 * n_traces].reshape(n_traces, 16), rnd[16 * n_traces :].reshape(n_spans, 8)


def instantiate(t: Template, rank: int, shift_ns: int, tids: np.ndarray, sids: np.ndarray) -> bytes:
    """``t``'s ScopeSpans for ``rank`` with the ids ``tids``/``sids`` (its id space's), every time moved by ``shift_ns``."""
    rank_bytes = varint(rank)
    vlen = len(rank_bytes)
    o = t.offsets[vlen]
    buf = bytearray(t.variants[vlen])
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[o["tid"][:, None] + _AR16] = tids[o["tid_i"]]
    arr[o["sid"][:, None] + _AR8] = sids[o["sid_i"]]
    if len(o["pid"]):
        arr[o["pid"][:, None] + _AR8] = sids[o["pid_i"]]
    shifted = o["ts_val"].astype(np.int64) + np.int64(shift_ns)  # ns since 1970 fit in int64 until 2262
    arr[o["ts"][:, None] + _AR8] = shifted.astype("<u8").view(np.uint8).reshape(-1, 8)
    if len(o["rank"]):
        arr[o["rank"][:, None] + np.arange(vlen)] = np.frombuffer(rank_bytes, dtype=np.uint8)
    return bytes(buf)


# ---------------------------------------------------------------------------------------------------------------------
# The recording, and what each recorded rank replays


@dataclass
class TraceInfo:
    n_spans: int
    why: list[str]  # the policies but the share that keep it
    root_end_off: int  # ns: its root's end (its compile's end) minus the export's latest span end
    name: str
    root_index: int  # index of its root among its spans (-1: no root here)


@dataclass
class Export:
    """One recorded export of one rank: the template, and its traces (in the template's order)."""

    template: Template
    traces: list[TraceInfo]


@dataclass
class RecordedRank:
    exports: list[Export]
    resource: list[dict[str, Any]]
    traces: list[list[dict[str, Any]]] = field(default_factory=list)  # every trace's spans (JSON), for split replay

    @property
    def n_spans(self) -> int:
        return sum(e.template.n_spans for e in self.exports)

    @property
    def n_traces(self) -> int:
        return sum(len(e.traces) for e in self.exports)


def record(workdir: Path, sampler: bool) -> Path:
    """Run the real 3-rank job once; its ranks' span files (spans-<rank>.jsonl) land in the returned directory."""
    out = workdir / ("rec-sampler-on" if sampler else "rec-sampler-off")
    go = out / "go"
    go.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b", "c", "release"):
        (go / name).touch()  # every phase starts at once: nothing to hold the job for here
    env = clean_env(
        {
            **spans_to_file(out / "spans-{rank}.jsonl"),
            "OTEL_SERVICE_NAME": "torch",
            "GO_DIR": str(go),
            "SLOW_S": "2",
            "ODD_RANK": "2",
            "ROUTINE": "6",
            "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor"),
            "MASTER_PORT": str(free_port()),
        }
    )
    if sampler:
        env["OTEL_TRACES_SAMPLER"] = "torch_otel_rank"
    argv = torchrun_under_torch_otel(3, WORKLOADS / "fleet.py")
    argv = [a for a in argv if a != "--standalone"]
    argv[-1:-1] = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "fleet-traces"]
    with (out / "job.log").open("wb") as log:
        proc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600)
    if proc.returncode != 0 or len(list(out.glob("spans-*.jsonl"))) != 3:
        raise RuntimeError(f"the recorded job failed ({proc.returncode}): {(out / 'job.log').read_text()[-3000:]}")
    return out


def load_rank(path: Path) -> RecordedRank:
    """A recorded rank's exports (one OTLP-JSON line each) as templates."""
    requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    resource: list[dict[str, Any]] = []
    exports = []
    traces: list[list[dict[str, Any]]] = []
    for req in requests:
        (rs,) = req["resourceSpans"]  # the bridge's provider has one resource
        resource = rs["resource"]["attributes"]
        scope_spans = rs["scopeSpans"]
        spans = [s for ss in scope_spans for s in ss.get("spans", [])]
        by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in spans:
            by_trace[s["traceId"]].append(s)
        trace_ids = list(by_trace)
        template = build_template(scope_spans)
        max_end = template.max_end
        infos = []
        for t in trace_ids:
            ts = by_trace[t]
            roots = [i for i, s in enumerate(ts) if not s.get("parentSpanId")]
            root = ts[roots[0]] if roots else ts[-1]
            infos.append(
                TraceInfo(
                    len(ts), policy_reasons(ts), int(root["endTimeUnixNano"]) - max_end, root["name"], roots[0] if roots else -1
                )
            )
            traces.append(ts)
        exports.append(Export(template, infos))
    return RecordedRank(exports, resource, traces)


def rank_resource(recorded: list[dict[str, Any]], rank: int, world: int, service: str, run_id: str) -> bytes:
    """ResourceSpans field 1 (the Resource) for synthetic ``rank``: the recorded resource, made this rank's."""
    from google.protobuf import json_format
    from opentelemetry.proto.resource.v1 import resource_pb2

    own = {
        "service.name": {"stringValue": service},
        "host.name": {"stringValue": f"node{rank // RANKS_PER_NODE:05d}"},
        "process.pid": {"intValue": str(1000 + rank % RANKS_PER_NODE)},
        "service.instance.id": {"stringValue": f"{run_id}-{rank:05d}"},
        "torch.distributed.rank": {"intValue": str(rank)},
        "torch.distributed.local_rank": {"intValue": str(rank % RANKS_PER_NODE)},
        "torch.distributed.world_size": {"intValue": str(world)},
        "torch.elastic.run_id": {"stringValue": run_id},
    }
    attrs = [{"key": kv["key"], "value": own.get(kv["key"], kv["value"])} for kv in recorded]
    attrs += [{"key": k, "value": v} for k, v in own.items() if k not in {kv["key"] for kv in recorded}]
    body = json_format.ParseDict({"attributes": attrs}, resource_pb2.Resource()).SerializeToString()
    return b"\x0a" + varint(len(body)) + body


def request(resource: bytes, scope_spans: bytes) -> bytes:
    """An ExportTraceServiceRequest of one ResourceSpans."""
    rs = resource + scope_spans
    return b"\x0a" + varint(len(rs)) + rs


# ---------------------------------------------------------------------------------------------------------------------
# Processes, their CPU and memory, the collectors' own counters


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def machine_cpu() -> tuple[float, float]:
    """The machine's busy CPU seconds (all cores), and CPU-stall seconds (/proc/pressure/cpu some)."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    busy = (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")
    stall = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        stall = int(Path("/proc/pressure/cpu").read_text().splitlines()[0].rsplit("total=", 1)[1]) / 1e6
    return busy, stall


def counter(c: Any, name: str, **labels: str) -> float:
    """A collector's own metric (summed over the series with ``labels``): the collector built here names counters
    without ``_total``, Jaeger's with it. NaN if it does not answer."""
    with contextlib.suppress(Exception):
        text = c.telemetry()
        total = 0.0
        for line in text.splitlines():
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric in (name, name + "_total") and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total
    return float("nan")


class Pipeline:
    """Jaeger, two gateways and two agents, on loopback, as tests/test_collector_pipeline.py runs them.

    ``resolver``: ``dns`` (as shipped: the agents resolve DNS_NAME through a hosts file of their own, re-read every
    ``dns_interval``) or ``static`` (both gateways listed). ``agent_sets``: more --set for the agents.
    """

    def __init__(
        self,
        tmp: Path,
        routine_percent: float = ROUTINE_PERCENT,
        resolver: str = "dns",
        dns_interval: str = "15s",
        agent_sets: dict[str, Any] | None = None,
        gateway_sets: dict[str, Any] | None = None,
    ) -> None:
        self.tmp, self.routine_percent, self.resolver = tmp, routine_percent, resolver
        self.dns_interval, self.extra_agent_sets = dns_interval, agent_sets or {}
        self.gateway_sets = gateway_sets or {}
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> Pipeline:
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise
        return self

    def _start(self) -> None:
        st = self.stack
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.jaeger = st.enter_context(
            Jaeger(
                receivers=list(GATEWAYS),
                sets={"extensions::jaeger_storage::backends::mem::memory::max_traces": str(JAEGER_MAX_TRACES)},
            )
        )
        self.port = free_port()
        env = {
            "PROMETHEUS_REMOTE_WRITE_URL": "http://127.0.0.1:9/api/v1/write",  # no metrics are sent here
            "SLOW_COMPILE_MS": str(SLOW_COMPILE_MS),
            "ROUTINE_TRACES_PERCENT": f"{self.routine_percent:g}",
        }
        self.gateways = [
            st.enter_context(
                collector(
                    "fleet/gateway.yaml",
                    name,
                    otlp_host=address,
                    grpc_port=self.port,
                    sets=self.gateway_sets,
                    env={**env, "TEMPO_ENDPOINT": self.jaeger.otlp(name)},
                )
            )
            for name, address in GATEWAYS.items()
        ]
        self.hosts = HostsFile(self.tmp / "hosts", DNS_NAME)
        self.hosts.resolve(list(GATEWAYS.values()))
        sets: dict[str, Any] = {}
        for exporter in ("load_balancing/traces", "load_balancing/metrics"):
            key = f"exporters::{exporter}::resolver"
            if self.resolver == "static":
                sets[f"{key}::dns"] = "null"
                sets[f"{key}::static::hostnames"] = [f"{a}:{self.port}" for a in GATEWAYS.values()]
            else:
                sets[f"{key}::dns::port"] = yaml_flow(str(self.port))
                sets[f"{key}::dns::interval"] = self.dns_interval
        sets.update(self.extra_agent_sets)
        self.agents = [
            st.enter_context(
                collector(
                    "fleet/agent.yaml",
                    f"agent-{i}",
                    sets=sets,
                    env={"GATEWAY_HOSTNAME": DNS_NAME, "HOST_NAME": f"agent-{i}"},
                    wrap=self.hosts.wrap if self.resolver == "dns" else None,
                )
            )
            for i in range(2)
        ]
        wait_until(lambda: all(counter(a, "otelcol_loadbalancer_num_backends") == 2 for a in self.agents), 60, "2 backends")

    def processes(self) -> dict[str, Any]:
        return {c.name: c for c in [*self.agents, *self.gateways, self.jaeger]}

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def complaints(self) -> dict[str, list[str]]:
        out = {}
        for name, c in self.processes().items():
            lines = [ln[:400] for ln in c.complaints() if "ui assets not embedded" not in ln]
            if lines:
                out[name] = lines[:5] + ([f"... {len(lines) - 5} more"] if len(lines) > 5 else [])
        return out


class Sender:
    """OTLP/gRPC to the agents, a window of calls in flight per agent; errors counted, never raised."""

    def __init__(self, addresses: list[str], window: int = 8) -> None:
        import grpc

        self.channels = [grpc.insecure_channel(a) for a in addresses]
        self.calls = [ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None) for ch in self.channels]
        self.window = window
        self.inflight: list[list[Any]] = [[] for _ in addresses]
        self.errors: dict[str, int] = defaultdict(int)
        self.requests = 0

    def send(self, agent: int, body: bytes) -> None:
        q = self.inflight[agent]
        if len(q) >= self.window:
            self._wait(q.pop(0))
        q.append(self.calls[agent].future(body, timeout=30))
        self.requests += 1

    def _wait(self, fut: Any) -> None:
        try:
            fut.result()
        except Exception as exc:  # noqa: BLE001 - a refused export is counted, as a rank's SDK would drop it
            code = exc.code() if hasattr(exc, "code") else type(exc).__name__
            self.errors[str(code)] += 1

    def flush(self) -> None:
        for q in self.inflight:
            while q:
                self._wait(q.pop(0))

    def close(self) -> None:
        self.flush()
        for ch in self.channels:
            ch.close()


class JaegerReader:
    """Jaeger's API v3, by trace id, raw (duplicates kept), over one kept-alive connection per thread."""

    def __init__(self, jaeger: Jaeger) -> None:
        self.host, _, port = jaeger.query_url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.local = threading.local()

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """Every span stored for ``trace_id`` (each with ``via``: the gateway it came through), [] if none."""
        for attempt in range(3):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request("GET", f"/api/v3/traces/{trace_id}?raw_traces=true")
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if resp.status == 404:
                return []
            if resp.status != 200:
                raise urllib.error.HTTPError(trace_id, resp.status, body[:200].decode(errors="replace"), None, None)  # type: ignore[arg-type]
            out = []
            for rs in json.loads(body).get("result", {}).get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        via = next(
                            (kv["value"].get("stringValue") for kv in s.get("attributes", []) if kv["key"] == "test.via"), None
                        )
                        out.append({"spanId": s["spanId"], "parentSpanId": s.get("parentSpanId"), "via": via})
            return out
        return []


@dataclass
class Sent:
    """A trace as sent: what the gateways should do with it, and when its compile ended."""

    trace_id: str
    n_spans: int
    kept: bool
    compile_end: float  # s since the epoch: its root's end time
    sent_at: float  # when its last part was handed to the agent
    parts: int = 1
    why: str = ""


class Probes:
    """Polls Jaeger for traces as they are sent (a sample), until each can be read whole: when that was."""

    def __init__(self, reader: JaegerReader, interval: float = 0.5, max_per_s: float = 200) -> None:
        self.reader, self.interval, self.max_per_s = reader, interval, max_per_s
        self.pending: dict[str, Sent] = {}
        self.found: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, s: Sent) -> None:
        with self.lock:
            self.pending[s.trace_id] = s

    def _run(self) -> None:
        while not self.stopped.is_set():
            round_start = time.time()
            with self.lock:
                todo = list(self.pending.values())
            for s in todo:
                if self.stopped.is_set():
                    return
                try:
                    n = len({sp["spanId"] for sp in self.reader.trace(s.trace_id)})
                except Exception:  # noqa: BLE001 - Jaeger busy: next round
                    continue
                if n >= s.n_spans:
                    with self.lock:
                        self.found[s.trace_id] = time.time()
                        self.pending.pop(s.trace_id, None)
                time.sleep(1 / self.max_per_s)  # at most max_per_s reads a second: the reads cost Jaeger CPU too
            self.stopped.wait(max(0.0, self.interval - (time.time() - round_start)))

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)

    def latencies(self, of: dict[str, Sent], since: str = "compile_end") -> list[float]:
        """Seconds from each found trace's ``since`` (its compile's end, or ``sent_at``: its export) until it was whole."""
        return sorted(self.found[t] - getattr(of[t], since) for t in self.found if t in of)


class Monitor:
    """Every second: each process's RSS, the traces each gateway holds, the gateways' export queues."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.max_rss: dict[str, int] = defaultdict(int)
        self.held: dict[str, float] = defaultdict(float)
        self.agent_queue_max = 0.0
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        t0 = time.time()
        while not self.stopped.wait(1.0):
            row: dict[str, Any] = {"t": round(time.time() - t0, 1)}
            for name, c in self.pipeline.processes().items():
                with contextlib.suppress(Exception):
                    rss = proc_mem(c.pid)["VmRSS"]
                    self.max_rss[name] = max(self.max_rss[name], rss)
                    row[f"{name}_rss_mib"] = round(rss / 2**20)
            for g in self.pipeline.gateways:
                held = counter(g, "otelcol_processor_tail_sampling_sampling_traces_on_memory")
                if held == held:
                    self.held[g.name] = max(self.held[g.name], held)
                    row[f"{g.name}_on_memory"] = held
            self.samples.append(row)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)


def snapshot(p: Pipeline) -> dict[str, Any]:
    """Each process's CPU seconds and memory, and the span counters that say what each tier took and sent."""
    out: dict[str, Any] = {"t": time.time(), "machine": machine_cpu(), "procs": {}}
    for name, c in p.processes().items():
        with contextlib.suppress(Exception):
            out["procs"][name] = {"cpu_s": proc_cpu(c.pid), **proc_mem(c.pid), "pid": c.pid}
    for c in [*p.agents, *p.gateways]:
        out[c.name] = {
            "accepted": counter(c, "otelcol_receiver_accepted_spans"),
            "refused": counter(c, "otelcol_receiver_refused_spans"),
            "sent": counter(c, "otelcol_exporter_sent_spans"),
            "send_failed": counter(c, "otelcol_exporter_send_failed_spans"),
            "enqueue_failed": counter(c, "otelcol_exporter_enqueue_failed_spans"),
        }
    for g in p.gateways:
        out[g.name]["traces_sampled"] = counter(g, "otelcol_processor_tail_sampling_global_count_traces_sampled", sampled="true")
        out[g.name]["traces_dropped"] = counter(g, "otelcol_processor_tail_sampling_global_count_traces_sampled", sampled="false")
        out[g.name]["dropped_too_early"] = counter(g, "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early")
    for name in GATEWAYS:
        out[f"jaeger_via_{name}"] = counter(p.jaeger, "otelcol_receiver_accepted_spans", receiver=f"otlp/{name}")
    return out


def stored_spans(p: Pipeline) -> float:
    return sum(counter(p.jaeger, "otelcol_receiver_accepted_spans", receiver=f"otlp/{n}") for n in GATEWAYS)


def settle(p: Pipeline, quiet_s: float, timeout: float, expected: float | None = None) -> float:
    """Wait until Jaeger has taken ``expected`` spans, or none for ``quiet_s``; return the seconds waited."""
    t0 = time.time()
    last, since = -1.0, time.time()
    while time.time() - t0 < timeout:
        n = stored_spans(p)
        if n != last:
            last, since = n, time.time()
        if expected is not None and n >= expected:
            break
        if time.time() - since >= quiet_s:
            break
        time.sleep(0.5)
    return time.time() - t0


def summarise(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    v = sorted(values)

    def q(p: float) -> float:
        return round(v[min(len(v) - 1, int(p * len(v)))], 2)

    return {"n": len(v), "median": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(v[-1], 2), "min": round(v[0], 2)}


def read_back(reader: JaegerReader, traces: list[Sent], threads: int = 4) -> dict[str, list[dict[str, Any]]]:
    """Each trace as Jaeger stores it (raw), read by id on ``threads`` connections."""
    results: dict[str, list[dict[str, Any]]] = {}
    lock = threading.Lock()
    todo = [s.trace_id for s in traces]

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                tid = todo.pop()
            try:
                got = reader.trace(tid)
            except Exception:  # noqa: BLE001 - counted as an error
                got = [{"spanId": "?", "via": "read-error"}]
            with lock:
                results[tid] = got

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return results


def outcome(s: Sent, got: list[dict[str, Any]]) -> tuple[str, int, int]:
    """(absent | partial | whole, gateways its spans came through, duplicate spans)."""
    ids = [g["spanId"] for g in got]
    unique = set(ids)
    kind = "absent" if not got else "partial" if len(unique) < s.n_spans else "whole"
    return kind, len({g["via"] for g in got}), len(ids) - len(unique)


def tally(traces: list[Sent], got: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Counts of each outcome: kept traces whole / partial / absent, dropped ones absent or not; split; duplicated."""
    out: dict[str, Any] = defaultdict(int)
    examples: dict[str, list[str]] = defaultdict(list)
    for s in traces:
        kind, gateways, dups = outcome(s, got[s.trace_id])
        out[f"{'kept' if s.kept else 'dropped'}_{kind}"] += 1
        if gateways > 1:
            out["split_over_both_gateways"] += 1
        if dups:
            out["with_duplicate_spans"] += 1
            out["duplicate_spans"] += dups
        if (kind != "whole") == s.kept or gateways > 1 or dups:
            examples[f"{kind}/{gateways}gw/{dups}dup/{s.why}/{s.parts}part"].append(s.trace_id)
    out["checked"] = len(traces)
    out["examples"] = {k: v[:3] for k, v in examples.items()}
    return dict(out)


def check_traces(reader: JaegerReader, traces: list[Sent], threads: int = 4) -> dict[str, Any]:
    return tally(traces, read_back(reader, traces, threads))


# ---------------------------------------------------------------------------------------------------------------------
# Throughput: one size and sampler


def odd_rank(world: int) -> int:
    return world * 3 // 4


def throughput_run(
    tmp: Path,
    recorded: dict[int, RecordedRank],
    world: int,
    sampler: str,
    rate: float,
    probes_n: int,
    check_n: int,
    label: str = "",
) -> dict[str, Any]:
    """Replay ``world`` ranks' recorded exports through a fresh pipeline at ``rate`` spans/s (inf: as fast as the
    agents take them); measure."""
    run_id = f"fleet-{world}-{sampler}{label}"
    service = f"torch-{world}-{sampler}{label}"
    odd = odd_rank(world)

    def replays(rank: int) -> RecordedRank:
        return recorded[0 if rank == 0 else 2 if rank == odd else 1]

    spans_total = sum(replays(r).n_spans for r in range(world))
    traces_total = sum(replays(r).n_traces for r in range(world))
    resource_src = recorded[1].resource
    t_build = time.process_time()
    resources = [rank_resource(resource_src, r, world, service, run_id) for r in range(world)]
    build_s = time.process_time() - t_build
    random.seed(world * 7 + (sampler == "on"))
    kept_est = (
        sum(1 for r in range(world) for e in replays(r).exports for t in e.traces if t.why) + traces_total * ROUTINE_PERCENT / 100
    )
    probe_p = min(1.0, probes_n / max(kept_est, 1))
    result: dict[str, Any] = {"ranks": world, "sampler": sampler, "spans_sent": spans_total, "traces_sent": traces_total}
    print(
        f"[{run_id}] {world} ranks, sampler {sampler}: {traces_total:,} traces, {spans_total:,} spans at {rate:,.0f} spans/s",
        flush=True,
    )
    with Pipeline(tmp / run_id) as p:
        reader = JaegerReader(p.jaeger)
        sender = Sender([a.address("grpc::endpoint") for a in p.agents])
        probes = Probes(reader)
        monitor = Monitor(p)
        kept: dict[str, Sent] = {}
        dropped_sample: list[Sent] = []
        n_dropped = 0
        before = snapshot(p)
        sender_cpu0 = time.process_time()
        t0 = time.time()
        sent_spans = 0
        n_exports = max(len(replays(r).exports) for r in (0, 1, odd))
        for i in range(n_exports):
            for rank in range(world):
                exports = replays(rank).exports
                if i >= len(exports):
                    continue
                e = exports[i]
                ahead = t0 + sent_spans / rate - time.time()
                if ahead > 0:
                    time.sleep(ahead)
                now_ns = time.time_ns()
                tids, sids = fresh_ids(e.template.n_trace_ids, e.template.n_span_ids)
                body = request(resources[rank], instantiate(e.template, rank, now_ns - e.template.max_end, tids, sids))
                sender.send((rank // RANKS_PER_NODE) % 2, body)
                sent_spans += e.template.n_spans
                now = now_ns / 1e9
                for k, info in enumerate(e.traces):
                    tid = tids[k].tobytes()
                    why = info.why[0] if info.why else ("share-of-the-rest" if share_keeps(tid, ROUTINE_PERCENT) else "")
                    s = Sent(tid.hex(), info.n_spans, bool(why), now + info.root_end_off / 1e9, now, why=why)
                    if s.kept:
                        kept[s.trace_id] = s
                        if random.random() < probe_p:
                            probes.add(s)
                    else:
                        n_dropped += 1
                        if len(dropped_sample) < check_n // 4:
                            dropped_sample.append(s)
                        elif random.random() < (check_n // 4) / n_dropped:
                            dropped_sample[random.randrange(len(dropped_sample))] = s
        sender.flush()
        send_s = time.time() - t0
        sender_cpu = time.process_time() - sender_cpu0
        expected_stored = sum(s.n_spans for s in kept.values())
        waited = settle(p, quiet_s=12, timeout=240, expected=expected_stored)
        after = snapshot(p)
        elapsed = after["t"] - before["t"]
        # the probes still pending get a last chance
        deadline = time.time() + 30
        while probes.pending and time.time() < deadline:
            time.sleep(0.5)
        probes.stop()
        monitor.stop()
        sample = random.sample(list(kept.values()), min(check_n, len(kept)))
        t_check = time.time()
        checked = check_traces(reader, sample + dropped_sample)
        check_s = time.time() - t_check
        final_mem = {name: proc_mem(c.pid) for name, c in p.processes().items()}
        sender.close()
        complaints = p.complaints()
    cpu = {name: after["procs"][name]["cpu_s"] - before["procs"][name]["cpu_s"] for name in before["procs"]}
    delta = {
        name: {k: after[name][k] - before[name][k] for k in after[name]}
        for name in after
        if isinstance(after[name], dict) and name not in ("procs",)
    }
    agents, gateways = [f"agent-{i}" for i in range(2)], list(GATEWAYS)
    spans_agents = sum(delta[a]["accepted"] for a in agents)
    spans_gateways = sum(delta[g]["accepted"] for g in gateways)
    stored = sum(after[f"jaeger_via_{g}"] - before[f"jaeger_via_{g}"] for g in gateways)
    cpu_agents, cpu_gateways = sum(cpu[a] for a in agents), sum(cpu[g] for g in gateways)
    busy = after["machine"][0] - before["machine"][0]
    stall = after["machine"][1] - before["machine"][1]
    lat = probes.latencies(kept)
    result.update(
        {
            "offered_rate_spans_per_s": rate if rate != float("inf") else None,
            "send_s": round(send_s, 1),
            "achieved_rate_spans_per_s": round(spans_total / send_s),
            "sender_cpu_s": round(sender_cpu, 1),
            "sender_requests": sender.requests,
            "sender_errors": dict(sender.errors),
            "resource_build_cpu_s": round(build_s, 1),
            "settle_s": round(waited, 1),
            "window_s": round(elapsed, 1),
            "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
            "spans": {
                "agents_accepted": spans_agents,
                "agents_refused": sum(delta[a]["refused"] for a in agents),
                "gateways_accepted": spans_gateways,
                "gateways_refused": sum(delta[g]["refused"] for g in gateways),
                "gateways_sent": sum(delta[g]["sent"] for g in gateways),
                "gateways_send_failed": sum(delta[g]["send_failed"] + delta[g]["enqueue_failed"] for g in gateways),
                "gateway_split": {g: delta[g]["accepted"] for g in gateways},
                "jaeger_stored": stored,
                "expected_stored": expected_stored,
            },
            "traces": {
                "kept_expected": len(kept),
                "dropped_expected": n_dropped,
                "gateways_sampled": sum(delta[g]["traces_sampled"] for g in gateways),
                "gateways_not_sampled": sum(delta[g]["traces_dropped"] for g in gateways),
                "gateways_dropped_too_early": sum(delta[g]["dropped_too_early"] for g in gateways),
                "traces_on_memory_max": dict(monitor.held),
            },
            "spans_per_core_s": {
                "agents": round(spans_agents / cpu_agents) if cpu_agents else None,
                "gateways": round(spans_gateways / cpu_gateways) if cpu_gateways else None,
                "jaeger": round(stored / cpu["jaeger"]) if cpu.get("jaeger") else None,
            },
            "cores_used": {k: round(v / elapsed, 2) for k, v in cpu.items()},
            "rss_peak_mib": {name: round(m["VmHWM"] / 2**20) for name, m in final_mem.items()},
            "rss_end_mib": {name: round(m["VmRSS"] / 2**20) for name, m in final_mem.items()},
            "check": checked,
            "check_s": round(check_s, 1),
            "latency_s": summarise(lat),
            "latency_from_export_s": summarise(probes.latencies(kept, "sent_at")),
            "probes_unfound": len(probes.pending),
            "machine": {"busy_cores": round(busy / elapsed, 2), "cpu_stall_share": round(stall / elapsed, 2)},
            "timeline": monitor.samples[:: max(1, len(monitor.samples) // 60)],
            "complaints": complaints,
        }
    )
    result["whole_share"] = (
        round(checked.get("kept_whole", 0) / max(1, sum(v for k, v in checked.items() if k.startswith("kept_"))), 5)
        if checked
        else None
    )
    print(
        f"[{run_id}] sent in {send_s:.0f} s ({result['achieved_rate_spans_per_s']:,} spans/s), settled in {waited:.0f} s; spans per core-second: "
        f"{result['spans_per_core_s']}; peak RSS MiB {result['rss_peak_mib']}; whole {result['whole_share']}; latency {result['latency_s']}",
        flush=True,
    )
    return result


# ---------------------------------------------------------------------------------------------------------------------
# A gateway restarted under steady load

LBQ_SETS = {
    # The load_balancing exporter's own queue and retry (off as shipped): a failed export is retried as a whole,
    # re-routed by the ring of the moment. Its per-gateway OTLP exporters then neither queue nor retry, so that a
    # gateway's failure reaches it.
    "exporters::load_balancing/traces::sending_queue": {"enabled": True, "queue_size": 5000},
    "exporters::load_balancing/traces::retry_on_failure": {"enabled": True, "max_elapsed_time": "120s"},
    "exporters::load_balancing/traces::protocol::otlp::sending_queue": {"enabled": False},
    "exporters::load_balancing/traces::protocol::otlp::retry_on_failure": {"enabled": False},
}
RESTART_CASES: dict[str, dict[str, Any]] = {
    "a": {"resolver": "static", "what": "static resolver: SIGTERM, started again 20 s later"},
    "b": {
        "resolver": "dns",
        "what": "DNS: rolling restart (leave the records, preStop until the agents re-resolve, SIGTERM, start, rejoin)",
    },
    "c": {
        "resolver": "dns",
        "what": "DNS: abrupt (SIGTERM and removal from the records at once), started and rejoined 20 s later",
    },
    "d": {
        "resolver": "dns",
        "what": "DNS: SIGKILL (a crash), removed from the records 2 s later, started and rejoined 20 s later",
    },
    "d-static": {"resolver": "static", "what": "static resolver: SIGKILL (a crash), started again 20 s later"},
    "c-dns5s": {
        "resolver": "dns",
        "dns_interval": "5s",
        "what": "as c, the agents resolving every 5 s (15 s as shipped)",
    },
    "d-static-batch1s": {
        "resolver": "static",
        "gateway_sets": {"processors::batch::timeout": "1s"},
        "what": "as d-static, the gateways' batch timeout 1 s (5 s as shipped)",
    },
    "c-agentbatch1s": {
        "resolver": "dns",
        "sets": {"processors::batch::timeout": "1s"},
        "what": "as c, the agents' batch timeout 1 s (5 s as shipped)",
    },
    "d-static-agentbatch1s": {
        "resolver": "static",
        "sets": {"processors::batch::timeout": "1s"},
        "what": "as d-static, the agents' batch timeout 1 s (5 s as shipped)",
    },
    "c-lbq": {
        "resolver": "dns",
        "sets": LBQ_SETS,
        "what": "as c, with the load_balancing exporter's own queue and retry on (its per-gateway exporters' off)",
    },
}


@dataclass
class TraceParts:
    """One recorded trace as templates sharing one id space: whole, and in two parts (phases, then root)."""

    whole: Template
    phases: Template | None
    root: Template | None
    n_spans: int
    root_end: int  # ns, recorded


def trace_parts(spans: list[dict[str, Any]]) -> TraceParts:
    ids = id_space(spans)
    whole = build_template([{"scope": {"name": "torch_otel"}, "spans": spans}], ids)
    roots = [s for s in spans if not s.get("parentSpanId")]
    rest = [s for s in spans if s.get("parentSpanId")]
    root = roots[0] if roots else spans[-1]
    phases = build_template([{"scope": {"name": "torch_otel"}, "spans": rest}], ids) if rest and roots else None
    root_t = build_template([{"scope": {"name": "torch_otel"}, "spans": roots}], ids) if rest and roots else None
    return TraceParts(whole, phases, root_t, len(spans), int(root["endTimeUnixNano"]))


def restart_run(
    tmp: Path, recorded: dict[int, RecordedRank], case: str, world: int, traces_per_s: float, split_share: float, outage_s: float
) -> dict[str, Any]:
    spec = RESTART_CASES[case]
    run_id = f"restart-{case}"
    service = f"torch-restart-{case}"
    parts = [trace_parts(t) for t in recorded[1].traces]
    resources = [rank_resource(recorded[1].resource, r, world, service, run_id) for r in range(world)]
    rng = random.Random(hash(case) & 0xFFFF)
    print(f"[{run_id}] {spec['what']}: {world} ranks, {traces_per_s:g} traces/s, {split_share:.0%} in two exports", flush=True)
    with Pipeline(
        tmp / run_id,
        routine_percent=100,
        resolver=spec["resolver"],
        dns_interval=spec.get("dns_interval", "15s"),
        agent_sets=spec.get("sets"),
        gateway_sets=spec.get("gateway_sets"),
    ) as p:
        reader = JaegerReader(p.jaeger)
        sender = Sender([a.address("grpc::endpoint") for a in p.agents])
        probes = Probes(reader)
        monitor = Monitor(p)
        gw2 = p.gateways[1]
        sent: dict[str, Sent] = {}
        later: list[tuple[float, int, bytes, str]] = []  # (due, rank, root part, trace id)
        times: dict[str, float] = {}
        t0 = time.time()
        n = 0
        rank = 0
        cursor = [0] * world
        warm, after = 20.0, 25.0

        def agent_of(r: int) -> int:
            return (r // RANKS_PER_NODE) % 2

        def num_backends() -> list[float]:
            return [counter(a, "otelcol_loadbalancer_num_backends") for a in p.agents]

        event_thread_error: list[BaseException] = []

        def events() -> None:
            try:
                time.sleep(warm)
                times["event"] = time.time() - t0
                if case == "b":
                    p.hosts.resolve([GATEWAYS["gw1"]])
                    wait_until(lambda: all(x == 1 for x in num_backends()), 120, "the agents to drop gateway 2")
                    times["agents_resolved_one"] = time.time() - t0
                    time.sleep(2)  # the preStop hook's margin
                if case.startswith("c"):
                    p.hosts.resolve([GATEWAYS["gw1"]])
                times["stop"] = time.time() - t0
                if case.startswith("d"):
                    gw2.stop(signal.SIGKILL)
                else:
                    gw2.stop(signal.SIGTERM)
                times["stopped"] = time.time() - t0
                if case == "d":
                    time.sleep(2)
                    p.hosts.resolve([GATEWAYS["gw1"]])
                    times["removed_from_records"] = time.time() - t0
                time.sleep(max(0.0, times["stopped"] + outage_s - (time.time() - t0)))
                gw2.start()
                times["started"] = time.time() - t0
                p.hosts.resolve(list(GATEWAYS.values()))
                wait_until(lambda: all(x == 2 for x in num_backends()), 120, "the agents to resolve gateway 2 again")
                times["agents_resolved_two"] = time.time() - t0
            except BaseException as exc:  # noqa: BLE001 - reported with the run
                event_thread_error.append(exc)

        watcher = BackendWatcher(p, t0)
        ev = threading.Thread(target=events, daemon=True)
        ev.start()
        before = snapshot(p)
        # steady load: each request one rank's export of a few traces, plus roots of its traces split 2 s ago
        while True:
            now = time.time()
            elapsed = now - t0
            if "agents_resolved_two" in times and elapsed > times["agents_resolved_two"] + after:
                break
            if event_thread_error or elapsed > warm + 400:
                break
            while later and later[0][0] <= now:
                _, r, body, tid = later.pop(0)
                sender.send(agent_of(r), request(resources[r], body))
                sent[tid].sent_at = time.time()
            ahead = t0 + n / traces_per_s - time.time()
            if ahead > 0:
                time.sleep(min(ahead, 0.05))
                continue
            rank = (rank + 1) % world
            chunks = []
            for _ in range(3):
                tp = parts[cursor[rank] % len(parts)]
                cursor[rank] += 1
                now_ns = time.time_ns()
                shift = now_ns - tp.root_end
                tids, sids = fresh_ids(tp.whole.n_trace_ids, tp.whole.n_span_ids)
                tid = tids[0].tobytes().hex()
                s = Sent(tid, tp.n_spans, True, (tp.root_end + shift) / 1e9, now_ns / 1e9, why="all")
                if tp.phases is not None and tp.root is not None and rng.random() < split_share:
                    chunks.append(instantiate(tp.phases, rank, shift, tids, sids))
                    later.append((now + 2.0, rank, instantiate(tp.root, rank, shift, tids, sids), tid))
                    s.parts = 2
                else:
                    chunks.append(instantiate(tp.whole, rank, shift, tids, sids))
                sent[tid] = s
                if rng.random() < 1 / 3:
                    probes.add(s)
                n += 1
            sender.send(agent_of(rank), request(resources[rank], b"".join(chunks)))
        for _, r, body, tid in later:
            sender.send(agent_of(r), request(resources[r], body))
            sent[tid].sent_at = time.time()
        sender.flush()
        times["load_stopped"] = time.time() - t0
        ev.join(5)
        waited = settle(p, quiet_s=35, timeout=240, expected=sum(s.n_spans for s in sent.values()))
        time.sleep(3)
        probes.stop()
        monitor.stop()
        watcher.stop()
        after_snap = snapshot(p)
        checked_at = time.time()
        results = check_detail(reader, list(sent.values()), t0, times)
        check_s = time.time() - checked_at
        sender.close()
        logs = {c.name: c.output() for c in [*p.agents, *p.gateways]}
        complaints = p.complaints()
    lat = {t: probes.found[t] - sent[t].compile_end for t in probes.found}
    windows = phase_windows(times)

    def window_of(s: Sent) -> str:
        t = s.compile_end - t0
        return next((name for name, (a, b) in windows.items() if a <= t < b), "after")

    lat_by: dict[str, list[float]] = defaultdict(list)
    for t, v in lat.items():
        lat_by[window_of(sent[t])].append(v)
    base = sorted(lat_by.get("before", []))
    threshold = (base[int(0.99 * (len(base) - 1))] + 2.0) if base else 10.0
    delayed = {w: sum(1 for v in vs if v > threshold) for w, vs in lat_by.items()}
    unfound_probes = defaultdict(int)
    for t in probes.pending:
        unfound_probes[window_of(sent[t])] += 1
    dropping = {name: dropped_in_log(text) for name, text in logs.items()}
    return {
        "case": case,
        "what": spec["what"],
        "resolver": spec["resolver"],
        "agent_sets": spec.get("sets", {}),
        "gateway_sets": spec.get("gateway_sets", {}),
        "dns_interval": spec.get("dns_interval", "15s") if spec["resolver"] == "dns" else None,
        "ranks": world,
        "traces_per_s": traces_per_s,
        "split_share": split_share,
        "times_s": {k: round(v, 1) for k, v in times.items()},
        "event_error": repr(event_thread_error[0]) if event_thread_error else None,
        "traces_sent": len(sent),
        "traces_sent_in_two_exports": sum(1 for s in sent.values() if s.parts == 2),
        "spans_sent": sum(s.n_spans for s in sent.values()),
        "settle_s": round(waited, 1),
        "check": results,
        "check_s": round(check_s, 1),
        "latency_threshold_s": round(threshold, 2),
        "latency_by_window": {w: summarise(v) for w, v in lat_by.items()},
        "delayed_by_window": delayed,
        "probes_never_whole_by_window": dict(unfound_probes),
        "probes": len(lat) + len(probes.pending),
        "agents_send_failed_spans": {a: after_snap[a]["send_failed"] - before[a]["send_failed"] for a in ("agent-0", "agent-1")},
        "logged_drops": dropping,
        "backend_changes": watcher.changes,
        "complaints": complaints,
        "rss_max_mib": {k: round(v / 2**20) for k, v in monitor.max_rss.items()},
    }


def dropped_in_log(text: str) -> dict[str, Any]:
    """What a collector's log says it dropped: lines, items, and each distinct (component, error) with its items."""
    lines = [ln for ln in text.splitlines() if "Dropping data" in ln or "dropped_items" in ln]
    items = 0
    why: dict[str, int] = defaultdict(int)
    for ln in lines:
        n = sum(int(m) for m in re.findall(r'"dropped_items": (\d+)', ln))
        items += n
        component = re.search(r'"otelcol.component.id": "([^"]*)"', ln)
        error = re.search(r'"error": "((?:[^"\\]|\\.)*)"', ln)
        why[f"{component.group(1) if component else '?'}: {error.group(1)[:200] if error else ln[:200]}"] += n
    return {"lines": len(lines), "items": items, "why": dict(list(why.items())[:6])}


class BackendWatcher:
    """When each agent's load_balancing exporters changed their gateway count (polled every 0.5 s)."""

    def __init__(self, p: Pipeline, t0: float) -> None:
        self.p, self.t0 = p, t0
        self.changes: list[tuple[float, list[float]]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last: list[float] = []
        while not self.stopped.wait(0.5):
            now = [counter(a, "otelcol_loadbalancer_num_backends") for a in self.p.agents]
            if now != last:
                self.changes.append((round(time.time() - self.t0, 1), now))
                last = now

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)


def phase_windows(times: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Windows of compile-end time (s after the load started) around the event."""
    stop = times.get("stop", 1e9)
    start = times.get("started", 1e9)
    back = times.get("agents_resolved_two", 1e9)
    event = times.get("event", stop)
    return {
        "before": (0.0, event - 10.0),
        "just_before": (event - 10.0, stop),
        "outage": (stop, start),
        "rejoining": (start, back),
        "after": (back, 1e12),
    }


def check_detail(reader: JaegerReader, traces: list[Sent], t0: float, times: dict[str, float]) -> dict[str, Any]:
    """Every trace read back: the outcomes overall, and by the window its compile ended in, and by its exports."""
    got = read_back(reader, traces)
    windows = phase_windows(times)
    groups: dict[str, list[Sent]] = defaultdict(list)
    for s in traces:
        t = s.compile_end - t0
        groups[next((name for name, (a, b) in windows.items() if a <= t < b), "after")].append(s)
    out = tally(traces, got)
    out["by_window"] = {w: {k: v for k, v in tally(g, got).items() if k != "examples"} for w, g in groups.items()}
    out["by_exports"] = {
        f"{n}_exports": {k: v for k, v in tally([s for s in traces if s.parts == n], got).items() if k != "examples"}
        for n in (1, 2)
    }
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Sizing, and the command


def sizing(runs: list[dict[str, Any]], recorded: dict[str, dict[int, RecordedRank]], args: argparse.Namespace) -> dict[str, Any]:
    """What a 16,384-rank job's cold start needs, from the spans per core-second and the memory measured here.

    Rate model: every rank sends its cold start's spans over ``minutes``, all ranks in lockstep, so the tier takes
    ranks x spans per rank / duration on average. Two cold starts: the recorded job's (its rank 1: every rank but
    the detail rank and the odd one) over ``--cold-start-min``, and a heavy one, ``--heavy-compiles`` compiles of
    ``--heavy-spans`` spans (an inductor compile's count, as recorded on rank 0) over ``--heavy-min``. A gateway's
    memory is fitted as a line over the spans per second it took, from the 16,384-rank runs with the sampler off."""
    ranks = 16384
    big = [r for r in runs if r["ranks"] == ranks and "error" not in r]
    per_core = {
        (r["sampler"], bool(r.get("saturation"))): (r["spans_per_core_s"]["gateways"], r["spans_per_core_s"]["agents"])
        for r in big
    }
    points = sorted(
        (r["achieved_rate_spans_per_s"] / len(GATEWAYS), statistics.mean(r["rss_peak_mib"][g] for g in GATEWAYS))
        for r in big
        if r["sampler"] == "off"
    )
    fit = None
    if len(points) >= 2 and points[-1][0] > points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[-1]
        slope = (y1 - y0) / (x1 - x0)
        fit = {"mib_at_zero": round(y0 - slope * x0), "mib_per_1000_spans_per_s": round(slope * 1000, 2), "points": points}
    gw_off = min((v[0] for k, v in per_core.items() if k[0] == "off"), default=None)
    gw_on = min((v[0] for k, v in per_core.items() if k[0] == "on"), default=None)
    agent_off = min((v[1] for k, v in per_core.items() if k[0] == "off"), default=None)
    jobs = []
    models = [
        ("recorded job, sampler off", recorded["off"][1].n_spans, args.cold_start_min, gw_off),
        ("recorded job, rank sampler on", recorded["on"][1].n_spans, args.cold_start_min, gw_on),
        (
            f"heavy: {args.heavy_compiles} compiles x {args.heavy_spans} spans, sampler off",
            args.heavy_compiles * args.heavy_spans,
            args.heavy_min,
            gw_off,
        ),
    ]
    for name, per_rank, minutes, gw in models:
        rate = ranks * per_rank / (minutes * 60)
        job: dict[str, Any] = {"model": name, "spans_per_rank": per_rank, "minutes": minutes, "spans_per_s": round(rate)}
        if gw:
            job["gateway_cores"] = round(rate / gw, 2)
        if agent_off:
            job["agent_cores_per_node_of_8_ranks"] = round(RANKS_PER_NODE * per_rank / (minutes * 60) / agent_off, 5)
        if fit:
            job["gateway_rss_mib_each"] = {
                str(n): round(fit["mib_at_zero"] + fit["mib_per_1000_spans_per_s"] * rate / n / 1000) for n in (2, 3, 4)
            }
        jobs.append(job)
    return {
        "ranks": ranks,
        "gateway_spans_per_core_s": {f"{k[0]}{' saturated' if k[1] else ''}": v[0] for k, v in per_core.items()},
        "agent_spans_per_core_s": {f"{k[0]}{' saturated' if k[1] else ''}": v[1] for k, v in per_core.items()},
        "gateway_rss_fit": fit,
        "jobs": jobs,
    }


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds every context manager: each collector started here is stopped


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,16384")
    ap.add_argument("--samplers", default="off,on")
    ap.add_argument("--rate", type=float, default=25000, help="offered spans per second (the replay's compression)")
    ap.add_argument(
        "--saturate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one more run at the largest size, sampler off, sent as fast as the agents take it",
    )
    ap.add_argument("--probes", type=int, default=300, help="kept traces polled in Jaeger for the latency")
    ap.add_argument("--check", type=int, default=2000, help="kept traces read back by id (and a quarter as many dropped)")
    ap.add_argument(
        "--restart-cases",
        default="a,b,c,c-dns5s,d,d-static,d-static-batch1s,c-lbq",
        help=f"of {','.join(RESTART_CASES)}; empty for none",
    )
    ap.add_argument("--restart-ranks", type=int, default=512)
    ap.add_argument("--restart-rate", type=float, default=120, help="traces per second during a restart case")
    ap.add_argument("--split-share", type=float, default=0.25, help="share of traces sent in two exports")
    ap.add_argument("--outage", type=float, default=20, help="seconds a restarted gateway is down")
    ap.add_argument("--cold-start-min", type=float, default=5, help="sizing: the recorded cold start spread over this")
    ap.add_argument("--heavy-compiles", type=int, default=200, help="sizing: a heavy cold start's compiles per rank")
    ap.add_argument("--heavy-spans", type=int, default=50, help="sizing: ... and spans per compile")
    ap.add_argument("--heavy-min", type=float, default=10, help="sizing: ... over this many minutes")
    ap.add_argument("--recording", type=Path, help="a directory of an earlier run's recordings (rec-sampler-*)")
    ap.add_argument("--out", type=Path, default=RESULTS / "fleet_traces_results.json")
    args = ap.parse_args()
    t_all = time.time()
    with tempfile.TemporaryDirectory(prefix="fleet-traces-") as tmpdir:
        tmp = Path(tmpdir)
        rec_dir = args.recording or tmp
        recorded: dict[str, dict[int, RecordedRank]] = {}
        rec_info: dict[str, Any] = {}
        for sampler in ("off", "on"):
            d = rec_dir / f"rec-sampler-{sampler}"
            if not (d / "spans-2.jsonl").exists():
                t = time.time()
                record(rec_dir, sampler == "on")
                print(f"recorded the real job, sampler {sampler}, in {time.time() - t:.0f} s", flush=True)
            recorded[sampler] = {r: load_rank(d / f"spans-{r}.jsonl") for r in range(3)}
            rec_info[sampler] = {
                str(r): {
                    "exports": len(rr.exports),
                    "traces": rr.n_traces,
                    "spans": rr.n_spans,
                    "kept_by_policies": sum(1 for e in rr.exports for t in e.traces if t.why),
                    "protobuf_bytes": sum(len(e.template.variants[2]) for e in rr.exports),
                    "compile_end_to_export_s": summarise([-t.root_end_off / 1e9 for e in rr.exports for t in e.traces]),
                }
                for r, rr in recorded[sampler].items()
            }
        print(json.dumps(rec_info), flush=True)
        results: dict[str, Any] = {
            "command": "python -m bench.fleet.traces " + " ".join(sys.argv[1:]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_at_start": os.getloadavg()},
            "collector": collector_binaries()[0],
            "jaeger": collector_binaries()[1],
            "recording": rec_info,
            "runs": [],
            "restart": [],
        }

        def save() -> None:
            results["wall_s"] = round(time.time() - t_all)
            args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")

        for size in [int(x) for x in args.sizes.split(",") if x]:
            for sampler in [x for x in args.samplers.split(",") if x]:
                try:
                    results["runs"].append(
                        throughput_run(tmp, recorded[sampler], size, sampler, args.rate, args.probes, args.check)
                    )
                except Exception:  # noqa: BLE001 - the other runs still run
                    traceback.print_exc()
                    results["runs"].append({"ranks": size, "sampler": sampler, "error": traceback.format_exc()[-3000:]})
                save()
        for case in [x for x in args.restart_cases.split(",") if x]:
            try:
                results["restart"].append(
                    restart_run(tmp, recorded["off"], case, args.restart_ranks, args.restart_rate, args.split_share, args.outage)
                )
                r = results["restart"][-1]
                print(
                    f"[restart-{case}] {json.dumps({k: r[k] for k in ('times_s', 'check', 'delayed_by_window', 'latency_threshold_s')})}",
                    flush=True,
                )
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                results["restart"].append({"case": case, "error": traceback.format_exc()[-3000:]})
            save()
        sizes = [int(x) for x in args.sizes.split(",") if x]
        if args.saturate and sizes:
            size = max(sizes)
            try:
                run = throughput_run(tmp, recorded["off"], size, "off", float("inf"), args.probes, args.check, "-saturated")
                run["saturation"] = True
                results["runs"].append(run)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                results["runs"].append(
                    {"ranks": size, "sampler": "off", "saturation": True, "error": traceback.format_exc()[-3000:]}
                )
            save()
        results["sizing"] = sizing([r for r in results["runs"] if "error" not in r], recorded, args)
        save()
    print(f"wrote {args.out} ({time.time() - t_all:.0f} s)")


if __name__ == "__main__":
    main()
