"""Fast tier: the assembler driven by typed event sequences, no torch.compile anywhere.

Each test feeds :class:`torch_otel._assemble.assembler.Assembler` the events a source would produce and checks the
records a sink is handed. The whole tier runs in seconds::

    .venv/bin/python -m pytest tests/fast

This file: how compiles begin and end (frame compiles, lazy backwards, compiled autograd, runtime records,
records synthesized from metrics alone) and what attaches to them.
"""

from __future__ import annotations

from tests.fast.fastkit import B, E, cid, duration, feed, find, frame, instant, metrics, outline, phases
from torch_otel._model.events import (
    ArtifactEvent,
    DebugDirEvent,
    GraphBreakEvent,
    GraphScheduleEvent,
    LogEvent,
    MetricsEvent,
    RecompileReasonsEvent,
    StartEvent,
)
from torch_otel._model.record import CodeLocation

FN = {"co_name": "fn", "co_filename": "/w/model.py", "co_firstlineno": 7}

# A frame compile as torch logs it: dynamo > entire_frame_compile > compile_attempt_1 > ... (attempt 0 restarted)
# fmt: off
FRAME_0_1 = frame("0/1", 1_000, 9_000,
    ("entire_frame_compile", 1_100, 8_900,
        ("compile_attempt_0", 1_150, 1_190),
        ("compile_attempt_1", 1_200, 8_800,
            ("bytecode_tracing", 1_300, 4_000),
            ("backend_compile", 4_100, 8_700,
                ("inductor_compile", 4_200, 8_600)))),
)
# fmt: on


# -- a frame compile --------------------------------------------------------------------------------------------


def test_a_frame_compile_is_one_record_with_its_phase_tree_durations_and_attempt():
    asm, sink = feed(FRAME_0_1, metrics("0/1", **FN))
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete) == ("frame", "0/1", None)
    assert rec.attempt == 1  # from compile_attempt_1
    assert outline(rec.root) == [
        ("dynamo", 1_000, 9_000),
        ("  entire_frame_compile", 1_100, 8_900),
        ("    compile_attempt_0", 1_150, 1_190),
        ("    compile_attempt_1", 1_200, 8_800),
        ("      bytecode_tracing", 1_300, 4_000),
        ("      backend_compile", 4_100, 8_700),
        ("        inductor_compile", 4_200, 8_600),
    ]
    assert duration(find(rec.root, "inductor_compile")[0]) == 4_400
    assert rec.duration_s == 8_000 / 1e9
    assert rec.metrics == FN
    assert rec.code == CodeLocation("fn", "/w/model.py", 7)
    assert sink.started == [rec]  # on_start had the same record, at its root's begin
    assert asm.open_count == 0
    assert asm.stats["compiles_frame"] == 1
    assert asm.stats["unmatched_phase_begins"] == asm.stats["unmatched_phase_ends"] == 0


def test_metrics_after_the_roots_end_finish_the_record():
    asm, sink = feed(FRAME_0_1)
    assert sink.finished == [] and asm.open_count == 1  # ended, waiting for its CompilationMetrics
    assert [r.id_str for r in sink.started] == ["0/1"]
    asm.feed(metrics("0/1", **FN))
    assert sink.only().metrics == FN
    assert asm.open_count == 0


def test_metrics_before_the_roots_end_wait_for_it():
    asm, sink = feed(FRAME_0_1[:-1], metrics("0/1", **FN))
    assert sink.finished == [] and asm.open_count == 1
    asm.feed(FRAME_0_1[-1])
    rec = sink.only()
    assert rec.metrics == FN and rec.root.end_ns == 9_000
    assert asm.open_count == 0


def test_a_final_end_finishes_the_record_without_metrics():
    asm, sink = feed(frame("0/0", 100, 900, ("entire_frame_compile", 110, 890), final=True))
    rec = sink.only()
    assert rec.metrics is None and rec.incomplete is None
    assert (rec.root.start_ns, rec.root.end_ns) == (100, 900)
    assert asm.open_count == 0


def test_an_ended_compile_without_metrics_is_finished_when_the_next_compile_begins():
    asm, sink = feed(frame("0/0", 100, 900))
    assert sink.finished == []
    asm.feed(B("1/0", "dynamo", 1_000))
    assert sink.ids() == [("frame", "0/0")]
    assert sink.finished[0].incomplete is None
    assert asm.open_count == 1


def test_the_roots_end_args_rank_and_attempt_are_the_records():
    asm, sink = feed(
        B("0/0", "dynamo", 100),
        E("0/0", "dynamo", 900, args={"fail_type": "Unsupported", "fail_reason": "no"}, rank=3, attempt=2, final=True),
    )
    rec = sink.only()
    assert (rec.fail_type, rec.fail_reason, rec.rank, rec.attempt) == ("Unsupported", "no", 3, 2)
    assert rec.root.args == {"fail_type": "Unsupported", "fail_reason": "no"}


def test_a_phases_end_args_join_its_begin_args_and_instants_go_to_the_open_phase():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "inductor_compile", 10, args={"compile_id": "0/0"}),
        instant("0/0", "fx_graph_cache_miss", 15, args={"key": "k1"}),
        E("0/0", "inductor_compile", 20, args={"cache_state": "bypass"}),
        E("0/0", "dynamo", 30, final=True),
    )
    (node,) = find(sink.only().root, "inductor_compile")
    assert node.args == {"compile_id": "0/0", "cache_state": "bypass"}
    assert node.instants == [("fx_graph_cache_miss", 15, {"key": "k1"})]
    assert sink.only().cache_counts() == {("fx_graph", "local", "bypass"): 1}


def test_a_compile_attempt_name_that_is_no_number_is_no_attempt():
    _, sink = feed(frame("0/0", 0, 100, ("compile_attempt_x", 10, 20), final=True))
    assert sink.only().attempt == 0


def test_a_compile_without_code_in_its_metrics_inherits_its_frames_earlier_one():
    # a compile that stops before dynamo reports its code (the recompile-limit check) is still its frame's
    _, sink = feed(frame("0/0", 0, 100), metrics("0/0", **FN), frame("0/1", 200, 300), metrics("0/1"))
    assert [r.code for r in sink.finished] == [CodeLocation("fn", "/w/model.py", 7)] * 2


def test_the_code_location_falls_back_to_dynamo_start():
    stack = [{"name": "<module>", "filename_str": "/w/run.py", "line": 1}, {"name": "step", "filename_str": "/w/m.py", "line": 9}]
    _, sink = feed(B("0/0", "dynamo", 0), StartEvent(cid("0/0"), stack, attempt=1), E("0/0", "dynamo", 10, final=True))
    rec = sink.only()
    assert rec.start_stack == stack and rec.attempt == 1
    assert rec.code == CodeLocation("step", "/w/m.py", 9)


# -- what attaches to a compile -----------------------------------------------------------------------------------


def test_graph_breaks_logs_artifacts_schedules_and_debug_dirs_attach_to_their_compile():
    asm, sink = feed(
        B("0/0", "dynamo", 0),
        B("0/0", "bytecode_tracing", 40),
        GraphBreakEvent(cid("0/0"), "Unsupported: call_function", ts_ns=None),  # dated by the compile: 40
        GraphBreakEvent(cid("0/0"), "Data-dependent branching", ts_ns=45),
        LogEvent(cid("0/0"), 46, 30, "torch._dynamo", "a warning"),
        ArtifactEvent(cid("0/0"), "artifact", "fx_graph_runnable", size=12, attempt=2),
        GraphScheduleEvent(cid("0/0"), [], tensor_meta="d1"),  # replay: the tensor meta, then the schedule
        GraphScheduleEvent(cid("0/0"), ["all_reduce_", "wait_tensor"]),
        GraphScheduleEvent(cid("0/0"), ["all_gather"], tensor_meta="d2"),
        DebugDirEvent(cid("0/0"), "/tmp/torchinductor/run_0"),
        E("0/0", "bytecode_tracing", 50),
        E("0/0", "dynamo", 60, final=True),
    )
    rec = sink.only()
    assert [(g.reason, g.ts_ns) for g in rec.graph_breaks] == [
        ("Unsupported: call_function", 40),
        ("Data-dependent branching", 45),
    ]
    assert [log.message for log in rec.logs] == ["a warning"]
    assert [(a.name, a.size, a.ts_ns) for a in rec.artifacts] == [("fx_graph_runnable", 12, 40)]
    assert rec.attempt == 2  # an artifact's attempt is the record's
    assert [(s.collectives, s.tensor_meta) for s in rec.schedules] == [
        (["all_reduce_", "wait_tensor"], "d1"),
        (["all_gather"], "d2"),
    ]
    assert rec.debug_dirs == ["/tmp/torchinductor/run_0"]
    assert rec.dropped == 0
    assert not [k for k in asm.stats if k.startswith("orphan")]


def test_recompile_reasons_attach_to_their_frame_compile():
    reasons = ["0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8"]
    _, sink = feed(B("0/1", "dynamo", 0), RecompileReasonsEvent(cid("0/1"), reasons), E("0/1", "dynamo", 10, final=True))
    assert sink.only().recompile_reasons == reasons


def test_recompile_reasons_past_their_bound_are_dropped():
    reasons = [f"0/{i}: guard {i} failed" for i in range(40)]
    _, sink = feed(B("0/40", "dynamo", 0), RecompileReasonsEvent(cid("0/40"), reasons), E("0/40", "dynamo", 10, final=True))
    rec = sink.only()
    assert rec.recompile_reasons == reasons[:32]
    assert rec.dropped == 8


# -- lazy backwards and compiled autograd -------------------------------------------------------------------------


def test_lazy_backwards_are_records_of_their_own_counted_per_compile_id():
    asm, sink = feed(
        frame("0/0", 0, 1_000),
        metrics("0/0", **FN),
        frame("0/0", 2_000, 3_000, ("compile_fx.<locals>.bw_compiler", 2_100, 2_900), root="entire_backward_compile"),
        metrics("0/0", forward=False),
        frame("0/0", 4_000, 5_000, root="entire_backward_compile"),  # a second bucket's backward (DDP)
        metrics("0/0", forward=False),
        frame("1/0", 6_000, 7_000, root="entire_backward_compile"),
        metrics("1/0", forward=False),
    )
    assert sink.ids() == [("frame", "0/0"), ("backward", "0/0"), ("backward", "0/0"), ("backward", "1/0")]
    assert [r.backward_index for r in sink.finished] == [None, 0, 1, 0]
    first = sink.finished[1]
    assert outline(first.root) == [("entire_backward_compile", 2_000, 3_000), ("  compile_fx.<locals>.bw_compiler", 2_100, 2_900)]
    assert first.forward is not None and first.forward.compile_id == "0/0"
    assert first.code == CodeLocation("fn", "/w/model.py", 7)  # its forward's code
    assert sink.finished[3].forward is None  # 1/0 had no forward compile here
    assert asm.stats["compiles_backward"] == 3


def test_compiled_autograd_graphs_end_with_their_root_and_only_a_later_cache_miss_is_a_recompile():
    asm, sink = feed(
        RecompileReasonsEvent(None, ["Cache miss due to new autograd node"], for_next="compiled_autograd"),
        frame("!0", 0, 1_000, ("compiled_autograd_graph", 100, 900), root="compiled_autograd"),
        RecompileReasonsEvent(None, ["Cache miss due to changed shapes"], for_next="compiled_autograd"),
        frame("!1", 2_000, 3_000, root="compiled_autograd"),
    )
    first, second = sink.finished  # no metrics record: each finished at its root's end
    assert (first.kind, first.id_str, second.id_str) == ("compiled_autograd", "!0/-/-", "!1/-/-")
    assert first.recompile_reasons == [] and first.recompile_reason is None  # an empty cache's miss
    assert second.recompile_reasons == ["Cache miss due to changed shapes"]
    assert second.recompile_reason == "Cache miss due to changed shapes"
    assert asm.open_count == 0 and asm.stats["compiles_compiled_autograd"] == 2


def test_a_frame_traced_under_compiled_autograd_links_its_graph():
    _, sink = feed(
        frame("!1", 0, 1_000, root="compiled_autograd"),
        frame("!1/0/0", 2_000, 3_000),
        metrics("!1/0/0"),
        frame("0/0", 4_000, 5_000),
        metrics("0/0"),
    )
    assert sink.ids() == [("compiled_autograd", "!1/-/-"), ("frame", "!1/0/0"), ("frame", "0/0")]
    linked = sink.finished[1].compiled_autograd
    assert linked is not None and linked.compile_id == "!1/-/-"
    assert sink.finished[2].compiled_autograd is None


# -- runtime records and synthesized ones -------------------------------------------------------------------------


def test_phases_of_an_ended_compile_are_a_runtime_record_finished_with_its_outermost_phase():
    autotune = ("CachingAutotuner.benchmark_all_configs", 2_000, 2_600, ("TritonBenchmarker.benchmark_gpu", 2_100, 2_300))
    asm, sink = feed(frame("0/0", 0, 1_000), metrics("0/0"), phases("0/0", autotune)[:-1])
    assert sink.ids() == [("frame", "0/0")] and asm.open_count == 1  # the outermost phase is still open
    assert [r.kind for r in sink.started] == ["frame", "runtime"]
    asm.feed(phases("0/0", autotune)[-1])
    runtime = sink.finished[1]
    assert (runtime.kind, runtime.id_str, runtime.incomplete) == ("runtime", "0/0", None)
    assert outline(runtime.root) == [
        ("runtime", 2_000, 2_600),
        ("  CachingAutotuner.benchmark_all_configs", 2_000, 2_600),
        ("    TritonBenchmarker.benchmark_gpu", 2_100, 2_300),
    ]
    assert asm.open_count == 0 and asm.stats["compiles_runtime"] == 1


def test_each_outermost_runtime_phase_is_its_own_record():
    _, sink = feed(
        frame("0/0", 0, 1_000, final=True),
        phases("0/0", ("cudagraphify", 2_000, 2_500), ("CachingAutotuner.benchmark_all_configs", 3_000, 3_100)),
    )
    assert sink.ids() == [("frame", "0/0"), ("runtime", "0/0"), ("runtime", "0/0")]
    assert [(r.root.start_ns, r.root.end_ns) for r in sink.finished[1:]] == [(2_000, 2_500), (3_000, 3_100)]


def test_metrics_with_no_phases_around_them_are_a_synthesized_record():
    asm, sink = feed(
        MetricsEvent(cid("2/0"), {"start_time_us": 1_000, "duration_us": 250, "co_name": "g", "co_filename": "/w/g.py"}),
        MetricsEvent(cid("2/0"), {"start_time": 3.0, "entire_frame_compile_time_s": 0.5}, is_forward=False),
    )
    fwd, bwd = sink.finished
    assert (fwd.kind, fwd.id_str, fwd.root.name) == ("frame", "2/0", "dynamo")
    assert (fwd.root.start_ns, fwd.root.end_ns) == (1_000_000, 1_250_000)
    assert fwd.code.function == "g"
    assert (bwd.kind, bwd.root.name) == ("backward", "entire_backward_compile")
    assert (bwd.root.start_ns, bwd.root.end_ns) == (3_000_000_000, 3_500_000_000)
    assert asm.stats["synthesized"] == 2 and asm.open_count == 0


def test_runtime_metrics_are_counted_and_make_no_record():
    asm, sink = feed(MetricsEvent(cid("0/0"), {"compile_id": "0/0"}, is_runtime=True))
    assert sink.finished == [] and asm.stats["runtime_metrics"] == 1 and asm.stats["synthesized"] == 0


def test_the_users_call_site_from_dynamo_start_passes_over_the_start_up_recorders_frames():
    """A log written while the start-up recorder timed the first forward holds its frames between the user's call and
    torch's (a hook's code, its dispatch, its handler): the call site is still the user's line, as live."""
    stack = [
        {"name": "<module>", "filename_str": "/w/run.py", "line": 125},
        {"name": "_wrapped_call_impl", "filename_str": "<torch-otel start-up hook>", "line": 3},
        {"name": "_dispatch", "filename_str": "/x/site-packages/torch_otel/_features/startup/recorder.py", "line": 510},
        {"name": "_module_call", "filename_str": "/src/torch-otel/torch_otel/_features/startup/targets.py", "line": 150},
        {"name": "_call_impl", "filename_str": "/x/site-packages/torch/nn/modules/module.py", "line": 1786},
        {"name": "forward", "filename_str": "/w/model.py", "line": 9},
    ]
    _, sink = feed(B("0/0", "dynamo", 0), StartEvent(cid("0/0"), stack, attempt=1), E("0/0", "dynamo", 10, final=True))
    rec = sink.only()
    assert rec.user_call_site() == (CodeLocation("<module>", "/w/run.py", 125), False)
    assert rec.caller() == CodeLocation("_call_impl", "/x/site-packages/torch/nn/modules/module.py", 1786)


def test_a_finished_compiles_facts_are_worked_out_once_and_read_the_same_as_from_torchs_records():
    """Sinks read a finished compile's failure, recompile-limit hit, eager fallback and cache lookups from what the
    derive step worked out once (CompileRecord.seal); each reads as torch's records say, and the lookups are a new
    dict on each call (a sink that changes its copy changes no other sink's)."""
    limit_hit = {"fail_type": "Unsupported", "fail_reason": "Dynamo recompile limit exceeded", "has_guarded_code": False}
    lookups = {"inductor_fx_local_cache_miss_count": 2, "aotautograd_local_cache_hit_count": 1}
    cases = [
        (limit_hit, ("Unsupported", "Dynamo recompile limit exceeded", True, True, {})),
        (lookups, (None, None, False, False, {("fx_graph", "local", "miss"): 2, ("aot_autograd", "local", "hit"): 1})),
        ({}, (None, None, False, False, {})),
    ]
    for fields, want in cases:
        asm, sink = feed(frame("0/1", 100, 900), metrics("0/1", **fields))
        rec = sink.only()
        assert rec._sealed is not None
        sealed = (rec.fail_type, rec.fail_reason, rec.recompile_limit_hit, rec.eager_fallback, rec.cache_counts())
        assert sealed == want
        rec._sealed = None  # as torch's records say, worked out again
        assert sealed == (rec.fail_type, rec.fail_reason, rec.recompile_limit_hit, rec.eager_fallback, rec.cache_counts())
        rec.seal()
        rec.cache_counts()[("fx_graph", "local", "hit")] = 99
        assert ("fx_graph", "local", "hit") not in rec.cache_counts()


def test_the_skip_torch_logs_after_a_soft_failed_frame_compile_joins_that_compile():
    """torch 2.10's convert_frame logs a soft failure's skip (``dynamo_graph_break_reason``, "torch.compile will skip
    tracing the frame ...") under the failed compile's id after its metrics and its root's end: the compile waits for
    it. One that never comes (torch's graph_breaks logger off) is finished by the next compile's begin; a failure with
    no user stack (a recompile limit's) has none, and is finished at once."""
    failed = {**FN, "fail_type": "UserError", "fail_reason": "data-dependent", "fail_user_frame_filename": "/w/model.py"}
    skip = GraphBreakEvent(cid("1/0"), "Graph break: ... torch.compile will skip tracing the frame fn", skipped_frame=True)
    dynamo = frame("1/0", 100, 900)
    asm, sink = feed(dynamo[:-1], metrics("1/0", **failed), dynamo[-1])  # 2.10's order: metrics, then the root's end
    assert sink.finished == []  # held for its skip
    asm.feed(skip)
    rec = sink.only()
    assert [gb.skipped_frame for gb in rec.graph_breaks] == [True] and asm.stats["orphan_graph_breaks"] == 0
    asm, sink = feed(dynamo[:-1], metrics("1/0", **failed), dynamo[-1], frame("2/0", 1000, 1100))
    assert sink.ids()[0] == ("frame", "1/0") and sink.finished[0].graph_breaks == []  # no skip came: the next begin
    asm, sink = feed(dynamo[:-1], metrics("1/0", **failed), dynamo[-1])
    asm.release_held()  # live: the end of the batch of events the compile ended in
    assert sink.ids() == [("frame", "1/0")] and sink.finished[0].graph_breaks == []
    asm.feed(skip)  # a skip later than its batch: counted as one with no compile open, as before
    assert len(sink.finished) == 1 and asm.stats["orphan_graph_breaks"] == 1
    for fields in ({**failed, "fail_user_frame_filename": None}, {**FN, "fail_type": "RecompileLimitExceeded"}):
        asm, sink = feed(dynamo, metrics("1/0", **fields))
        assert sink.ids() == [("frame", "1/0")], fields
