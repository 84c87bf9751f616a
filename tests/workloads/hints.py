"""Frames that keep recompiling for a reason other than a size, and the same with the run summary's fix applied.

``python hints.py MODE [fixed]``, with the bridge on (``torch_otel.auto``) and ``TORCH_OTEL_SUMMARY`` set; backend
``eager``. Each MODE recompiles ``step`` for one guard; ``fixed`` applies the hint the summary gives for it:

- ``int``: an int argument that takes a new value each call (6 values), compiled with ``dynamic=False``;
  fixed: ``torch.compile(..., dynamic=True)``;
- ``dtype``: the input in a new dtype each call; fixed: cast before the call (``x.to(torch.float32)``);
- ``requires_grad``: the input with requires_grad on, then off, then on, under a recompile limit of 1, so the frame
  hits it; fixed: the same requires_grad on every call.
"""

from __future__ import annotations

import sys

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

mode = sys.argv[1]
fixed = len(sys.argv) > 2 and sys.argv[2] == "fixed"


def step(x: torch.Tensor, n: int) -> torch.Tensor:
    return (x * n).sin().sum()


if mode == "int":
    f = torch.compile(step, backend="eager", dynamic=True if fixed else False)
    for n in (2, 3, 4, 5, 6, 7):
        f(torch.ones(4), n)
elif mode == "dtype":
    f = torch.compile(step, backend="eager")
    for dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16):
        x = torch.ones(4, dtype=dtype)
        f(x.to(torch.float32) if fixed else x, 2)
elif mode == "requires_grad":
    torch._dynamo.config.recompile_limit = 1
    f = torch.compile(step, backend="eager")
    for grad in (True, False, True, False):
        f(torch.ones(4, requires_grad=True if fixed else grad), 2)
else:
    raise SystemExit(f"unknown mode {mode!r}")
print("done", flush=True)
