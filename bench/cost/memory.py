"""Memory past the bridge's bounds, at full size: N new frame compiles with and without the bridge, side by side.

``python -m bench.cost.memory [N]`` (default 6,000; about 15 minutes on 2 cores). Runs tests/workloads/many.py (a fifth of
the compiles fail, half of those inside a phase; torch's caches reset every 500) twice at once, one process per
core: with the bridge (spans to an OTLP-JSON file, metrics served) and without. torch itself grows by some KB per
compile, so the bridge's share is the difference of the two growths from compile 2,000 to the end. The bridge
remembers at most 4,096 recent compiles, so the default N goes 1,904 past that bound. Prints both reports and the
difference; nothing here asserts a size (tests/test_faults.py checks a short run with a smaller bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import ROOT

MANY = ROOT / "tests" / "workloads" / "many.py"
MALLOC = {"MALLOC_TRIM_THRESHOLD_": "268435456", "MALLOC_MMAP_THRESHOLD_": "67108864"}  # as the test runs it


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    with tempfile.TemporaryDirectory() as tmp:
        bridged_env = {
            **os.environ,
            **MALLOC,
            "OTEL_TRACES_EXPORTER": "none",
            "TORCH_OTEL_TRACES_FILE": str(Path(tmp) / "spans.jsonl"),
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_PORT": "0",
        }
        plain_env = {**os.environ, **MALLOC, "WITH_BRIDGE": "0"}
        procs = [
            subprocess.Popen([sys.executable, str(MANY), str(n)], env=env, stdout=subprocess.PIPE, text=True)
            for env in (bridged_env, plain_env)
        ]
        outs = [p.communicate()[0] for p in procs]
    bridged, plain = (json.loads(o.strip().splitlines()[-1]) for o in outs)
    since = "after_2000" if n > 2000 else "after_1000"
    growth = [r["rss_mb"]["end"] - r["rss_mb"][since] for r in (bridged, plain)]
    print(json.dumps({"bridged": bridged, "plain": plain}, indent=1))
    print(
        f"\n{n} compiles: RSS growth from {since.replace('_', ' ')} to the end: {growth[0]:.1f} MB with the bridge, "
        f"{growth[1]:.1f} MB without; the bridge's share {growth[0] - growth[1]:+.1f} MB"
    )


if __name__ == "__main__":
    main()
