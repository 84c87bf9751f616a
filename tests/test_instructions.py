"""The cost guard (issue 53): default capture adds at most 1.01 times no bridge's instructions to the compile loop.

The goal is at most 1.01 times no bridge; it is met (1.0092 on this loop, 4 recompiles, torch 2.13, counted on
2026-11-30; 1.0116 for the code before that day's cuts), and the guard fails past ``LIMIT``, the goal itself.

``bench/cost/instructions.py`` counts it, with its smallest compile loop: no bridge, then default capture as a user turns it
on (``import torch_otel.auto``, spans over OTLP/gRPC to a real rotel, flushed inside the region), each in a process of
its own under valgrind's callgrind, instrumented around the region only. An instruction count, not a time: a loaded
machine does not move it, so this is no timing assert. One count still moves by up to 0.1% from the next (torch's own
work alone does, with no bridge: 1.8639 G and 1.8661 G), always upward from the least: each mode is counted twice and
its least count taken. Marked ``instructions`` (``-m "not instructions"`` leaves it out); off CI it skips in one line
where valgrind is not installed, on CI it fails. About 5 minutes of CPU (four processes of about a minute and a
quarter, two at a time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import run
from tests.servers import require

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1.01  # default capture / no bridge, at most: issue 53's goal (1.0092 counted on 2026-11-30)
COMPILES = 4  # recompiles (forward and backward) in the counted region

pytestmark = pytest.mark.instructions


def test_default_capture_adds_no_more_instructions_to_the_compile_loop_than_counted(tmp_path: Path) -> None:
    require("valgrind", "valgrind")
    require("callgrind_control", "valgrind")
    out = tmp_path / "instructions.json"
    argv = [sys.executable, "-m", "bench.cost.instructions", "--only", "loop", "--modes", "none,default"]
    argv += ["--reps", "2", "--compiles", str(COMPILES), "--jobs", "2", "--out", str(out)]
    done = run(argv, cwd=ROOT, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    loop = json.loads(out.read_text())["loop"]
    # each mode's least count: the one its run's own variation added least to
    none, default = (min(loop["runs"][mode], key=lambda r: r["ir"]) for mode in ("none", "default"))
    # the bridge did its work inside the region: the compiles' spans were encoded and sent there
    assert default["by_kind"].get("export", 0) > 0, default["by_kind"]
    assert none["by_kind"].get("export", 0) == 0, none["by_kind"]
    ratio = default["ir"] / none["ir"]
    by_thread = {k: v - none["by_kind"].get(k, 0) for k, v in default["by_kind"].items()}
    assert ratio <= LIMIT, (
        f"default capture counted {ratio:.4f}x the instructions of no bridge on {COMPILES} recompiles "
        f"({default['ir']:,} against {none['ir']:,}); added by thread: {by_thread}. "
        "Where they go: .venv/bin/python -m bench.cost.instructions profile loop default"
    )
