"""What the rank sampler saves the bridge per compile: building a kept compile's spans against dropping it.

``python -m bench.cost.sampler [LOG] [--reps 30]`` (about 20 s). The compiles of a real inductor log (default: rank 0
of tests/data/cold-cache-cpp-3-ranks) are assembled once; then the span mapper turns each into spans, timed with
``time.thread_time`` in paired, alternating blocks, on a provider with a batch processor and an exporter that
drops what it gets (so export is not timed): once with the SDK's default sampler (every compile kept) and once with
``torch_otel_rank`` naming no rank (every compile dropped, as on a further rank). Prints a markdown table;
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from bench import ROOT
from torch_otel._assemble.assembler import CompileRecord, Sink  # noqa: E402
from torch_otel._parse.trace_log import ReplayStats  # noqa: E402
from torch_otel._pipeline.replay import replay_file  # noqa: E402
from torch_otel._sinks.spans import SpanMapper  # noqa: E402
from torch_otel.sampling import RankSampler  # noqa: E402


class _Drop(SpanExporter):
    def export(self, spans: Sequence[object]) -> SpanExportResult:  # type: ignore[override]
        return SpanExportResult.SUCCESS


class _Keep(Sink):
    def __init__(self) -> None:
        self.records: list[CompileRecord] = []

    def on_finish(self, record: CompileRecord) -> None:
        self.records.append(record)


def _mapper(sampler: object | None) -> tuple[SpanMapper, TracerProvider]:
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()  # type: ignore[arg-type]
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=100_000))
    return SpanMapper(provider.get_tracer("bench"), live=False), provider


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "log", nargs="?", default=str(ROOT / "tests/data/cold-cache-cpp-3-ranks/dedicated_log_torch_trace_rank_0.log.gz")
    )
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    keep = _Keep()
    replay_file(Path(a.log), [keep], ReplayStats())
    records = keep.records
    spans = sum(sum(1 for _ in r.root.walk()) for r in records)
    kept, kept_p = _mapper(None)
    dropped, dropped_p = _mapper(RankSampler("none", slow_factor=1e9))
    times: dict[str, list[float]] = {"kept": [], "dropped": []}
    for _ in range(a.reps):
        for name, mapper in (("kept", kept), ("dropped", dropped)):
            t0 = time.thread_time()
            for r in records:
                mapper.emit(r)
            times[name].append((time.thread_time() - t0) / len(records))
    kept_p.shutdown()
    dropped_p.shutdown()
    k, d = statistics.median(times["kept"]), statistics.median(times["dropped"])
    print(f"{len(records)} compiles of {Path(a.log).name}, {spans / len(records):.0f} spans each, {a.reps} paired blocks\n")
    print("| compile | bridge CPU per compile (median) |\n|---|---|")
    print(f"| kept (every span built) | {k * 1e6:.0f} µs |")
    print(f"| dropped by `torch_otel_rank` | {d * 1e6:.0f} µs ({d / k:.1%} of kept) |")


if __name__ == "__main__":
    main()
