"""The run summary's text and JSON shape, from records built by the assembler (no torch compile)."""

from __future__ import annotations

from tests.fast.fastkit import flatten, frame, metrics
from torch_otel._assemble.assembler import Assembler
from torch_otel._sinks.summary import SCHEMA_VERSION, RunSummary
from torch_otel._sinks.summary_text import format_text

REASONS = [
    "tensor 'x' size mismatch at index 0. expected 8, actual 16",
    "tensor 'x' dtype mismatch. expected Float, actual Double",
    "tensor 'y' size mismatch at index 1. expected 2, actual 3",
    "tensor 'x' stride mismatch at index 0. expected 1, actual 2",
    "tensor 'z' requires_grad mismatch. expected requires_grad=0",
]


def _summary() -> RunSummary:
    run = RunSummary("replay")
    asm = Assembler([run])
    events = []
    for i, reason in enumerate(REASONS):
        cid = f"0/{i + 1}"
        events += [frame(cid, i * 100, i * 100 + 50), metrics(cid, co_name="f", co_filename="/m.py", recompile_reason=reason)]
    for ev in flatten(events):
        asm.feed(ev)  # type: ignore[arg-type]
    return run


def test_the_text_says_how_many_recompile_reasons_it_leaves_out():
    facts = _summary().to_dict()
    assert facts["recompiles"]["total"] == 5 and len(facts["recompiles"]["top_reasons"]) == 5
    lines = format_text(facts).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("recompiles: 5"))
    shown = lines[at + 1 : at + 5]
    assert len([ln for ln in shown[:3] if ": tensor" in ln]) == 3
    assert shown[3] == "      2  (2 more reasons: --json or the HTML page lists them)", lines


def test_the_json_carries_its_schema_version():
    facts = _summary().to_dict()
    assert facts["schema_version"] == SCHEMA_VERSION == 1
    assert facts["caches"]["misses"] == 0 and facts["caches"]["odd_ranks"] == []


def test_a_traces_file_path_holds_the_rank_and_pid():
    import os

    from torch_otel._core.settings import load_settings

    s = load_settings({"TORCH_OTEL_TRACES_FILE": "/t/spans-{rank}-{pid}.jsonl", "RANK": "3"}, report=False)
    assert s.traces_file == f"/t/spans-3-{os.getpid()}.jsonl"
    bad = load_settings({"TORCH_OTEL_TRACES_FILE": "/t/spans-{host}.jsonl"}, report=False)
    assert bad.traces_file is None and any("{rank} and {pid}" in p for p in bad.problems)
    assert load_settings({"TORCH_OTEL_TRACES_FILE": "/t/plain.jsonl"}, report=False).traces_file == "/t/plain.jsonl"


def test_a_frame_name_keeps_the_users_call_site_and_line_where_a_librarys_file_gives_way() -> None:
    """A library frame named with the user's call site (GPT-2's forward called from train.py): on a short row the
    library's file name is cut first, its :line kept (or the place goes whole), then the name; the user's line stays whole."""
    from torch_otel._core.text import cut_where

    where = "GPT2LMHeadModel.forward (modeling_gpt2.py:647) from hf_models.py:65"
    assert cut_where(where, 80) == where
    assert cut_where(where, 64) == "GPT2LMHeadModel.forward (modeli…pt2.py:647) from hf_models.py:65"
    shorter = cut_where(where, 60)
    assert len(shorter) == 60 and shorter.endswith(".py:647) from hf_models.py:65"), shorter
    assert cut_where(where, 54) == "GPT2LMHeadModel.forward from hf_models.py:65"  # the place goes whole
    assert cut_where(where, 40).endswith(" from hf_models.py:65") and len(cut_where(where, 40)) == 40
    own = "a_function_whose_name_is_long_enough_to_fill_the_frames_column (model.py:30)"
    assert cut_where(own, 50).endswith(" (model.py:30)") and len(cut_where(own, 50)) == 50


def test_compile_seconds_per_call_always_carry_a_decimal_point():
    """0.996 s per call once printed ``(1)`` and 4e-05 ``(4e-05)``: the README's check of the demo (which reads numbers
    with a decimal point as placeholders) then failed on a run whose first graph took just under a second."""
    from torch_otel._features.graph_calls.calls import NAME
    from torch_otel._features.graph_calls.summary_part import summary_text

    per_call = {"0/0": 0.996, "0/1": 0.13, "0/2": 0.00004, "0/3": 1.04, "0/4": 12.3}
    graphs = [{"id": g, "calls": 1, "kind": "frame", "compile_s_per_call": s} for g, s in per_call.items()]
    frame_ = {"function": "f", "file": "/m.py", "line": 3, "compile_s": 14.5, "dead": 0, "graphs": graphs}
    facts = {NAME: {"graphs": 5, "calls": 5, "compile_s": 14.5, "ran_at_most": [], "frames": [frame_]}}
    line = next(ln for ln in summary_text(facts, 200) if "calls per graph" in ln)
    assert line.endswith("0/0 1 (1.0), 0/1 1 (0.13), 0/2 1 (0.00004), 0/3 1 (1.0), 0/4 1 (12.3)"), line
