"""Fast tier: standalone compiles (strict ``torch.export``, AOT precompile, AOTInductor), from event sequences.

torch logs their roots (``fullgraph_capture``, ``compile_fx_aot``) with no compile id: a root takes the id of
its first phase that has one, and records with no id join it while it is the only such compile in flight.
No torch.compile or torch.export anywhere; run the tier with::

    .venv/bin/python -m pytest tests/fast
"""

from __future__ import annotations

from tests.fast.fastkit import B, E, cid, feed, metrics, outline, phases
from torch_otel._model.events import ArtifactEvent, GraphBreakEvent, MetricsEvent, Origin

CAPTURE = phases("0/0", ("compile_attempt_0", 100, 800, ("bytecode_tracing", 200, 700)))
EXPORT_STACK = ("export", "_export", "_strict_export", "_export_to_aten_ir_make_fx")
PRECOMPILE_STACK = ("aot_compile", "aot_compile_fullgraph")


def test_a_strict_exports_capture_takes_its_first_phases_id_and_is_wrapped_in_an_export_root():
    asm, sink = feed(
        B(None, "fullgraph_capture", 0),
        CAPTURE[:1],
        GraphBreakEvent(cid("0/0"), "a break the re-keyed compile receives"),
        CAPTURE[1:],
        E(None, "fullgraph_capture", 900),
    )
    assert sink.finished == [] and asm.open_count == 1  # ended: waiting for its metrics
    assert sink.started_ids == [("export", "-/-")]  # it began with no id
    asm.feed(MetricsEvent(None, {"co_name": "forward"}, stack_functions=EXPORT_STACK))
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete) == ("export", "0/0", None)
    assert sink.started == [rec]
    assert outline(rec.root) == [
        ("export", 0, 900),
        ("  fullgraph_capture", 0, 900),
        ("    compile_attempt_0", 100, 800),
        ("      bytecode_tracing", 200, 700),
    ]
    assert rec.root.args == {"strict": True}
    assert [g.reason for g in rec.graph_breaks] == ["a break the re-keyed compile receives"]
    assert rec.metrics == {"co_name": "forward"}
    assert asm.open_count == 0 and asm.stats["compiles_export"] == 1
    assert asm.stats["unmatched_phase_begins"] == asm.stats["unmatched_phase_ends"] == asm.stats["synthesized"] == 0


def test_a_strict_export_flushed_without_metrics_gets_the_same_tree():
    asm, sink = feed(B(None, "fullgraph_capture", 0), CAPTURE, E(None, "fullgraph_capture", 900))
    asm.flush("the log ends before the compile ended")
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete) == ("export", "0/0", None)  # it had ended
    assert [line[0] for line in outline(rec.root)] == [
        "export",
        "  fullgraph_capture",
        "    compile_attempt_0",
        "      bytecode_tracing",
    ]


def test_a_capture_whose_metrics_stack_says_aot_compile_is_a_precompile():
    asm, sink = feed(
        B(None, "fullgraph_capture", 0),
        phases("3/0", ("compile_attempt_0", 100, 800)),
        E(None, "fullgraph_capture", 900),
        MetricsEvent(None, {"co_name": "fn"}, stack_functions=PRECOMPILE_STACK),
    )
    rec = sink.only()
    assert (rec.kind, rec.id_str) == ("precompile", "3/0")
    assert outline(rec.root) == [("fullgraph_capture", 0, 900), ("  compile_attempt_0", 100, 800)]
    assert asm.stats["compiles_precompile"] == 1 and asm.open_count == 0


def test_aot_inductor_logs_no_ids_and_its_phases_and_artifacts_join_it():
    asm, sink = feed(
        B(None, "compile_fx_aot", 0),
        phases(None, ("inductor_compile", 100, 800, ("AotCodeCompiler.compile", 300, 750, ("compile_file", 400, 700)))),
        ArtifactEvent(None, "artifact", "aot_inductor_output_code"),
        E(None, "compile_fx_aot", 900),
    )
    asm.flush()
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete) == ("aot_inductor", "-/-", None)
    assert outline(rec.root) == [
        ("compile_fx_aot", 0, 900),
        ("  inductor_compile", 100, 800),
        ("    AotCodeCompiler.compile", 300, 750),
        ("      compile_file", 400, 700),
    ]
    assert [a.name for a in rec.artifacts] == ["aot_inductor_output_code"]
    assert asm.stats["unattributed_phases"] == 0 and asm.stats["orphan_artifacts"] == 0


def test_a_standalone_compile_beside_a_frame_compile_keeps_to_its_own_events():
    asm, sink = feed(
        B(None, "compile_fx_aot", 0),
        B("5/0", "dynamo", 10),
        B(None, "inductor_compile", 20),  # no id: the AOTInductor compile's
        B("5/0", "bytecode_tracing", 30),
        E("5/0", "bytecode_tracing", 40),
        E(None, "inductor_compile", 50),
        E("5/0", "dynamo", 60),
        metrics("5/0"),
        E(None, "compile_fx_aot", 70),
    )
    asm.flush()
    frame_rec, aot = sink.finished
    assert outline(frame_rec.root) == [("dynamo", 10, 60), ("  bytecode_tracing", 30, 40)]
    assert outline(aot.root) == [("compile_fx_aot", 0, 70), ("  inductor_compile", 20, 50)]
    assert asm.stats["unattributed_phases"] == 0


def test_the_live_export_root_takes_its_id_and_nests_torchs_capture():
    # live: the export hook's root, and torch's fullgraph_capture inside it (B and E with no compile id)
    asm, sink = feed(
        B(None, "export", 0, origin=Origin(code_name="forward")),
        B(None, "fullgraph_capture", 50, origin=Origin(root_kind="export")),  # inside the export root: a phase
        CAPTURE,
        E(None, "fullgraph_capture", 850),
        E(None, "export", 900, final=True),
    )
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete) == ("export", "0/0", None)
    assert outline(rec.root) == [
        ("export", 0, 900),
        ("  fullgraph_capture", 50, 850),
        ("    compile_attempt_0", 100, 800),
        ("      bytecode_tracing", 200, 700),
    ]
    assert asm.stats["unmatched_phase_begins"] == asm.stats["unmatched_phase_ends"] == 0


def test_the_live_export_root_of_an_aot_precompile_is_a_precompile():
    asm, sink = feed(
        B(None, "export", 0, origin=Origin(root_kind="precompile")),
        phases(None, ("compile_attempt_0", 100, 800)),
        E(None, "export", 900, final=True),
    )
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.root.name) == ("precompile", "-/-", "export")
    assert outline(rec.root) == [("export", 0, 900), ("  compile_attempt_0", 100, 800)]
    assert asm.stats["compiles_precompile"] == 1


def test_a_standalone_roots_end_with_nothing_open_is_an_orphan():
    asm, sink = feed(E(None, "fullgraph_capture", 10), E(None, "compile_fx_aot", 20))
    assert asm.stats["orphan_phases"] == 2 and sink.finished == []
