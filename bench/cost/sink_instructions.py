"""The bridge's own work on finished compiles, counted in instructions with nothing of torch in the count.

    .venv/bin/python -m bench.cost.sink_instructions                  # the default set-up, and each alternative path
    .venv/bin/python -m bench.cost.sink_instructions --paths bytes    # one path

The compile loop's count (``bench.cost.instructions``) takes in torch's own work, which moves by up to 0.2% with where
the process's objects lie: about 4 M instructions, so a cut of 1 M in the bridge is not seen there. Here the region holds
the bridge's sinks alone, fed the records of the loop's own compiles: the same count, to the instruction, every run.

The records: the compile loop of ``bench.cost.instructions`` (the small MLP of ``bench/cost/zero_cost.py``, forward and
backward, ``aot_eager``, 4 recompiles after a warm-up), run once outside valgrind with ``TORCH_TRACE`` on, its log
replayed into records (``torch_otel.replay``'s assembler and derive step). In the counted process, which never imports
torch, each record is handed to the sinks of the default set-up as the live pipeline hands it: the span mapper (its root
and phase spans, on the SDK's batch processor), the compile metrics (Prometheus's series and the meter's), ``ROUNDS``
times; then the batch processor's flush, which encodes every span with the bridge's OTLP encoder as its gRPC exporter
does (the request's bytes are made, not sent: nothing listens, and nothing of gRPC runs in the region).

Paths (``--paths``), the same records each:
- ``bytes``: the default: phase spans written as their OTLP bytes as they are made (torch_otel._otel.direct_spans);
- ``direct``: phase spans as the SDK's finished spans, encoded at the export (the path before the bytes);
- ``sdk``: every span through the SDK's ``start_span`` and ``end``, as with a span processor of the user's;
- ``spans`` and ``metrics``: the default's span mapper alone, its compile metrics alone (the two shares of its count).

Prints instructions per compile record for each path, and writes them with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROUNDS = 20
REPO = Path(__file__).resolve().parents[2]
LOOP = """
import torch
from bench.cost.zero_cost import compiled_mlp
torch.set_num_threads(1)
cm = compiled_mlp()
for n in range(1, 6):
    cm(torch.randn(n, 64)).sum().backward()
"""


def make_log(folder: Path) -> Path:
    """The compile loop's ``TORCH_TRACE`` log (one file: one process)."""
    env = {**os.environ, "TORCH_TRACE": str(folder), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", LOOP], env=env, check=True, cwd=REPO)
    (log,) = folder.glob("*.log")
    return log


def child(log: str, path: str, rounds: int) -> None:
    """In the counted process: the records, the sinks, the region."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from prometheus_client import CollectorRegistry

    from torch_otel._core.settings import Settings
    from torch_otel._model.record import Sink
    from torch_otel._otel.direct_spans import direct_spans
    from torch_otel._otel.meter_histograms import MeterHistograms
    from torch_otel._otel.wire import use_fast_encoding
    from torch_otel._parse.trace_log import ReplayStats
    from torch_otel._pipeline.replay import replay_file
    from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend, series_store
    from torch_otel._sinks.otel_metrics import OTelBackend
    from torch_otel._sinks.spans import SpanMapper

    class Keep(Sink):
        def __init__(self) -> None:
            self.records: list[Any] = []

        def on_finish(self, record: Any) -> None:
            self.records.append(record)

    kept = Keep()
    replay_file(Path(log), [kept], ReplayStats())
    records = kept.records

    class Encoding(SpanExporter):
        """The bridge's OTLP/gRPC span exporter's encoding (its request's bytes), with nothing sent."""

        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(endpoint="127.0.0.1:9", insecure=True)
            use_fast_encoding(self.inner)
            self.sent = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.sent += len(self.inner._translate_data(spans))  # noqa: SLF001 - what its export sends
            return SpanExportResult.SUCCESS

    provider = TracerProvider(shutdown_on_exit=False)
    encoding = Encoding()
    big = 1 << 20  # one export at the flush, as the loop's region has
    provider.add_span_processor(
        BatchSpanProcessor(encoding, max_queue_size=big, max_export_batch_size=big, schedule_delay_millis=1e9)
    )
    if path == "sdk":
        provider.add_span_processor(SpanProcessor())  # a processor of the user's: the SDK's path for every span
    tracer = provider.get_tracer("torch_otel", "bench")
    direct = direct_spans(tracer)
    if path == "direct" and direct is not None:
        direct.emits = None  # phase spans as finished spans
    assert (direct is None) == (path == "sdk") and (path == "direct" or direct is None or direct.emits is not None)
    meter_provider = MeterProvider(shutdown_on_exit=False)
    store = series_store()  # as the pipeline builds them (torch_otel._pipeline.build.metrics_backends): one store for both
    backends = [
        PrometheusBackend(CollectorRegistry(), store=store),
        # the histograms the bridge exports where it built the meter provider (its default: torch_otel._otel.providers)
        OTelBackend(meter_provider.get_meter("torch_otel", "bench"), histograms=MeterHistograms(exemplars=True), store=store),
    ]
    mapper = SpanMapper(tracer, Settings(), live=False)
    spans, series = path != "metrics", path != "spans"
    metrics = CompileMetrics(backends, run_id="bench")

    def once() -> None:
        for rec in records:
            metrics.on_start(rec)
            if spans:
                ids = mapper.emit(rec)
                if ids is not None:
                    rec.trace_id, rec.span_id = ids
            if series:
                metrics.on_finish(rec)
        provider.force_flush()

    once()  # the caches' first fill, the encoder's check against the SDK's: once per process, outside the region
    import gc

    gc.collect()
    _callgrind("on")
    for _ in range(rounds):
        once()
    _callgrind("off")
    print(json.dumps({"records": len(records), "rounds": rounds, "bytes_sent": encoding.sent}), flush=True)


def _callgrind(state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True, check=True)


def count(log: Path, path: str, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.cost.sink_instructions",
                "--child",
                str(log),
                path,
                str(rounds),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"},
            check=True,
        )
        facts = json.loads(run.stdout.strip().splitlines()[-1])
        ir = next(int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("totals:"))
    n = facts["records"] * rounds
    return {"path": path, "instructions": ir, "records": n, "per_record": ir / n, "bytes_sent": facts["bytes_sent"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--paths", default="bytes,direct,sdk")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--log", help="a TORCH_TRACE log to replay (default: the compile loop's, made now)")
    ap.add_argument("--out", help="write the counts here (JSON)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(args.log) if args.log else make_log(Path(tmp))
        rows = [count(log, p, args.rounds) for p in args.paths.split(",")]
    base = rows[0]["per_record"]
    print("| path | instructions per compile record | vs the first |\n|---|---|---|")
    for r in rows:
        print(f"| {r['path']} | {r['per_record']:,.0f} | {r['per_record'] / base:.3f} |")
    if args.out:
        command = " ".join(["python -m bench.cost.sink_instructions", *sys.argv[1:]])
        Path(args.out).write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
