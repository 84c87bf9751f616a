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

import pytest

from tests.helpers import WORKLOADS, clean_env
from tests.servers import Rotel, Tap, wait_until

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


def _one_span() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    done: list[Any] = []

    class _Keep(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            done.extend(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(_Keep()))
    provider.get_tracer("t").start_span("compile").end()
    return done[0]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_fork_never_overlaps_the_bridges_grpc_export_to_a_hung_collector(protocol):
    """The bridge's real OTLP exporter, its collector hung (a relay that takes requests and never answers): over gRPC
    the export is inside the fork gate, so a fork waits for it (torch_otel._otel.fork_gate: gRPC's own fork handlers
    can leave a child stuck inside fork() when an export overlaps it), gives up at the bound, and the child runs; over
    HTTP, which has no fork handlers, nothing waits."""
    import threading

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    from torch_otel._otel.delivery import GuardedSpanExporter, Target
    from torch_otel._otel.fork_gate import GATE

    with Rotel() as rotel:
        tap = Tap(rotel.port(protocol))
        tap.hold = True
        if protocol == "grpc":
            endpoint = f"127.0.0.1:{tap.port}"
            exporter = GuardedSpanExporter(lambda: GrpcExporter(endpoint=endpoint, insecure=True, timeout=3), Target(endpoint))
        else:
            endpoint = f"{tap.endpoint}/v1/traces"
            exporter = GuardedSpanExporter(
                lambda: HttpExporter(endpoint=endpoint, timeout=3), Target(endpoint, protocol=protocol)
            )
        before = (GATE.went_ahead, GATE.waited)
        t = threading.Thread(target=exporter.export, args=([_one_span()],), daemon=True)
        t.start()
        wait_until(lambda: tap.held > 0, 10, "the relay to hold the request")
        assert GATE._busy == (1 if protocol == "grpc" else 0)  # noqa: SLF001
        for _ in range(2):  # the export still in flight: the first fork waits out the bound, the second not at all
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert (GATE.went_ahead, GATE.waited) == ((before[0] + 1, before[1]) if protocol == "grpc" else before)
        t.join(30)
        exporter.shutdown()
