"""A job compiled on one rank (``torch.compiler.config.compile_on_one_rank``, torch 2.14 and later), served to every rank
through the inductor cache they share.

    TORCH_COMPILE_ON_ONE_RANK=1 python -m torch.distributed.run --nproc-per-node 3 one_rank.py OUT_DIR

With the setting on, the graphs hold no device or process group of their own rank, so the one rank 0 compiles
serves the others. Rank 0 compiles first (its FX graph and AOTAutograd lookups miss, and it writes the entries);
the other ranks wait until its compile ended, then compile the same function and hit what rank 0 wrote. The step (inference)
all-reduces its result across ranks inside the compiled function (a functional collective: what would otherwise
bake the process group into the graph).

It writes ``OUT_DIR/counters-<rank>.json`` (torch's own cache counters) and ``OUT_DIR/metrics-<rank>.txt`` (this
process's /metrics exposition), after the bridge processed every compile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
lin = torch.nn.Linear(8, 8)
GROUP = dist.group.WORLD.group_name  # by name: a process group object would be a value of the graph


@torch.compile(backend="inductor", dynamic=False)
def step(x: torch.Tensor) -> torch.Tensor:
    loss = torch.relu(lin(x)).sum()
    return funcol.all_reduce(loss, "sum", GROUP)


def run() -> None:
    with torch.no_grad():
        step(torch.randn(4, 8))


# The one rank that compiles: the others wait until its compile ended (its entries are in the cache) before they call
# the function; rank 0 then waits in the all-reduce for them.
store = dist.distributed_c10d._get_default_store()
if rank == 0:

    @torch._dynamo.callback.on_compile_end
    def compiled(args: object) -> None:
        store.set("compiled_on_rank_0", "1")

else:
    store.wait(["compiled_on_rank_0"])
run()

from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import torch_otel  # noqa: E402

torch_otel.force_flush()
dist.barrier()  # every rank has compiled before any writes its key index (at exit)
out.mkdir(parents=True, exist_ok=True)
(out / f"counters-{rank}.json").write_text(json.dumps({k: dict(counters[k]) for k in ("inductor", "aot_autograd")}))
(out / f"metrics-{rank}.txt").write_bytes(generate_latest(REGISTRY))
dist.destroy_process_group()
