"""A job of two nodes for the collector pipeline test (tests/test_collector_pipeline.py), run by torchrun on each.

Every rank runs three phases; each waits for the file ``$GO_DIR/<phase>`` and ends by printing ``rank R phase P``:

- ``a``: tests/workloads/mixed.py (a graph break and its backward, recompiles, a failed compile, a recompile-limit
  hit; compiled autograd on rank 0), ``ROUTINE`` routine frames, on rank 0 a compile whose backend takes ``SLOW_S``
  seconds and an inductor compile (a matmul: cache lookups, no C++ to build);
- ``b``: ``ROUTINE`` more routine frames (the test stops a gateway before this phase and starts it after);
- ``c``: ``ROUTINE_C`` more (3 times ``ROUTINE`` unless set: enough traces that both gateways' shares show), and the
  odd rank (``ODD_RANK``) alone recompiles one of them with a new shape.

Then it prints ``rank R HOLDING`` and keeps exporting metrics until ``$GO_DIR/release`` exists.
"""

import os
import runpy
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
ODD = int(os.environ.get("ODD_RANK", "2"))
ROUTINE = int(os.environ.get("ROUTINE", "4"))
ROUTINE_C = int(os.environ.get("ROUTINE_C", str(3 * ROUTINE)))
GO = Path(os.environ["GO_DIR"])
HERE = Path(__file__).parent


def wait_for(name: str) -> None:
    deadline = time.monotonic() + float(os.environ.get("HOLD_SECONDS", "300"))
    while not (GO / name).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def routine(phase: str, n: int = ROUTINE) -> list:
    """``n`` new frames, each compiled once (a frame is a code object: each gets its own)."""
    made = []
    for i in range(n):
        ns: dict = {}
        exec(compile(f"def routine_{phase}{i}(x):\n    return x * {i + 2} + 1\n", f"fleet_{phase}{i}.py", "exec"), ns)
        fn = torch.compile(ns[f"routine_{phase}{i}"], backend="eager", dynamic=False)
        fn(torch.randn(4))
        made.append(fn)
    return made


def slow_backend(gm, example_inputs):  # noqa: ANN001, ANN201
    time.sleep(float(os.environ.get("SLOW_S", "5")))
    return gm.forward


def done(phase: str) -> None:
    print(f"rank {RANK} phase {phase}", flush=True)


dist.init_process_group("gloo", timeout=timedelta(seconds=300))

wait_for("a")
if RANK == 0:
    os.environ["COMPILED_AUTOGRAD"] = "1"
runpy.run_path(str(HERE / "mixed.py"), run_name="__main__")
routine("a")
if RANK == 0:
    torch.compile(lambda x: x - 1, backend=slow_backend)(torch.randn(3))
    torch.compile(lambda x: x @ x.t(), backend="inductor")(torch.randn(4, 8))
done("a")

wait_for("b")
routine("b")
done("b")

wait_for("c")
fns = routine("c", ROUTINE_C)
if RANK == ODD:
    fns[0](torch.randn(6))  # a new shape: this rank alone recompiles
done("c")

print(f"rank {RANK} HOLDING", flush=True)
wait_for("release")
dist.destroy_process_group()
sys.exit(0)
