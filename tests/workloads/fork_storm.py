"""Many forked children under the bridge: fork pools, DataLoader fork workers and bare os.fork children.

The parent compiles (the bridge arms: exporters, its worker thread, its SIGTERM handler), then forks
``ROUNDS`` times over: a ``multiprocessing`` fork pool used as a context manager (its exit terminates the
workers with SIGTERM and joins them), DataLoader fork workers, and every ``COMPILE_EVERY``-th round a
pool whose workers each compile a function of their own and a bare ``os.fork`` child that compiles one.

A fork that leaves a child unable to exit or to compile hangs here. After ``HANG_S`` seconds every
process of its process group (this one and the children it forked, which inherit the handler) prints
its threads' stacks to stderr, and this one exits 1. Run with ``WITH_BRIDGE=1``, as the leader of its
own process group; prints ``round N`` after each round, and ``done`` with the number of compiling
children at the end.
"""

import faulthandler
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch
from torch.utils.data import DataLoader, Dataset

ROUNDS = int(os.environ.get("ROUNDS", "60"))
COMPILE_EVERY = int(os.environ.get("COMPILE_EVERY", "20"))
HANG_S = float(os.environ.get("HANG_S", "90"))


class Squares(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((2,), float(i * i))


def square(n):
    return n * n


def compile_own(n):
    """A function of its own (its own code object): one frame compile, in this process."""
    ns = {}
    exec(f"def child_{n}(x):\n    return x * {n} + 1\n", ns)
    return float(torch.compile(ns[f"child_{n}"], backend="eager")(torch.ones(1)).item())


def watchdog(finished: threading.Event) -> None:
    if finished.wait(HANG_S):
        return
    group = os.getpgid(0)
    if group == os.getpid():
        os.killpg(group, signal.SIGUSR1)  # every process of the group prints its stacks (faulthandler)
    else:
        os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(3)
    print(f"hung for {HANG_S:.0f} s", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # forked children inherit it
    finished = threading.Event()
    threading.Thread(target=watchdog, args=(finished,), daemon=True).start()
    torch.compile(lambda x: x.relu(), backend="eager")(torch.randn(4))
    fork = mp.get_context("fork")
    compiled = 0
    for r in range(ROUNDS):
        with fork.Pool(3) as pool:
            assert pool.map(square, range(6)) == [n * n for n in range(6)]
        assert sum(float(b.sum()) for b in DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=fork)) == 28
        if r % COMPILE_EVERY == 0:
            with fork.Pool(2) as pool:
                pool.map(compile_own, [1000 + 2 * r, 1001 + 2 * r])
            pid = os.fork()
            if pid == 0:
                compile_own(5000 + r)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert status == 0, status
            compiled += 3
        print("round", r, flush=True)
    finished.set()
    print("done", compiled, flush=True)
