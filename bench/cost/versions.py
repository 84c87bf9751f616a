"""Did a change of the package's insides change what default capture costs? Two versions' compile loops, paired.

    python -m bench.cost.versions --base REF [--reps N] [--capture default|full]

The compile loop of ``bench/cost/zero_cost.py`` (24 ``aot_eager`` recompiles of an MLP, forward and backward, the bridge
turned on by ``import torch_otel.auto`` and exporting over OTLP/gRPC to a real rotel on loopback; every thread's CPU
from after the warm-up compile to after ``torch_otel.force_flush()``), one fresh process per run: no
instrumentation, the package as it is at ``--base`` (``git archive`` of its ``torch_otel``, first on
``PYTHONPATH``) and the working tree's, in a rotated order each repetition. Both are timed by the working tree's loop
(its bridge's hooks timed on torch's path with ``thread_time``, a garbage collection one of them happens to start
counted apart).

Prints, per version, the bridge's CPU measured directly (its hooks, its worker thread, the SDK's export threads and
gRPC's), each part's median, and the whole process's CPU against no instrumentation's in the same repetition, as
``median [min, max]``. Writes ``bench/results/versions_results.json``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from bench.cost.measure import child, spread
from bench.cost.zero_cost import BRIDGE_GROUPS, PY


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the git ref whose torch_otel is the reference")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--capture", choices=("default", "full"), default="default")
    args = p.parse_args(argv)
    from tests.servers import Rotel

    work = Path(tempfile.mkdtemp(prefix="versions-"))
    base_tree = work / "base"
    base_tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", args.base, "torch_otel", "bench"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive.stdout, check=True)
    trees = {"base": base_tree, "new": ROOT}
    for side, tree in trees.items():
        probe = "import sys, torch_otel; sys.exit(0 if torch_otel.__file__.startswith(sys.argv[1]) else 9)"
        if (
            subprocess.run([PY, "-c", probe, str(tree)], env={"PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}, cwd=tree).returncode
            != 0
        ):
            raise SystemExit(f"versions: {side}'s torch_otel ({tree}) is not the one imported")
    runs: dict[str, list[dict[str, Any]]] = {"none": [], "base": [], "new": []}
    order = list(runs)
    with Rotel(debug=False) as rotel:
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_SERVICE_NAME": "bench"}
        for rep in range(args.reps):
            k = rep % len(order)
            for which in order[k:] + order[:k]:
                tree = trees.get(which, ROOT)  # its torch_otel first; bench/ from the working tree
                env = {**otlp, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}
                if which != "none":
                    env["TORCH_OTEL_CAPTURE"] = args.capture
                mode = "none" if which == "none" else args.capture
                _, _, _, out = child([PY, "-m", "bench.cost.zero_cost", "loop", mode], env, cwd=tree)
                runs[which].append(json.loads(out.strip().splitlines()[-1]))
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    results = {"base": args.base, "capture": args.capture, "reps": args.reps, "runs": runs}
    (RESULTS / "versions_results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


def table(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [
        f"{results['capture']} capture, {results['reps']} repetitions (base {results['base']}): median [min, max] seconds",
        "",
    ]
    lines += ["| part | base | new |", "|---|---|---|"]
    for g in BRIDGE_GROUPS:
        cells = [spread([r["threads"].get(g, 0.0) for r in runs[side]]) for side in ("base", "new")]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    bridge = {
        side: [sum(v for g, v in r["threads"].items() if g in BRIDGE_GROUPS) for r in runs[side]] for side in ("base", "new")
    }
    gc_row = "garbage collections begun inside the hooks (torch's heap; in the main thread's figure)"
    lines.append(
        f"| ({gc_row}) | " + " | ".join(spread([r["threads"].get(gc_row, 0.0) for r in runs[s]]) for s in ("base", "new")) + " |"
    )
    lines.append("| **the bridge in all** | " + " | ".join(spread(bridge[s]) for s in ("base", "new")) + " |")
    none = [r["cpu_s"] for r in runs["none"]]
    ratios = {s: [r["cpu_s"] / n for r, n in zip(runs[s], none, strict=True)] for s in ("base", "new")}
    lines.append("| whole process CPU / none's, paired | " + " | ".join(spread(ratios[s]) for s in ("base", "new")) + " |")
    share = {s: statistics.median(bridge[s]) / statistics.median(none) for s in ("base", "new")}
    lines.append("| the bridge's share of none's CPU | " + " | ".join(f"{share[s]:.1%}" for s in ("base", "new")) + " |")
    lines.append(f"\nno instrumentation: {spread(none)} s of CPU")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
