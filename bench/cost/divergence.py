"""What cross-rank divergence detection adds per compile at default capture, measured directly.

``python -m bench.cost.divergence [--reps 7]`` (about 30 s). Two parts, each timed with
``time.thread_time`` in paired, alternating blocks on the thread that runs it:

1. The hook on ``torch._inductor.debug.log_collective_schedule``, which torch calls once per
   inductor graph it schedules: torch's function alone against torch-otel's wrapper of it, both
   called with the same argument. The wrapper's own work does not depend on the graph (torch
   gathers the op names; the wrapper only takes them), so an empty node list measures it.
2. The fingerprint fold the worker thread does once per finished compile, on the compiles of a
   real 3-rank inductor log (tests/data/cold-cache-cpp-3-ranks), and on one with 64 graphs of
   collectives.

Both are put against the compile they belong to: the inductor compile in that log. Writes
``bench/results/divergence_results.json`` and prints a markdown table. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench import RESULTS, ROOT


def _per_call(fn, arg, n: int) -> float:  # noqa: ANN001
    t0 = time.thread_time()
    for _ in range(n):
        fn(arg)
    return (time.thread_time() - t0) / n


def hook_cost(reps: int, n: int = 20000) -> dict[str, float]:
    import torch  # noqa: F401
    import torch._inductor.debug as dbg
    from opentelemetry.sdk.trace import TracerProvider

    import torch_otel

    orig = dbg.log_collective_schedule
    torch_otel.instrument(TracerProvider(), registry=None)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    bridge = torch_otel._pipeline.bridge.current()
    assert bridge is not None
    hooked = dbg.log_collective_schedule
    assert hooked is not orig
    plain, wrapped = [], []
    for i in range(reps):
        pair = [(orig, plain), (hooked, wrapped)]
        for fn, out in pair if i % 2 == 0 else reversed(pair):
            out.append(_per_call(fn, [], n))
        bridge.capture._pending.clear()  # the queued events are not this measure's
    torch_otel.uninstrument()
    added = [w - p for w, p in zip(wrapped, plain, strict=True)]
    return {
        "torch_us": statistics.median(plain) * 1e6,
        "hooked_us": statistics.median(wrapped) * 1e6,
        "added_us": statistics.median(added) * 1e6,
        "added_min_us": min(added) * 1e6,
        "added_max_us": max(added) * 1e6,
    }


def fold_cost(reps: int, n: int = 2000) -> dict[str, float]:
    from torch_otel._analysis.divergence import RankFingerprints
    from torch_otel._assemble.assembler import CompileRecord, Sink
    from torch_otel._model.events import GraphScheduleEvent
    from torch_otel._parse.trace_log import ReplayStats
    from torch_otel._pipeline.replay import replay_file

    class Keep(Sink):
        def __init__(self) -> None:
            self.records: list[CompileRecord] = []

        def on_finish(self, record: CompileRecord) -> None:
            self.records.append(record)

    keep = Keep()
    for log in sorted((ROOT / "tests" / "data" / "cold-cache-cpp-3-ranks").glob("*.log.gz")):
        replay_file(log, [keep], ReplayStats())
    real = keep.records
    big = real[0]
    many = CompileRecord(big.kind, big.compile_id, big.root, rank=0, metrics=big.metrics)
    many.schedules = [GraphScheduleEvent(big.compile_id, ["torch.ops._c10d_functional.all_reduce_.default"] * 8)] * 64
    out: dict[str, float] = {"compile_s": max(r.duration_s for r in real)}
    for name, recs in (("real", real), ("64_graphs", [many])):
        times = []
        for _ in range(reps):
            fp = RankFingerprints()
            t0 = time.thread_time()
            for i in range(n):
                fp.add(str(i % 3), recs[i % len(recs)])
            times.append((time.thread_time() - t0) / n)
        out[f"{name}_us"] = statistics.median(times) * 1e6
    return out


def table(r: dict[str, dict[str, float]]) -> str:
    h, f = r["hook"], r["fold"]
    per_compile_us = h["added_us"] + f["real_us"]
    return "\n".join(
        [
            "| part | measured | per compile |",
            "|---|---|---|",
            f"| schedule hook, per inductor graph (on torch's thread) | torch's function {h['torch_us']:.2f} µs, hooked "
            f"{h['hooked_us']:.2f} µs: **+{h['added_us']:.2f} µs** [{h['added_min_us']:.2f}, {h['added_max_us']:.2f}] | one call per graph |",
            f"| fingerprint fold (worker thread) | **{f['real_us']:.1f} µs** per compile of the real log; "
            f"{f['64_graphs_us']:.1f} µs with 64 graphs of collectives | one per compile |",
            f"| together, against that log's inductor compile ({f['compile_s']:.2f} s) | {per_compile_us:.1f} µs | "
            f"**{per_compile_us / (f['compile_s'] * 1e6):.6%}** of the compile |",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    results = {"hook": hook_cost(args.reps), "fold": fold_cost(args.reps)}
    (RESULTS / "divergence_results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"Measured with `python -m bench.cost.divergence --reps {args.reps}`.\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
