"""Fast tier: phases with no compile id, as inductor's compile workers log them (``compile_file``, kernel builds).

With exactly one compile in flight they join it (and say so in their args); with more than one they cannot be
attributed and are counted. Live, each worker thread nests its own phases; on replay the thread is unknown and
an end closes the earliest-begun open build of its name. No torch.compile anywhere; run the tier with::

    .venv/bin/python -m pytest tests/fast
"""

from __future__ import annotations

from tests.fast.fastkit import B, E, duration, feed, find, frame, metrics, outline, phases

ATTRIBUTED = {"attributed": "the only compile in flight"}


def test_a_worker_phase_joins_the_only_compile_in_flight_under_the_phase_it_was_in():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "inductor_compile", 100),
        B("0/0", "async_compile.wait", 200),
        B(None, "compile_file", 210),
        E(None, "compile_file", 290),
        E("0/0", "async_compile.wait", 300),
        E("0/0", "inductor_compile", 400),
        E("0/0", "dynamo", 500, final=True),
    )
    rec = sink.only()
    assert outline(rec.root) == [
        ("dynamo", 0, 500),
        ("  inductor_compile", 100, 400),
        ("    async_compile.wait", 200, 300),
        ("      compile_file", 210, 290),
    ]
    assert find(rec.root, "compile_file")[0].args == ATTRIBUTED
    assert asm.stats["unattributed_phases"] == 0 and asm.stats["unmatched_phase_ends"] == 0


def test_with_two_compiles_in_flight_a_worker_phase_is_unattributed():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("1/0", "dynamo", 10),
        B(None, "compile_file", 20),
        E(None, "compile_file", 30),
        E("0/0", "dynamo", 40, final=True),
        E("1/0", "dynamo", 50, final=True),
    )
    assert asm.stats["unattributed_phases"] == 2
    assert sink.ids() == [("frame", "0/0"), ("frame", "1/0")]
    assert [outline(r.root) for r in sink.finished] == [[("dynamo", 0, 40)], [("dynamo", 10, 50)]]


def test_an_ended_compile_awaiting_its_metrics_is_not_in_flight():
    asm, sink = feed(
        frame("0/0", 0, 100),  # ended; its metrics come later
        B("1/0", "dynamo", 200),
        B(None, "compile_file", 210),
        E(None, "compile_file", 220),
        E("1/0", "dynamo", 300, final=True),
    )
    assert asm.stats["unattributed_phases"] == 0
    assert sink.ids() == [("frame", "0/0"), ("frame", "1/0")]
    assert outline(sink.finished[1].root) == [("dynamo", 200, 300), ("  compile_file", 210, 220)]


def test_live_each_worker_thread_nests_its_own_phases_and_builds_never_nest_in_each_other():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "async_compile.wait", 100),
        B(None, "kernel_build", 110, thread=1),
        B(None, "compile_file", 120, thread=2),
        B(None, "compile_file", 130, thread=1),
        E(None, "compile_file", 170, thread=1),  # thread 1's own, not thread 2's (begun earlier)
        E(None, "kernel_build", 180, thread=1),
        E(None, "compile_file", 200, thread=2),
        E("0/0", "async_compile.wait", 300),
        E("0/0", "dynamo", 400, final=True),
    )
    assert outline(sink.only().root) == [
        ("dynamo", 0, 400),
        ("  async_compile.wait", 100, 300),
        ("    kernel_build", 110, 180),
        ("      compile_file", 130, 170),
        ("    compile_file", 120, 200),
    ]
    assert asm.stats["unmatched_phase_begins"] == asm.stats["unmatched_phase_ends"] == 0


def test_live_a_threads_end_closes_what_that_thread_began_inside_it():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B(None, "kernel_build", 10, thread=1),
        B(None, "compile_file", 20, thread=1),
        E(None, "kernel_build", 30, thread=1),
        E("0/0", "dynamo", 40, final=True),
    )
    assert asm.stats["unmatched_phase_begins"] == 1
    assert outline(sink.only().root) == [("dynamo", 0, 40), ("  kernel_build", 10, 30), ("    compile_file", 20, 30)]


def test_a_workers_end_never_closes_the_compiles_own_phase_of_that_name():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "async_compile.wait", 10),
        E(None, "async_compile.wait", 20, thread=7),
        E("0/0", "async_compile.wait", 30),
        E("0/0", "dynamo", 40, final=True),
    )
    assert asm.stats["unmatched_phase_ends"] == 1
    assert outline(sink.only().root) == [("dynamo", 0, 40), ("  async_compile.wait", 10, 30)]


def test_replay_an_end_closes_the_earliest_begun_open_build_of_its_name():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "async_compile.wait", 100),
        B(None, "compile_file", 110),
        B(None, "compile_file", 120),
        E(None, "compile_file", 150),
        E(None, "compile_file", 200),
        E("0/0", "async_compile.wait", 300),
        E("0/0", "dynamo", 400, final=True),
    )
    rec = sink.only()
    assert outline(rec.root) == [
        ("dynamo", 0, 400),
        ("  async_compile.wait", 100, 300),
        ("    compile_file", 110, 150),
        ("    compile_file", 120, 200),
    ]
    # whichever build really ended first, the sum of their times is exact
    assert sum(duration(n) for n in find(rec.root, "compile_file")) == (150 - 110) + (200 - 120)
    assert asm.stats["unmatched_phase_begins"] == asm.stats["unmatched_phase_ends"] == 0


def test_a_worker_end_with_no_build_of_its_name_open_is_unmatched():
    asm, sink = feed(B("0/0", "dynamo", 0), E(None, "compile_file", 10), E("0/0", "dynamo", 20, final=True))
    assert asm.stats["unmatched_phase_ends"] == 1
    assert outline(sink.only().root) == [("dynamo", 0, 20)]


def test_a_cut_ends_the_open_builds_too():
    asm, sink = feed(B("0/0", "dynamo", 0), B(None, "compile_file", 10, thread=3), B(None, "compile_file", 20))
    asm.flush(cut_ns=100)
    rec = sink.only()
    assert rec.incomplete == "the process exited before the compile ended"
    assert outline(rec.root) == [("dynamo", 0, 100), ("  compile_file", 10, 100), ("  compile_file", 20, 100)]


def test_with_no_compile_in_flight_a_worker_phase_joins_the_runtime_record_in_flight():
    autotune = ("CachingAutotuner.benchmark_all_configs", 2_000, 2_600)
    asm, sink = feed(
        frame("0/0", 0, 1_000),
        metrics("0/0"),
        phases("0/0", autotune)[:1],
        B(None, "compile_file", 2_100),
        E(None, "compile_file", 2_200),
        phases("0/0", autotune)[1:],
    )
    runtime = sink.finished[1]
    assert runtime.kind == "runtime"
    assert outline(runtime.root) == [
        ("runtime", 2_000, 2_600),
        ("  CachingAutotuner.benchmark_all_configs", 2_000, 2_600),
        ("    compile_file", 2_100, 2_200),
    ]
    assert find(runtime.root, "compile_file")[0].args == ATTRIBUTED
    assert asm.stats["unattributed_phases"] == 0
