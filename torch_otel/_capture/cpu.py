"""The CPU time a compile costs: this process's, and that of the processes working for it.

Read at a compile's start and end, on torch's path, so each read is a few system calls:

- this process: ``time.process_time_ns()``, every thread's, inductor's compile threads included;
- the processes it ran and waited for: ``getrusage(RUSAGE_CHILDREN)``. On a CPU, inductor's compile threads build
  each C++ kernel (``compile_file``) in a compiler process they wait for: its CPU counts here once it has ended;
- inductor's compile worker processes (``torch/_inductor/compile_worker``), which live as long as their pool:
  ``SubprocPool``'s sidecar and the workers it starts (Triton kernels on a GPU), or a ``ProcessPoolExecutor``'s
  workers (``worker_start_method`` fork or spawn). Their pids are known from torch's ``async_compile._pool_set``;
  their CPU, and that of the processes they waited for, is read from ``/proc/<pid>/stat`` (Linux only).

A process that ends moves its time into its parent's reaped-children time, which is read too: the sum stays whole
whichever of these holds it. Elsewhere than Linux, only the first two are read (no ``resource`` module on
Windows: only the first).
"""

from __future__ import annotations

import os
import sys
import time

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

try:
    _TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICK_NS = 10_000_000
_PROC = os.path.isdir("/proc/self/task")


def compile_cpu_ns() -> tuple[int, int]:
    """``(total, other processes)``: CPU time so far (ns) of this process and the processes working for it, and the
    part of it in those other processes. Only differences between two reads mean anything."""
    others = 0
    if resource is not None:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        others = int((ru.ru_utime + ru.ru_stime) * 1e9)
    if _PROC:
        others += workers_cpu_ns()
    return time.process_time_ns() + others, others


def workers_cpu_ns() -> int:
    """CPU time (ns) of inductor's live compile worker processes, each with the processes it reaped (Linux)."""
    total = 0
    for pid in worker_pids():
        total += _stat_ns(pid)
    return total


def worker_pids() -> list[int]:
    """The pids of inductor's compile worker processes now alive: each pool's, from torch's ``_pool_set``."""
    ac = sys.modules.get("torch._inductor.async_compile")
    pools = getattr(ac, "_pool_set", None)
    if not pools:  # none made (a CPU run makes none unless Triton is installed)
        return []
    pids: list[int] = []
    try:
        for pool in list(pools):
            sidecar = getattr(getattr(pool, "process", None), "pid", None)  # SubprocPool: a Popen
            if isinstance(sidecar, int) and getattr(pool.process, "returncode", None) is None:
                pids.append(sidecar)
                pids.extend(_children(sidecar))  # its ProcessPoolExecutor's workers
            procs = getattr(pool, "_processes", None)  # a ProcessPoolExecutor's own workers, by pid
            if isinstance(procs, dict):
                pids.extend(p for p in procs if isinstance(p, int))
    except (RuntimeError, AttributeError, TypeError):  # a pool changing under us: what was read so far
        pass
    return pids


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(c) for c in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _stat_ns(pid: int) -> int:
    """utime + stime + cutime + cstime of ``pid`` (ns); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()  # from field 3 (state): the name may hold spaces
        return sum(int(v) for v in fields[11:15]) * _TICK_NS  # fields 14 to 17
    except (OSError, ValueError):
        return 0
