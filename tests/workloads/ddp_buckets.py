"""``DDP(torch.compile(model))`` over gloo: DDP's optimizer splits the frame into one graph per bucket.

Six 1 MB layers and ``bucket_cap_mb=1``: six graphs under compile id 0/0, each with its own lazy
backward. ``torchrun --nproc-per-node 2 --standalone tests/workloads/ddp_buckets.py``
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])
ddp = DDP(torch.compile(model, backend="aot_eager"), bucket_cap_mb=1)
for _ in range(2):
    ddp(torch.randn(8, 512)).sum().backward()
print("rank", dist.get_rank(), "done", flush=True)
dist.destroy_process_group()
