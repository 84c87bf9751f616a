"""Many forked children under the bridge, exporting over OTLP/gRPC to a real receiver (rotel), bounded in time.

``tests/workloads/fork_storm.py`` ends a fork pool ``ROUNDS`` times (``with Pool(...)`` terminates its
workers with SIGTERM, then joins them), starts DataLoader fork workers as often, and every
``COMPILE_EVERY``-th round has pool workers and a bare ``os.fork`` child compile functions of their own.
Before the bridge gave forked children SIGTERM's default action back, a worker that the pool's SIGTERM
reached while it waited on the task queue's lock, or before its after-fork hooks had run, never exited,
and the parent waited for it forever (issue 43: ``test_forked_children_export_their_own_compiles_once``
killed after 300 s under load). The workload prints every thread's stack and exits 1 after ``HANG_S``
seconds; this test kills whatever is left of its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

from tests.helpers import WORKLOADS, clean_env
from tests.servers import Rotel, wait_until

STORM = WORKLOADS / "fork_storm.py"
ROUNDS = 40
COMPILE_EVERY = 20
HANG_S = 75  # a passing run takes 10 to 30 s on 2 shared cores
TIMEOUT_S = HANG_S + 25


def _run_own_group(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
    """(exit status; stdout; stderr), then kill whatever is left of its process group.

    The status is None if its output was still open after ``timeout`` seconds: it ran that long, or left a
    process behind (a hung pool's workers outlive their parent and hold its pipes). Those are killed too.
    """
    p = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    rc: int | None = None
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if rc is None:
        out, err = p.communicate()
    return rc, out, err


def _child_roots(received: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        s
        for s in received["spans"]
        if s["attrs"].get("torch.compile.kind") == "frame" and str(s["attrs"].get("code.function.name")).startswith("child_")
    ]


def test_fork_storm_never_hangs_and_each_child_exports_its_compiles_once():
    expected = Counter()
    for r in range(0, ROUNDS, COMPILE_EVERY):
        expected.update([f"child_{1000 + 2 * r}", f"child_{1001 + 2 * r}", f"child_{5000 + r}"])
    with Rotel() as rotel:
        env = {
            "WITH_BRIDGE": "1",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint,
            "OTEL_METRICS_EXPORTER": "otlp",
            "ROUNDS": str(ROUNDS),
            "COMPILE_EVERY": str(COMPILE_EVERY),
            "HANG_S": str(HANG_S),
        }
        rc, out, err = _run_own_group([sys.executable, str(STORM)], clean_env(env), TIMEOUT_S)
        last = (out.strip().splitlines() or ["nothing"])[-1]
        assert rc == 0 and f"done {sum(expected.values())}" in out, f"exit {rc}, last line {last!r}:\n{err[-12000:]}"
        got = wait_until(
            lambda: (g := rotel.received()) and len(_child_roots(g)) >= len(expected) and g, 30, "every child's compile"
        )
    roots = _child_roots(got)
    parent_pid = next(s for s in got["spans"] if s["attrs"].get("torch.compile.kind") == "frame")["resource"]["process.pid"]
    assert Counter(s["attrs"]["code.function.name"] for s in roots) == expected  # each child's compile, exactly once
    assert all(s["attrs"]["process.parent_pid"] == parent_pid != s["attrs"]["process.pid"] for s in roots)
