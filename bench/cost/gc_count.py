"""Count Python's garbage collections, and their CPU, while running a script: ``python -m bench.cost.gc_count SCRIPT ARGS...``.

    python -m bench.cost.gc_count bench/cost/workloads.py mlp none
    python -m bench.cost.gc_count --preimport bench/cost/workloads.py mlp none    # the bridge's modules imported, unused
    python -m bench.cost.gc_count bench/cost/workloads.py mlp default

Prints one line to stderr at exit: collections per generation, their CPU seconds, objects collected.
A full (generation 2) collection walks every tracked object of the process: torch's heap makes each
one cost 0.1-0.3 s here. This is how the whole-process finding in docs/benchmarks.md was measured.
"""

from __future__ import annotations

import atexit
import gc
import runpy
import sys
import time

counts = [0, 0, 0]
cpu = [0.0, 0.0, 0.0]
collected = [0, 0, 0]
_start = [0.0]


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _start[0] = time.process_time()
        return
    g = info["generation"]
    counts[g] += 1
    cpu[g] += time.process_time() - _start[0]
    collected[g] += info["collected"]


def _report() -> None:
    print(
        f"gc collections {counts}, cpu s {[round(c, 3) for c in cpu]}, collected {collected}, "
        f"tracked objects at exit {len(gc.get_objects())}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    gc.callbacks.append(_on_gc)
    atexit.register(_report)
    args = sys.argv[1:]
    if args and args[0] == "--preimport":
        args = args[1:]
        import torch  # noqa: F401 - first, as in the workloads
        from opentelemetry.sdk.trace import TracerProvider  # noqa: F401
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: F401

        import torch_otel._otel.otlp_json  # noqa: F401
        import torch_otel._pipeline.bridge  # noqa: F401
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
