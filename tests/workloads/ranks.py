"""A per-rank workload for torchrun: every rank compiles; rank 1 also recompiles on a new dtype.

``torchrun --nproc-per-node 2 --standalone tests/workloads/hold.py tests/workloads/ranks.py``
with ``import torch_otel.auto`` (``WITH_BRIDGE=1``) activating the bridge in each rank.
"""

import os

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch

torch._dynamo.config.automatic_dynamic_shapes = False
rank = int(os.environ.get("RANK", "0"))
f = torch.compile(lambda x: x.relu() + rank, backend="eager")
f(torch.randn(4))
if rank == 1:
    f(torch.randn(4, dtype=torch.float64))
print("rank", rank, "done", flush=True)
