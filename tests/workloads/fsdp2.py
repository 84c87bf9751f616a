"""A 2-layer transformer sharded with FSDP2 (``fully_shard``) on gloo, whose training step is compiled with the
model call inside a user's context manager (a ``@contextmanager`` timer, as training loops have).

FSDP2's hooks call a function dynamo will not trace (``torch._dynamo.disable``: graph break GB0007). Under the
user's context manager dynamo cannot resume after it, so it skips the whole step frame, which runs in eager, and the
compile fails (``Unsupported``). Run under ``torch-otel run -- torchrun`` with ``TORCH_TRACE`` set:

    python -m torch.distributed.run --nproc-per-node 2 fsdp2.py OUT_DIR [train]

With ``train``, the model itself is compiled with ``dynamic=False`` and trained four steps, its sequence length
changing every step: every frame recompiles at every step, on both ranks (a run summary that fills its screen).

It writes ``OUT_DIR/counters-<rank>.json`` (torch's own ``unimplemented`` and ``graph_break`` counters) and
``OUT_DIR/metrics-<rank>.txt`` (this process's /metrics exposition), after the bridge processed every compile.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from prometheus_client import REGISTRY, generate_latest
from torch._dynamo.utils import counters
from torch.distributed.fsdp import fully_shard

import torch_otel

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True) for _ in range(2)])
for layer in model:
    fully_shard(layer)
fully_shard(model)


@contextlib.contextmanager
def timer() -> Iterator[None]:
    yield


if len(sys.argv) > 2 and sys.argv[2] == "train":
    # a training loop: the model and its loss compiled with dynamic=False, the sequence length changing every step:
    # both frames recompile at every step
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    loss = torch.compile(lambda y: (y.pow(2).mean(-1) + y.std(-1)).sum(), backend="aot_eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for seq in (5, 7, 9, 11):
        loss(compiled(torch.randn(2, seq, 16))).backward()
        opt.step()
        opt.zero_grad()
else:

    @torch.compile(backend="aot_eager")
    def step(x: torch.Tensor) -> torch.Tensor:
        with timer():
            return model(x).sum()

    for _ in range(2):
        step(torch.randn(2, 5, 16)).backward()

torch_otel.force_flush()
out.mkdir(parents=True, exist_ok=True)
unimplemented = {k: v for k, v in counters["unimplemented"].items()}
(out / f"counters-{rank}.json").write_text(
    json.dumps({"unimplemented": unimplemented, "graph_break": sum(counters["graph_break"].values())})
)
(out / f"metrics-{rank}.txt").write_bytes(generate_latest(REGISTRY))
dist.destroy_process_group()
