"""Pairs of runs for ``torch-otel diff`` (tests/test_diff.py): one small training loop (aot_eager), one change per MODE.

``python diff_pair.py MODE``, with the bridge on (``torch_otel.auto``) and ``TORCH_TRACE`` set:

- ``base``: a model and a loss function compiled, eight steps of batch 8;
- ``graph_break``: the same, with a graph break in ``loss_fn``;
- ``shapes``: a new batch size every step (8, 16, ... 56), automatic dynamic shapes off as with
  ``torch.compile(dynamic=False)``: the model recompiles each step, up to one short of the recompile limit;
- ``shapes_fixed``: the same batch sizes, with the fixes the run summary names for ``shapes`` applied: dim 0 of
  each frame's input marked dynamic (``torch._dynamo.maybe_mark_dynamic(x, 0)``, ``torch._dynamo.maybe_mark_dynamic(out, 0)``).
"""

import sys

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

MODE = sys.argv[1] if len(sys.argv) > 1 else "base"
if MODE.startswith("shapes"):
    torch._dynamo.config.automatic_dynamic_shapes = False


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    diff = out - target
    if MODE == "graph_break":
        torch._dynamo.graph_break()
    return (diff * diff).mean()


torch.manual_seed(0)
model = torch.compile(Model(), backend="aot_eager")
loss = torch.compile(loss_fn, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8 if not MODE.startswith("shapes") else 7):
    batch = 8 * (step + 1) if MODE.startswith("shapes") else 8
    x, y = torch.randn(batch, 16), torch.randn(4)
    if MODE == "shapes_fixed":
        torch._dynamo.maybe_mark_dynamic(x, 0)
    out = model(x)
    if MODE == "shapes_fixed":
        torch._dynamo.maybe_mark_dynamic(out, 0)
    loss(out, y).backward()
    opt.step()
    opt.zero_grad()
print("done", flush=True)
