"""Forked children under the bridge: DataLoader workers and a multiprocessing pool (fork start method).

The parent compiles before forking; each pool child compiles its own function.
Run with ``WITH_BRIDGE=1``; prints ``done`` when every child has finished.
"""

import multiprocessing as mp
import os

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i * i))


def child(n):
    f = torch.compile(lambda x: x * n + 1, backend="eager")
    return float(f(torch.ones(1)).item())


if __name__ == "__main__":
    torch.compile(lambda x: x.relu(), backend="eager")(torch.randn(4))
    total = sum(float(b.sum()) for b in DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context="fork"))
    with mp.get_context("fork").Pool(2) as pool:
        results = pool.map(child, [2, 3])
    print("sum", total, "children", results)
    print("done", flush=True)
