"""A size of 1 after automatic dynamic shapes made the dimension dynamic: it falls outside the dynamic graph's range.

``python size_range.py OUT MODE``, with the bridge on (``torch_otel.auto``), under ``TORCH_TRACE``; CPU, backend
``eager``. ``size1``: ``f(x)`` with x of shape [2, 8] (``0/0``), [2, 16] (``0/1``: dim 1 becomes dynamic, its graph
holds the sizes 2 and up), [2, 1] (``0/2``: torch specializes size 1, which fails the guard ``2 <= x.size()[1]``), then
[2, 32] (the dynamic graph ``0/1`` again: no compile).

Writes ``OUT/torch.json``: torch's own record (each ``CompilationMetrics``: id, code, cache_size, the recompile reason).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out, mode = Path(sys.argv[1]), sys.argv[2]
if mode != "size1":
    raise SystemExit(f"unknown mode {mode!r}")


@torch.compile(backend="eager")
def f(x: torch.Tensor) -> torch.Tensor:
    return x.sin().sum(1)


for n in (8, 16, 1, 32):
    f(torch.randn(2, n))

from torch_record import write  # noqa: E402  (tests/workloads: this script's folder)

write(out, ("co_name", "cache_size", "recompile_reason"))
