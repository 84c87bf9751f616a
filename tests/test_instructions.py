"""The cost guard (issue 53): what default capture adds to the compile loop, counted in instructions, may not grow.

The goal is at most 1.01 times no bridge, and it is met: 1.0094 on this loop (4 recompiles, torch 2.13), the mean of
ten counts made on 2026-11-30 (1.0116 for the code before that day's cuts). One count of one build moves with where the
process's objects lie in memory (address-space randomization: torch's own work alone reads 1.8639 G and 1.8661 G in
two counts, and default capture's ratio one layout, fixed, reads 1.0117). The layout follows the process's start (its
environment, its folder): counts of one mode in one environment agree to 0.03%, so the guard counts each mode once,
and fails past ``LIMIT``: the goal, plus the spread between layouts (docs/benchmarks.md). This test's own environment
read 1.0109 and 1.0116 on 2026-11-30: the layouts differ in CPython's type attribute cache (indexed by the address of
an attribute's name) and obmalloc's frees, in torch's work, while the bridge's own bytecodes are the same.

``bench/cost/instructions.py`` counts it, with its smallest compile loop: no bridge, then default capture as a user turns it
on (``import torch_otel.auto``, spans over OTLP/gRPC to a real rotel, flushed inside the region), each in a process of
its own under valgrind's callgrind, instrumented around the region only. An instruction count, not a time: a loaded
machine does not move it, so this is no timing assert. Marked ``instructions`` (``-m "not instructions"`` leaves it
out); off CI it skips in one line where valgrind is not installed, on CI it fails. About 4 minutes of CPU (two
processes of about two minutes, run side by side).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run
from tests.servers import require

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1.013  # default capture / no bridge, at most: the goal, 1.01 (1.0094 counted on 2026-11-30), and the layouts' spread
COMPILES = 4  # recompiles (forward and backward) in the counted region

pytestmark = pytest.mark.instructions


def test_default_capture_adds_no_more_instructions_to_the_compile_loop_than_counted(tmp_path: Path) -> None:
    require("valgrind", "valgrind")
    require("callgrind_control", "valgrind")
    out = tmp_path / "instructions.json"
    argv = [sys.executable, "-m", "bench.cost.instructions", "--only", "loop", "--modes", "none,default"]
    argv += ["--reps", "1", "--compiles", str(COMPILES), "--jobs", "2", "--out", str(out)]
    done = run(argv, cwd=ROOT, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    loop = json.loads(out.read_text())["loop"]
    runs = loop["runs"]
    # the bridge did its work inside the region: the compiles' spans were encoded and sent there
    assert all(r["by_kind"].get("export", 0) > 0 for r in runs["default"]), [r["by_kind"] for r in runs["default"]]
    assert all(r["by_kind"].get("export", 0) == 0 for r in runs["none"]), [r["by_kind"] for r in runs["none"]]
    none, default = (_mean(runs[mode]) for mode in ("none", "default"))  # one count each
    ratio = default["ir"] / none["ir"]
    by_thread = {k: round(v - none["by_kind"].get(k, 0)) for k, v in default["by_kind"].items()}
    assert ratio <= LIMIT, (
        f"default capture counted {ratio:.4f}x the instructions of no bridge on {COMPILES} recompiles "
        f"({default['ir']:,.0f} against {none['ir']:,.0f}); added by thread: {by_thread}. "
        "Where they go: .venv/bin/python -m bench.cost.instructions profile loop default"
    )


def _mean(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of a mode's counts: in all, and by kind of thread."""
    kinds = {k for c in counts for k in c["by_kind"]}
    return {
        "ir": sum(c["ir"] for c in counts) / len(counts),
        "by_kind": {k: sum(c["by_kind"].get(k, 0) for c in counts) / len(counts) for k in kinds},
    }
