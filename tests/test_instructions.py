"""The cost guard (issue 53): what default capture adds to the compile loop, counted in instructions, may not grow.

The goal is at most 1.01 times no bridge. Counted over twelve memory layouts in three checkouts (4 recompiles, torch
2.13, 2026-11-30), default capture reads 1.0113: not met, by about 2.4 M of the 21.1 M instructions it adds. One count
of one build moves with where the process's objects lie in memory: a layout's counts have a standard deviation of
0.065% to 0.086% (CPython's type attribute cache, indexed by the address of an attribute's name, and obmalloc's frees,
in torch's work, while the bridge's own bytecodes are the same). So ``bench/cost/instructions.py`` gives each count an
environment of its own, the same whoever runs it (a few of the runner's variables), and counts rep ``r`` in layout
``r``: a padding of the stack and of the heap, and ``PYTHONHASHSEED=r``. The guard counts each mode once, in layout 0
(the same for both modes): that layout read 1.0102 to 1.0120 in those checkouts, and no layout of any checkout has read
above 1.0134. It fails past ``LIMIT``: above that spread (docs/benchmarks.md), and well below what a deliberate cost of
2% read (an empty loop of 20,000 turns per compile in the span mapper: 1.0287). A second layout per mode (as it counted
until 2026-12-01) halved the spread of what it compares, for two more counts: about 80 s of the suite's two cores.

``bench/cost/instructions.py`` counts it, with its smallest compile loop: no bridge, then default capture as a user turns it
on (``import torch_otel.auto``, spans over OTLP/gRPC to a real rotel, flushed inside the region), each in a process of
its own under valgrind's callgrind, instrumented around the region only. An instruction count, not a time: a loaded
machine does not move it, so this is no timing assert. Marked ``instructions`` (``-m "not instructions"`` leaves it
out); off CI it skips in one line where valgrind is not installed, on CI it fails. About 4 minutes of CPU (two
processes of about two minutes, at once).
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
# default capture / no bridge, at most: what it costs (1.0113 over twelve layouts), and the spread of one layout above
# that (the highest layout seen: 1.0134)
LIMIT = 1.016
COMPILES = 4  # recompiles (forward and backward) in the counted region
LAYOUTS = 1  # each mode counted in this many memory layouts (the same for both modes): their means are compared

pytestmark = pytest.mark.instructions


def test_default_capture_adds_no_more_instructions_to_the_compile_loop_than_counted(tmp_path: Path) -> None:
    require("valgrind", "valgrind")
    require("callgrind_control", "valgrind")
    out = tmp_path / "instructions.json"
    argv = [sys.executable, "-m", "bench.cost.instructions", "--only", "loop", "--modes", "none,default"]
    argv += ["--reps", str(LAYOUTS), "--compiles", str(COMPILES), "--jobs", "2", "--out", str(out)]
    done = run(argv, cwd=ROOT, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    loop = json.loads(out.read_text())["loop"]
    runs = loop["runs"]
    # the bridge did its work inside the region: the compiles' spans were encoded and sent there
    assert all(r["by_kind"].get("export", 0) > 0 for r in runs["default"]), [r["by_kind"] for r in runs["default"]]
    assert all(r["by_kind"].get("export", 0) == 0 for r in runs["none"]), [r["by_kind"] for r in runs["none"]]
    none, default = (_mean(runs[mode]) for mode in ("none", "default"))  # over the layouts
    ratio = default["ir"] / none["ir"]
    by_thread = {k: round(v - none["by_kind"].get(k, 0)) for k, v in default["by_kind"].items()}
    counts = {mode: [r["ir"] for r in runs[mode]] for mode in ("none", "default")}
    print(f"default capture / no bridge, counted in instructions: {ratio:.4f} (the counts: {counts})")  # pytest -s, -rP
    assert ratio <= LIMIT, (
        f"default capture counted {ratio:.4f}x the instructions of no bridge on {COMPILES} recompiles, the mean of "
        f"{LAYOUTS} layouts "
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
