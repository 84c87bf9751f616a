"""A small model compiled with inductor, forward and backward, on the cache directory the caller names.

Run with the bridge on (``torch_otel.auto``) and ``TORCH_TRACE`` set, once per scenario of tests/test_caches.py:

    python caches.py OUT_DIR [cold|warm|config|shape|bypass|code|print_in_loop|rename|break|infer|frozen|bf16]

- ``config``: an inductor config that is part of the FX graph cache key flipped (``size_asserts``);
- ``shape``: another batch size (a new input shape, no dynamic shapes);
- ``bypass``: a post-grad custom pass torch cannot hash, so the FX graph cache is bypassed;
- ``code``: the model's code changed (gelu where it had relu): the graph's code, and with it its backward's inputs;
- ``print_in_loop``: a ``print`` inside a ``for`` loop of ``forward``: a graph break in a loop, so torch skips the
  whole frame, which runs in eager (nothing is compiled; its first line is the same, so its frame is the same);
- ``rename``: the layer renamed (``proj``): the graph dynamo hands over changes, the graphs inductor compiles do not;
- ``break``: a graph break before the layer: the graph before it takes ``x`` alone;
- ``infer``: inference (``no_grad``), no backward; ``frozen``: the same with inductor's ``freezing`` on, which torch
  bypasses both caches for;
- ``RANK_BATCH``: under torchrun, each rank's batch is this plus its rank (every rank compiles graphs of its own);
- ``PROVENANCE``: inductor's provenance tracking on (each kernel's user line, in torch's record of the compile).
Under torchrun, ``ODD_RANK`` names a rank that runs with another inductor config (``max_fusion_size``) than the
others: a key part that changes no generated code, so the rank misses where the others hit.

It writes ``OUT_DIR/counters-<rank>.json`` (torch's own cache counters) and ``OUT_DIR/metrics-<rank>.txt`` (this
process's /metrics exposition), after the bridge processed every compile.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch  # noqa: E402

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out = Path(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "cold"
rank = int(os.environ.get("RANK", "0"))
if os.environ.get("WORLD_SIZE"):
    import torch.distributed as dist

    dist.init_process_group("gloo")
if mode == "config":
    torch._inductor.config.size_asserts = not torch._inductor.config.size_asserts
if os.environ.get("ODD_RANK") == str(rank):
    torch._inductor.config.max_fusion_size -= 1
if os.environ.get("PROVENANCE"):  # inductor records which user line each kernel came from (its provenance)
    torch._inductor.config.trace.provenance_tracking_level = 1
if mode == "frozen":  # inductor's freezing: torch bypasses its caches whenever it is on
    torch._inductor.config.freezing = True
if mode == "bypass":

    def post_pass(graph: torch.fx.Graph) -> None:  # a plain function: torch cannot hash it into a key
        return None

    torch._inductor.config.post_grad_custom_post_pass = post_pass


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = torch.nn.functional.gelu if mode == "code" else torch.relu
        for step in range(2 if mode == "print_in_loop" else 0):
            print("step", step)
        if mode == "break":  # a graph break before the layer: the graph before it takes x alone, not the weights
            x = x * 1.0
            torch._dynamo.graph_break()
        return act(self.lin(x)).sum()


class Renamed(torch.nn.Module):
    """The same model, its layer renamed (``proj``): the graph dynamo hands over names it, the graphs inductor compiles
    do not."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x)).sum()


torch.manual_seed(0)
model = torch.compile(Renamed() if mode == "rename" else Model(), backend="inductor", dynamic=False)
batch = int(os.environ["RANK_BATCH"]) + rank if os.environ.get("RANK_BATCH") else 8 if mode == "shape" else 4
x = torch.randn(batch, 8, requires_grad=mode not in ("infer", "frozen"))
if mode == "bf16":  # the same step under autocast (bf16 on CPU), as a mixed-precision run changes it
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x).backward()
elif mode in ("infer", "frozen"):  # inference: freezing folds the weights in, and applies only without grad
    with torch.no_grad():
        model(x)
else:
    model(x).backward()

from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import torch_otel  # noqa: E402

torch_otel.force_flush()
if os.environ.get("WORLD_SIZE"):
    dist.barrier()  # every rank has compiled before any writes its key index (at exit)
out.mkdir(parents=True, exist_ok=True)
(out / f"counters-{rank}.json").write_text(json.dumps({k: dict(counters[k]) for k in ("inductor", "aot_autograd")}))
(out / f"metrics-{rank}.txt").write_bytes(generate_latest(REGISTRY))
if os.environ.get("WORLD_SIZE"):
    dist.destroy_process_group()
