"""Graph calls on the trace: one span per compile, written at exit as a child of its compile's root (a compile's trace
is sent as it ends, long before its graph's calls are known; torch_otel._sinks.late_spans writes them), and how
``torch-otel diff`` reads such a span back from a traces file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._core.merge import num
from ..._model.record import CompileRecord
from ..views import LateSpan
from .calls import NAME, CompileCalls, frame_of
from .counters import FixedGraph, Graph

__all__ = ["SPAN", "Attributes", "await_late", "late_spans", "read_late"]


SPAN = "torch.compile.graph_calls"


class Attributes:
    """The ``torch.compile.graph_calls`` span's attributes. Its start is the graph's first call, its end when it last
    ran (at the latest: when a count was last seen to have grown)."""

    CALLS = "torch.compile.graph.calls"
    PASS = "torch.compile.graph.pass"
    GRAPHS = "torch.compile.graph.count"
    BACKWARD_CALLS = "torch.compile.graph.backward_calls"
    COMPILE_S_PER_CALL = "torch.compile.graph.compile_s_per_call"
    RUN_S_MEAN = "torch.compile.graph.run_s_mean"
    TIMED_CALLS = "torch.compile.graph.timed_calls"
    LAST_CALL_AFTER = "torch.compile.graph.last_call_after_unix_nano"


def late_spans(cc: Any) -> list[LateSpan]:
    """A compile's calls as one span (see :class:`Attributes`); none for a compile whose calls are not known."""
    if not isinstance(cc, CompileCalls):
        return []
    n = cc.calls()
    if n is None:
        return []
    a_ = Attributes
    a: dict[str, Any] = {a_.CALLS: n, a_.PASS: cc.pass_}
    if len(cc.graphs) > 1:
        a[a_.GRAPHS] = len(cc.graphs)
    b = cc.backward_calls()
    if b is not None:
        a[a_.BACKWARD_CALLS] = b
    if n:
        a[a_.COMPILE_S_PER_CALL] = round(cc.compile_ns / 1e9 / n, 9)
    timed, run_ns = cc.timing()
    if timed:
        a[a_.TIMED_CALLS] = timed
        a[a_.RUN_S_MEAN] = round(run_ns / timed / 1e9, 9)
    after = [g.last_after_ns for g in cc.graphs if isinstance(g, Graph) and g.last_after_ns is not None]
    if n > 1 and after:
        a[a_.LAST_CALL_AFTER] = max(after)
    start = cc.first_ns() or cc.end_ns
    end = cc.last_ns() or start
    return [(SPAN, a, start, max(start, end))]


def await_late(rec: CompileRecord) -> None:
    """A frame or backward compile read back from a trace: its calls are unknown until its calls span comes."""
    if rec.kind in ("frame", "backward"):
        code = rec.code
        rec.derived[NAME] = CompileCalls(
            rec.id_str, rec.kind, frame_of(rec.compile_id), code.function, code.file, code.line, rec.duration_ns,
            rec.root.end_ns or rec.root.start_ns, rec.rank,
        )  # fmt: skip


def read_late(name: str, a: Mapping[str, Any], start_ns: int, end_ns: int, rec: CompileRecord) -> None:
    """A ``torch.compile.graph_calls`` span of a traces file back into its compile's record (torch-otel diff)."""
    if name != SPAN:
        return
    cc = rec.derived.get(NAME)
    if not isinstance(cc, CompileCalls):
        await_late(rec)
        cc = rec.derived.get(NAME)
        if not isinstance(cc, CompileCalls):
            return
    a_ = Attributes
    n = a.get(a_.CALLS)
    if not isinstance(n, int) or isinstance(n, bool):
        return
    timed = a.get(a_.TIMED_CALLS)
    mean = a.get(a_.RUN_S_MEAN)
    timed_n = timed if isinstance(timed, int) and not isinstance(timed, bool) else 0
    run_ns = int(num(mean) * 1e9 * timed_n)
    cc.graphs = (FixedGraph(n, start_ns if n else None, end_ns if n else None, timed_n, run_ns, cc.pass_),)
    b = a.get(a_.BACKWARD_CALLS)
    if isinstance(b, int) and not isinstance(b, bool):
        cc.with_forward = (FixedGraph(b, pass_="backward", with_forward=True),)
