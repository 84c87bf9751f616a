"""A torchrun job whose ranks compile differently, one way per ``SCENARIO``; the odd rank is ``ODD_RANK``.

``torch-otel run -- torchrun --nproc-per-node 3 --standalone tests/workloads/diverge.py``

- ``control``: every rank compiles the same things, rank r starting ``SKEW_S * r`` seconds late;
- ``shape``: the odd rank calls with a new batch size, so it alone recompiles;
- ``graph_break``: the odd rank alone breaks the graph;
- ``collectives`` (inductor): the odd rank takes a branch with one more functional collective
  (on a group of its own, so the job does not hang here as a real one would);
- ``cold_cache`` (inductor): the odd rank's cache dir is ``COLD_CACHE_DIR``, empty; the others use
  the warm ``TORCHINDUCTOR_CACHE_DIR`` (a first run with ``ODD_RANK=-1`` warms it).

Then it prints ``HOLDING`` and keeps its /metrics port up until ``$RELEASE_FILE`` exists.
"""

import os
import sys
import time
from datetime import timedelta

SCENARIO = os.environ["SCENARIO"]
RANK = int(os.environ["RANK"])
ODD = int(os.environ.get("ODD_RANK", "1"))
if SCENARIO == "cold_cache" and RANK == ODD:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ["COLD_CACHE_DIR"]  # before inductor is imported

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402

dist.init_process_group("gloo", timeout=timedelta(seconds=120))
own = [dist.new_group([r]) for r in range(dist.get_world_size())][RANK]  # every rank must create every group

if SCENARIO == "control":
    time.sleep(float(os.environ.get("SKEW_S", "2")) * RANK)


def fn(x):
    y = torch.sin(x) * 2
    if SCENARIO == "graph_break" and RANK == ODD:
        torch._dynamo.graph_break()
    return y + x.cos()


# Inductor graphs of only a matmul (an extern kernel) and collectives: no C++ to build, so a cold compile is quick.
def with_collectives(x):
    y = funcol.all_reduce(x @ x.t(), "sum", dist.group.WORLD)
    if SCENARIO == "collectives" and RANK == ODD:
        y = funcol.all_reduce(y, "sum", own)
    return y


def matmul(x):
    return x @ x.t()


inductor = {"collectives": with_collectives, "cold_cache": matmul}.get(SCENARIO)
compiled = torch.compile(inductor or fn, backend="inductor" if inductor else "aot_eager", dynamic=False)
x = torch.randn(4, 8)
compiled(x)
compiled(torch.randn(6, 8) if SCENARIO == "shape" and RANK == ODD else x)
print(f"rank {RANK} HOLDING", flush=True)
release = os.environ.get("RELEASE_FILE", "")
deadline = time.monotonic() + float(os.environ.get("HOLD_SECONDS", "300"))
while time.monotonic() < deadline and not (release and os.path.exists(release)):
    time.sleep(0.2)
dist.destroy_process_group()
sys.exit(0)
