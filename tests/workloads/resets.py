"""A frame that recompiles between ``torch._dynamo.reset()``s, which number compiles again from ``0/0``.

``python resets.py OUT MODE``, with the bridge on (``torch_otel.auto``), under ``TORCH_TRACE``; CPU.

- ``reuse``: ``f`` compiled twice, a reset after each, so frame 0 is ``f``'s twice; then ``g`` compiles ``0/0`` (frame 0
  again) and recompiles ``0/1`` for a new size (backend ``eager``): two compiles of ``g``, one recompile (the case as
  found; the tests run ``again``, which holds it);
- ``again``: the same with backend ``aot_eager`` and a backward after each call (lazy backwards); then ``h``
  (``dynamic=False``, ``recompile_limit`` 2) at three sizes hits the limit (``1/2``: its third input runs in eager);
  then a reset, and ``g`` and ``h`` compiled afresh (``0/0`` with its backward, ``1/0``): not recompiles, and ``h``'s
  cache is empty, it no longer runs in eager.

Writes ``OUT/torch.json``: torch's own record (each ``CompilationMetrics``: id, code, forward or backward, duration,
``cache_size``, the recompile reason and failure).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out, mode = Path(sys.argv[1]), sys.argv[2]


def f(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def g(x: torch.Tensor) -> torch.Tensor:
    return x.cos() * 2


def h(x: torch.Tensor) -> torch.Tensor:
    return x.tan() - 1


def step(fn: object, n: int, grad: bool) -> None:
    x = torch.randn(n, requires_grad=grad)
    y = fn(x)  # type: ignore[operator]
    if grad:
        y.sum().backward()


if mode not in ("reuse", "again"):
    raise SystemExit(f"unknown mode {mode!r}")
backend, grad = ("eager", False) if mode == "reuse" else ("aot_eager", True)
for _ in range(2):  # f is frame 0 in two generations
    step(torch.compile(f, backend=backend), 8, grad)
    torch._dynamo.reset()
cg = torch.compile(g, backend=backend)
step(cg, 8, grad)  # g 0/0: frame 0 again, after a reset
step(cg, 9, grad)  # g 0/1: a recompile (size)
if mode == "again":
    torch._dynamo.config.recompile_limit = 2
    for n in (2, 3, 4):  # h 1/0, 1/1 (a recompile), 1/2: the limit's, its input runs in eager
        step(torch.compile(h, backend="eager", dynamic=False), n, False)
    torch._dynamo.reset()
    step(torch.compile(g, backend=backend), 8, grad)  # g 0/0: a fresh compile after a reset, not a recompile
    step(torch.compile(h, backend="eager", dynamic=False), 2, False)  # h 1/0 afresh: compiled, not in eager

from torch_record import write  # noqa: E402  (tests/workloads: this script's folder)

write(out, ("co_name", "forward", "duration_us", "cache_size", "recompile_reason", "fail_type"))
