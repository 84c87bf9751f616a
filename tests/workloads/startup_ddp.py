"""A 3-rank DDP job on gloo whose rank ``LATE_RANK`` loads its weights ``LATE_S`` seconds late.

``torchrun --nproc-per-node 3 startup_ddp.py WEIGHTS``: each rank loads the same weights with ``torch.load`` (the
late rank's ``map_location`` sleeps before its first storage: slow storage, inside the weight load), wraps the model
in DDP (whose constructor checks and broadcasts the parameters: the first collectives, where the other ranks wait for
the late one), compiles it (``aot_eager``) and trains two steps. ``STARTUP_OUT`` (``{rank}`` filled in): the start-up
recorder on (tests/workloads/startup_probe.py). Stamps: ``imports0/1``, ``dist0/1`` (init_process_group),
``weights0/1``, ``ddp0/1`` (the DDP constructor), ``step0/1``.
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code

startup_probe.stamp("imports0")
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

startup_probe.stamp("imports1")
rank = int(os.environ["RANK"])
late_rank, late_s = int(os.environ.get("LATE_RANK", "2")), float(os.environ.get("LATE_S", "3"))
weights = sys.argv[1]

startup_probe.stamp("dist0")
dist.init_process_group("gloo")
startup_probe.stamp("dist1")
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
slept = []


def slow_storage(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
    if not slept:
        slept.append(1)
        time.sleep(late_s)
    return storage


startup_probe.stamp("weights0")
state = torch.load(weights, map_location=slow_storage if rank == late_rank else "cpu", weights_only=True)
model.load_state_dict(state)
startup_probe.stamp("weights1")
startup_probe.stamp("ddp0")
ddp = DistributedDataParallel(model)
startup_probe.stamp("ddp1")
compiled = torch.compile(ddp, backend="aot_eager")
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
torch.manual_seed(rank)
for step in range(2):
    if not step:
        startup_probe.stamp("step0")
    loss = compiled(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    startup_probe.stamp(("step1", "step2")[step])
dist.barrier()
dist.destroy_process_group()
