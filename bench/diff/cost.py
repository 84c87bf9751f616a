"""``torch-otel diff`` of two large logs against replaying them both: time and peak memory.

``python -m bench.diff.cost [SIZE_MB ...] [--reps N]`` (default 100 and 300 MB, 2 repetitions; about 10 minutes on
2 cores). Two real TORCH_TRACE logs of tests/workloads/diff_pair.py (``base``, and ``graph_break``: a graph break
added) are each repeated with fresh frame ids up to SIZE_MB (tests/synthetic.py), then, alternating:

- ``torch-otel replay BASE -o /dev/null`` and ``torch-otel replay NEW -o /dev/null`` (the two replays, spans built
  and written as a replay does);
- ``torch-otel diff BASE NEW --json /dev/null`` (both read, compared, the new side's misses explained against the
  base's keys).

Prints the medians and peak RSS, and writes them to bench/results/diff_bench_results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from bench.cost.measure import PY, child  # noqa: E402
from tests.synthetic import make_log  # noqa: E402

WORKLOAD = ROOT / "tests" / "workloads" / "diff_pair.py"


def real_logs(tmp: Path) -> tuple[Path, Path]:
    out = []
    for mode in ("base", "graph_break"):
        d = tmp / f"real-{mode}"
        child([PY, str(WORKLOAD), mode], {"TORCH_TRACE": str(d), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
        (log,) = sorted(d.glob("*.log"))
        out.append(log)
    return out[0], out[1]


def bench(size_mb: int, reps: int, base_real: Path, new_real: Path, tmp: Path) -> dict[str, Any]:
    base, new = tmp / f"base-{size_mb}mb.log", tmp / f"new-{size_mb}mb.log"
    make_log(base_real, base, size_mb * 1_000_000)
    make_log(new_real, new, size_mb * 1_000_000)
    mb = (base.stat().st_size + new.stat().st_size) / 1e6
    tool = [PY, "-m", "torch_otel"]
    replay_s: list[float] = []
    replay_cpu: list[float] = []
    replay_rss: list[float] = []
    diff_s: list[float] = []
    diff_cpu: list[float] = []
    diff_rss: list[float] = []
    for rep in range(reps):
        order = ["replay", "diff"] if rep % 2 == 0 else ["diff", "replay"]
        for what in order:
            if what == "replay":
                w1, c1, r1, _ = child([*tool, "replay", str(base), "-o", "/dev/null"], cwd=tmp)
                w2, c2, r2, _ = child([*tool, "replay", str(new), "-o", "/dev/null"], cwd=tmp)
                replay_s.append(w1 + w2)
                replay_cpu.append(c1 + c2)
                replay_rss.append(max(r1, r2))
            else:
                w, c, r, _ = child([*tool, "diff", str(base), str(new), "--json", "/dev/null"], cwd=tmp)
                diff_s.append(w)
                diff_cpu.append(c)
                diff_rss.append(r)
        print(f"{size_mb} MB: repetition {rep + 1} of {reps} done", file=sys.stderr, flush=True)
    base.unlink()
    new.unlink()
    return {
        "size_mb_each": size_mb,
        "total_mb": round(mb, 1),
        "replay_both_s": replay_s,
        "replay_both_cpu_s": replay_cpu,
        "replay_peak_rss_mb": max(replay_rss),
        "diff_s": diff_s,
        "diff_cpu_s": diff_cpu,
        "diff_peak_rss_mb": max(diff_rss),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=int, default=[100, 300])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base_real, new_real = real_logs(tmp)
        for size in args.sizes:
            rows.append(bench(size, args.reps, base_real, new_real, tmp))
    print("| logs | replay both: wall s | CPU s | peak RSS | diff: wall s | CPU s | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = []
        for what in ("replay_both", "diff"):
            w, c = r[f"{what}_s"], r[f"{what}_cpu_s"]
            rss = r["replay_peak_rss_mb" if what == "replay_both" else "diff_peak_rss_mb"]
            cells += [
                f"{statistics.median(w):.1f} [{min(w):.1f}, {max(w):.1f}]",
                f"{statistics.median(c):.1f} [{min(c):.1f}, {max(c):.1f}]",
                f"{rss:.0f} MB",
            ]
        print(f"| {r['size_mb_each']} MB x 2 | " + " | ".join(cells) + " |")
    (RESULTS / "diff_bench_results.json").write_text(json.dumps({"python": PY, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
