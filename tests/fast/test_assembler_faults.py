"""Fast tier: what the assembler does with sequences torch should not produce, or that it cannot keep in full.

Orphans, eviction, a compile id reused while in flight, unmatched phases, ``flush`` of compiles cut short,
the per-compile bounds and a sink that raises. Each is counted in ``Assembler.stats`` (or on the record) and
none raises. Run the tier with::

    .venv/bin/python -m pytest tests/fast
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fast.fastkit import B, Collect, E, cid, feed, find, frame, metrics, outline
from torch_otel._assemble.assembler import MAX_ARTIFACTS, MAX_GRAPH_BREAKS, MAX_PHASES, Assembler
from torch_otel._core.errors import internal_errors
from torch_otel._model.events import (
    ArtifactEvent,
    DebugDirEvent,
    GraphBreakEvent,
    GraphScheduleEvent,
    LogEvent,
    RecompileReasonsEvent,
)
from torch_otel._model.record import CompileRecord, Sink

# -- orphans ------------------------------------------------------------------------------------------------------

ORPHANS = {  # an event of compile 0/0 -> the count it lands in when 0/0 is not in flight
    "graph break": (lambda c: GraphBreakEvent(cid(c), "Unsupported: call_function"), "orphan_graph_breaks"),
    "artifact": (lambda c: ArtifactEvent(cid(c), "artifact", "fx_graph_runnable", 10), "orphan_artifacts"),
    "log": (lambda c: LogEvent(cid(c), 5, 30, "torch._dynamo", "a warning"), "orphan_logs"),
    "recompile reasons": (lambda c: RecompileReasonsEvent(cid(c), ["0/0: guard failed"]), "orphan_recompile_reasons"),
    "schedule": (lambda c: GraphScheduleEvent(cid(c), ["all_reduce_"]), "orphan_schedules"),
    "debug dir": (lambda c: DebugDirEvent(cid(c), "/tmp/torchinductor/run_0"), "orphan_debug_dirs"),
    "phase end": (lambda c: E(c, "inductor_compile", 5), "orphan_phases"),
    "root end": (lambda c: E(c, "dynamo", 5), "orphan_phases"),
}


@pytest.mark.parametrize("what", ORPHANS)
def test_an_event_with_no_compile_open_is_counted_as_an_orphan(what):
    make, key = ORPHANS[what]
    asm, sink = feed(make("0/0"), make("0/0"))
    assert asm.stats[key] == 2
    assert sink.finished == [] and sink.started == [] and asm.open_count == 0


# (a phase with no id while one compile is in flight is an inductor worker's: it joins it, test_worker_phases.py)
@pytest.mark.parametrize(("what", "orphan_id"), [(w, i) for w in ORPHANS for i in ("0/0", None) if (w, i) != ("phase end", None)])
def test_an_event_of_another_compile_id_never_joins_the_one_in_flight(what, orphan_id):
    make, key = ORPHANS[what]
    asm, sink = feed(B("3/0", "dynamo", 0), make(orphan_id), E("3/0", "dynamo", 10, final=True))
    assert asm.stats[key] == 1
    rec = sink.only()
    assert rec.id_str == "3/0"
    assert (rec.graph_breaks, rec.artifacts, rec.logs, rec.recompile_reasons, rec.schedules, rec.debug_dirs) == ([],) * 6
    assert outline(rec.root) == [("dynamo", 0, 10)]


def test_an_orphan_log_is_handed_to_the_sinks():
    ev = LogEvent(None, 5, 30, "torch._inductor", "a warning outside any compile")
    asm, sink = feed(ev)
    assert sink.orphan_logs == [ev] and asm.stats["orphan_logs"] == 1


def test_a_phase_with_no_compile_id_and_no_compile_open_is_unattributed_and_an_orphan():
    asm, sink = feed(B(None, "compile_file", 5), E(None, "compile_file", 9))
    assert asm.stats["unattributed_phases"] == 2 and asm.stats["orphan_phases"] == 2
    assert sink.finished == [] and asm.open_count == 0


# -- eviction and reused ids ---------------------------------------------------------------------------------------


def test_compiles_past_max_open_evict_the_oldest_as_incomplete():
    asm, sink = feed(
        B("0/0", "dynamo", 100),
        B("0/0", "entire_frame_compile", 110),
        B("1/0", "dynamo", 200),
        B("2/0", "dynamo", 300),
        max_open=2,
    )
    rec = sink.only()
    assert rec.id_str == "0/0"
    assert rec.incomplete == "evicted: too many compiles in flight"
    assert outline(rec.root) == [("dynamo", 100, 110), ("  entire_frame_compile", 110, 110)]  # its last report
    assert asm.stats["evicted"] == 1 and asm.open_count == 2
    assert asm.stats["unmatched_phase_begins"] == 0  # cut short: its open phases are not torch's mistake
    asm.feed(E("0/0", "dynamo", 400))  # what the evicted compile still logs has no compile to join
    assert asm.stats["orphan_phases"] == 1
    asm.feed(metrics("1/0"))
    asm.feed(E("1/0", "dynamo", 500))
    assert sink.ids() == [("frame", "0/0"), ("frame", "1/0")] and asm.open_count == 1


def test_the_same_compile_id_beginning_again_finishes_the_first_as_incomplete():
    asm, sink = feed(
        B("0/0", "dynamo", 100),
        B("0/0", "compile_attempt_0", 120),
        B("0/0", "dynamo", 500),
        E("0/0", "dynamo", 900),
        metrics("0/0", **{"co_name": "fn"}),
    )
    first, second = sink.finished
    assert first.incomplete == "a new compile with the same id started"
    assert outline(first.root) == [("dynamo", 100, 120), ("  compile_attempt_0", 120, 120)]
    assert first.metrics is None
    assert second.incomplete is None and (second.root.start_ns, second.root.end_ns) == (500, 900)
    assert second.metrics == {"co_name": "fn"}
    assert asm.stats["compiles_frame"] == 2 and asm.open_count == 0


# -- unmatched phases --------------------------------------------------------------------------------------------


def test_an_end_with_nothing_of_its_name_open_is_counted_and_changes_nothing():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "bytecode_tracing", 10),
        E("0/0", "inductor_compile", 20),
        E("0/0", "bytecode_tracing", 30),
        E("0/0", "dynamo", 40, final=True),
    )
    assert asm.stats["unmatched_phase_ends"] == 1
    assert outline(sink.only().root) == [("dynamo", 0, 40), ("  bytecode_tracing", 10, 30)]


def test_an_end_closes_the_phases_begun_inside_it_that_never_ended():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "backend_compile", 10),
        B("0/0", "inductor_compile", 20),
        B("0/0", "GraphLowering.run", 30),
        E("0/0", "backend_compile", 50),
        E("0/0", "dynamo", 60, final=True),
    )
    assert asm.stats["unmatched_phase_begins"] == 2
    assert outline(sink.only().root) == [
        ("dynamo", 0, 60),
        ("  backend_compile", 10, 50),
        ("    inductor_compile", 20, 50),
        ("      GraphLowering.run", 30, 50),
    ]


def test_a_begin_never_ended_in_an_ended_compile_is_counted_and_ends_with_the_root():
    asm, sink = feed(frame("0/0", 0, 100)[:1], B("0/0", "bytecode_tracing", 10), E("0/0", "dynamo", 100), metrics("0/0"))
    assert asm.stats["unmatched_phase_begins"] == 1
    rec = sink.only()
    assert rec.incomplete is None
    assert outline(rec.root) == [("dynamo", 0, 100), ("  bytecode_tracing", 10, 100)]


def test_an_end_pops_to_the_latest_begin_of_its_name():
    _, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "compile_attempt_0", 5),
        B("0/0", "compile_attempt_0", 10),  # torch nests a phase of the same name
        E("0/0", "compile_attempt_0", 20),
        E("0/0", "compile_attempt_0", 30),
        E("0/0", "dynamo", 40, final=True),
    )
    assert outline(sink.only().root) == [("dynamo", 0, 40), ("  compile_attempt_0", 5, 30), ("    compile_attempt_0", 10, 20)]


# -- flush ------------------------------------------------------------------------------------------------------


IN_FLIGHT = [
    B("1/0", "dynamo", 2_000),
    B("1/0", "entire_frame_compile", 2_100),
    B("1/0", "compile_attempt_0", 2_200),
    E("1/0", "compile_attempt_0", 2_500),
    B("1/0", "compile_attempt_1", 2_600),
]


def _flushed(**kw: Any) -> tuple[Assembler, list[CompileRecord]]:
    # 1/0 is cut short; 0/0 begins after it and ends, but its metrics never come
    asm, sink = feed(IN_FLIGHT, frame("0/0", 3_000, 3_500))
    assert sink.finished == [] and asm.open_count == 2
    asm.flush(**kw)
    assert asm.open_count == 0
    return asm, sink.finished


def test_flush_with_a_cut_ends_a_compile_in_flight_and_its_open_phases_then():
    asm, (cut, ended) = _flushed(reason="interrupted", cut_ns=5_000)
    assert (cut.id_str, cut.incomplete, cut.attempt) == ("1/0", "interrupted", 1)
    assert outline(cut.root) == [
        ("dynamo", 2_000, 5_000),
        ("  entire_frame_compile", 2_100, 5_000),
        ("    compile_attempt_0", 2_200, 2_500),
        ("    compile_attempt_1", 2_600, 5_000),
    ]
    assert (ended.id_str, ended.incomplete, ended.root.end_ns) == ("0/0", None, 3_500)  # ended: finished as it is
    assert asm.stats["unmatched_phase_begins"] == 0


def test_flush_without_a_cut_ends_them_at_the_last_time_torch_reported():
    _, (cut, ended) = _flushed()
    assert cut.incomplete == "the process exited before the compile ended"
    assert outline(cut.root) == [
        ("dynamo", 2_000, 2_600),
        ("  entire_frame_compile", 2_100, 2_600),
        ("    compile_attempt_0", 2_200, 2_500),
        ("    compile_attempt_1", 2_600, 2_600),
    ]
    assert ended.incomplete is None


def test_flush_with_nothing_in_flight_hands_nothing_and_flushing_twice_is_harmless():
    asm, sink = feed(frame("0/0", 0, 10), metrics("0/0"))
    asm.flush()
    asm.flush(cut_ns=99)
    assert sink.ids() == [("frame", "0/0")]


# -- bounds ---------------------------------------------------------------------------------------------------------


def test_graph_breaks_past_the_bound_are_dropped_and_counted():
    extra = 3
    breaks = [GraphBreakEvent(cid("0/0"), f"break {i}") for i in range(MAX_GRAPH_BREAKS + extra)]
    _, sink = feed(B("0/0", "dynamo", 0), breaks, E("0/0", "dynamo", 10, final=True))
    rec = sink.only()
    assert len(rec.graph_breaks) == MAX_GRAPH_BREAKS
    assert rec.graph_breaks[-1].reason == f"break {MAX_GRAPH_BREAKS - 1}"
    assert rec.dropped == extra


def test_artifacts_past_the_bound_are_dropped_and_counted():
    arts = [ArtifactEvent(cid("0/0"), "artifact", f"a{i}") for i in range(MAX_ARTIFACTS + 2)]
    _, sink = feed(B("0/0", "dynamo", 0), arts, E("0/0", "dynamo", 10, final=True))
    rec = sink.only()
    assert [a.name for a in rec.artifacts] == [f"a{i}" for i in range(MAX_ARTIFACTS)]
    assert rec.dropped == 2


def test_phases_past_the_bound_are_dropped_and_counted():
    n = MAX_PHASES + 5  # the root counts as one
    begins = [B("0/0", "guard", 10 + i) for i in range(n)]
    _, sink = feed(B("0/0", "dynamo", 0), begins, E("0/0", "dynamo", 10_000, final=True))
    rec = sink.only()
    assert len(find(rec.root, "guard")) == MAX_PHASES - 1
    assert rec.dropped == 6


# -- sinks that fail --------------------------------------------------------------------------------------------


class Boom(Sink):
    def on_start(self, record: CompileRecord) -> None:
        raise RuntimeError("on_start")

    def on_finish(self, record: CompileRecord) -> None:
        raise RuntimeError("on_finish")

    def on_orphan_log(self, event: Any) -> None:
        raise ValueError("on_orphan_log")


def test_a_sink_that_raises_does_not_stop_the_others_and_is_counted():
    before = internal_errors()
    good = Collect()
    asm = Assembler(sinks=[Boom(), good])
    for ev in [*frame("0/0", 0, 10), metrics("0/0"), *frame("0/1", 20, 30, final=True), LogEvent(None, 40, 30, "torch", "w")]:
        asm.feed(ev)
    assert good.ids() == [("frame", "0/0"), ("frame", "0/1")]
    assert len(good.started) == 2 and len(good.orphan_logs) == 1
    after = internal_errors()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert delta == {"Boom.on_start:RuntimeError": 2, "Boom.on_finish:RuntimeError": 2, "Boom.on_orphan_log:ValueError": 1}
