"""Modules compiled the ways a user compiles them, for the frame names (tests/test_frame_names.py), with the bridge on.

- ``MyModel`` and ``Encoder``: two classes of the user's own, each with its own ``forward``: torch compiles that
  ``forward``, whose code object is named ``forward`` in both;
- an ``nn.Sequential`` and ``MyStack``, a subclass that keeps torch's ``forward``: torch compiles each through its own
  wrapper (``wrap_inline``'s ``inner`` on torch 2.10 to 2.15), one frame to torch for both;
- ``step``, a plain function.

Each is called from a line of its own, marked ``# call: NAME`` (the test finds the lines in this file), with a
backward for the first. ``WITH_BRIDGE=0`` runs it without the bridge.
"""

import os

if os.environ.get("WITH_BRIDGE", "1") == "1":
    import torch_otel.auto  # noqa: F401

import torch
from torch import nn


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l1(x).relu()


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l1(x).tanh()


class MyStack(nn.Sequential):
    pass


def step(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum()


model = torch.compile(MyModel(), backend="aot_eager")
encoder = torch.compile(Encoder(), backend="eager")
seq = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="eager")
stack = torch.compile(MyStack(nn.Linear(8, 8), nn.Tanh()), backend="eager")
compiled_step = torch.compile(step, backend="eager")
x = torch.randn(4, 8)
model(x).sum().backward()  # call: MyModel
encoder(x)  # call: Encoder
seq(x)  # call: Sequential
stack(x)  # call: MyStack
compiled_step(x)  # call: step
print("done")
