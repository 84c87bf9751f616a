"""What bench/cost/run.py and bench/cost/zero_cost.py both measure with: one command in a fresh process, and a spread of repetitions.

:func:`child` runs a command and gives its wall seconds, CPU seconds and peak RSS; :func:`spread` writes
repeated measurements as ``median [min, max]``, as every table of the benchmarks does.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable

_PROBE = (
    "import os, resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "os.write(2, b'maxrss_kb=%d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
)


def child(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, float, str]:
    """Run a command; its wall seconds, CPU seconds (user+sys), peak RSS (MB) and stdout.

    The command runs under a small Python probe that reports its peak RSS: measured from here,
    a forked child's peak would include this process's own size before exec.
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
    # Bytecode caching on, as for an installed package (pip compiles it): a machine that sets
    # PYTHONDONTWRITEBYTECODE would compile the bridge's modules from source in every run.
    full.pop("PYTHONDONTWRITEBYTECODE", None)
    full.update(env or {})
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    t = time.perf_counter()
    p = subprocess.Popen([PY, "-c", _PROBE, *argv], env=full, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    text, errors = out.read().decode(), err.read().decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{argv} exited {p.returncode}: {errors[-2000:]}")
    rss = [int(line.split("=")[1]) for line in errors.splitlines() if line.startswith("maxrss_kb=")]
    return wall, ru.ru_utime + ru.ru_stime, (rss[-1] / 1024 if rss else float("nan")), text


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    """``median [min, max]`` of ``values``, each written with ``fmt``."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"
