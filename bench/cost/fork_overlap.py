"""Forks that overlap OTLP/gRPC exports: how many children hang inside ``fork()``, with and without the fork gate.

    .venv/bin/python -m bench.cost.fork_overlap --forks 8000      # about 3 minutes a mode on 2 cores

A process (one per mode) exports 20 spans to a real receiver (rotel, on 127.0.0.1) over OTLP/gRPC in a tight loop on
one thread, while its main thread forks children that exit at once. A child that has not exited after ``--hang-s``
seconds is stuck (inside ``fork()``: gRPC's own fork handlers, waiting on a lock the parent's exporting thread held);
it is counted and killed. Modes: ``off`` exports as the SDK's exporter does; ``gate`` exports inside the bridge's fork
gate (torch_otel._otel.fork_gate), as the bridge's own exporters do. Also counted: the forks for which gRPC skipped its
fork handlers because a thread was inside a gRPC call (its own log line), and the mean time a fork took.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def child(mode: str, endpoint: str, forks: int, hang_s: float) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from torch_otel._otel.fork_gate import GATE

    kept = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("bench")
    for i in range(20):
        tracer.start_span(f"s{i}", attributes={"n": i, "text": "x" * 50}).end()
    spans = kept.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=5)
    exports = [0]

    def loop() -> None:
        while True:
            if mode == "gate":
                with GATE.export():
                    exporter.export(spans)
            else:
                exporter.export(spans)
            exports[0] += 1

    threading.Thread(target=loop, daemon=True).start()
    time.sleep(1.0)
    hung, took = 0, 0.0
    for _ in range(forks):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        took += time.perf_counter() - t0
        deadline = time.monotonic() + hang_s
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                hung += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.001)
    return {"mode": mode, "forks": forks, "hung": hung, "exports": exports[0], "fork_ms": round(1000 * took / forks, 2)}


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        _, _, mode, endpoint, forks, hang_s = sys.argv
        print(json.dumps(child(mode, endpoint, int(forks), float(hang_s))), flush=True)
        os._exit(0)  # the exporting thread is still in its loop
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forks", type=int, default=8000, help="forks per mode")
    ap.add_argument("--modes", default="off,gate")
    ap.add_argument("--hang-s", type=float, default=5.0, help="a child still there after this long is stuck")
    a = ap.parse_args()
    from tests.servers import Rotel

    rows = []
    with Rotel(debug=False) as rotel:
        for mode in a.modes.split(","):
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.cost.fork_overlap",
                    "child",
                    mode,
                    f"127.0.0.1:{rotel.grpc_port}",
                    str(a.forks),
                    str(a.hang_s),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "GRPC_VERBOSITY": "INFO"},
            )
            if p.returncode != 0:
                sys.exit(f"{mode} exited {p.returncode}:\n{p.stderr[-3000:]}")
            row = json.loads(p.stdout.strip().splitlines()[-1])
            row["grpc_skipped_its_fork_handlers"] = p.stderr.count("skipping fork() handlers")
            rows.append(row)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
