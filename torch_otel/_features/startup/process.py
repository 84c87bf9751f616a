"""The process as the kernel records it: its start, the clocks read together, and the children it waited for.

Imports only what Python loads at start-up: the start-up's recorder (:mod:`.recorder`) reads it in every process
``torch-otel run`` starts.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["clock_pair", "process_start", "waited_children"]

_clock = time.perf_counter_ns  # the recorder's clock


def _fields(stat: str) -> list[bytes]:
    """The fields of ``/proc/self/stat`` after the command's name (which may hold spaces and parentheses): the 3rd
    field on, so field N is at N - 3."""
    with open(stat, "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2 :].split()


def clock_pair(tries: int = 5) -> tuple[int, int]:
    """The recorder's clock and the wall clock, read together: of a few reads, the one whose two reads of this clock
    around the wall clock's lie closest (a read split by another thread taking the GIL, milliseconds under load, would
    tilt every compile the pairs place on this clock)."""
    best = (1 << 62, 0, 0)
    for _ in range(tries):
        a = _clock()
        u = time.time_ns()
        b = _clock()
        if b - a < best[0]:
            best = (b - a, (a + b) // 2, u)
            if b - a < 20_000:
                break
    return best[1], best[2]


def process_start(stat: str = "/proc/self/stat") -> tuple[int, int, str]:
    """The process's start: (on the recorder's clock, on the wall clock, where from). From the kernel: field 22 of
    ``/proc/self/stat`` (clock ticks since boot); else psutil's, if it is loaded; else now (``bridge``)."""
    now, unix = clock_pair()
    try:
        ticks = int(_fields(stat)[19])
        age = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        if age >= 0:
            return now - age, unix - age, "proc"
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    psutil = sys.modules.get("psutil")
    try:
        if psutil is not None:
            age = unix - int(psutil.Process().create_time() * 1e9)
            if age >= 0:
                return now - age, unix - age, "psutil"
    except Exception:  # noqa: BLE001, S110 - no better start known
        pass
    return now, unix, "bridge"


def waited_children(stat: str = "/proc/self/stat") -> tuple[bool, float]:
    """Whether this process waited for child programs before now, and their CPU seconds: the kernel's counts of the
    waited-for children's page faults and CPU time (fields 11, 16 and 17 of ``/proc/self/stat``), which ``exec``
    keeps. A shell that ran commands and then became Python by ``exec`` (``bash -c 'a; b'`` does, for ``b``) leaves
    them set: the kernel's start of the process is the shell's. (False, 0.0) where unknown."""
    try:
        rest = _fields(stat)
        cpu = (int(rest[13]) + int(rest[14])) / os.sysconf("SC_CLK_TCK")
        return int(rest[8]) > 0 or cpu > 0, cpu
    except (OSError, ValueError, IndexError, AttributeError):
        return False, 0.0
