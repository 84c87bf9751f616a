"""Frames that keep recompiling: torch's reasons parsed, the limit read, the fix named only where the reason is clear.

The reasons' texts are torch's own (torch/csrc/dynamo/guards.cpp's TensorGuards, and dynamo's value guards with the
source comment it appends), as torch 2.13 logs them (tests/test_diff.py checks them against real runs).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastkit import feed, frame, metrics

from torch_otel._analysis.recompiles import (
    DYNAMIC_SHAPES_URL,
    Guard,
    NearLimitWarning,
    RecompilingFrames,
    advise,
    automatic_dynamic_of,
    frame_lines,
    guard_line,
    limit_words,
    parse_guard,
    recompile_limit_of,
)
from torch_otel._assemble.assembler import Assembler
from torch_otel._core.errors import logger
from torch_otel._sinks.summary import RunSummary, _where

CONFIG = json.dumps({"accumulated_recompile_limit": 256, "automatic_dynamic_shapes": False, "recompile_limit": 8})


@pytest.mark.parametrize(
    ("reason", "guard"),
    [
        ("0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16", Guard("size", "x", 0, ("8", "16"))),
        ("tensor 'L['x']' size mismatch at index 1. expected 3, actual 4", Guard("size", "x", 1, ("3", "4"))),
        ("tensor 'x' stride mismatch at index 0. expected 4, actual 1", Guard("stride", "x", 0, ("4", "1"))),
        ("1/2: tensor 'x' dtype mismatch. expected Float, actual Double", Guard("dtype", "x", None, ("Float", "Double"))),
        ("tensor 'x' requires_grad mismatch. expected requires_grad=0", Guard("requires_grad", "x", None, ("0", "1"))),
        ("tensor 'x' rank mismatch. expected 2, actual 3", Guard("rank", "x", None, ("2", "3"))),
        ("1/3: GLOBAL_STATE changed: grad_mode ", Guard("global_state", None, None, ("grad_mode",))),
        (
            "0/0: n == 0                                  # return x * n  # mp/d33/reasons.py:8 in f",
            Guard("int", "n", None, ("0",)),
        ),
        ("L['n'] == 3", Guard("int", "n", None, ("3",))),
    ],
)
def test_torchs_reasons_are_read_as_guards(reason: str, guard: Guard) -> None:
    assert parse_guard(reason) == guard


@pytest.mark.parametrize(
    "reason",
    ["mode == 'train'", "___check_obj_id(L['self'], 1403)", "flag == True", "Unable to find recompilation reasons", ""],
)
def test_a_reason_no_rule_reads_is_no_guard(reason: str) -> None:
    assert parse_guard(reason) is None


def test_the_limit_is_read_from_the_compiles_dynamo_config_not_the_accumulated_one() -> None:
    assert recompile_limit_of({"dynamo_config": CONFIG}) == 8
    assert recompile_limit_of({"dynamo_config": json.dumps({"accumulated_recompile_limit": 256})}) is None
    assert recompile_limit_of({"dynamo_config": json.dumps({"cache_size_limit": 4})}) == 4  # older releases' name
    assert recompile_limit_of({}) is None and recompile_limit_of(None) is None
    assert automatic_dynamic_of({"dynamo_config": CONFIG}) is False


def test_a_dimension_that_took_values_is_named_with_them_and_fixed_by_mark_dynamic() -> None:
    g = {"kind": "size", "input": "x", "dim": 0, "values": ["8", "16", "24", "32", "40"]}
    assert guard_line(g) == "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"
    fixes, unclear = advise([g], automatic_dynamic=False)
    assert [f["fix"] for f in fixes] == ["torch._dynamo.mark_dynamic(x, 0)"]
    assert fixes[0]["link"] == DYNAMIC_SHAPES_URL and "dynamic=False" in fixes[0]["why"]
    assert unclear is None


def test_three_changing_dimensions_add_dynamic_true_and_an_int_gets_dynamic_true() -> None:
    sizes = [{"kind": "size", "input": n, "dim": 0, "values": ["1", "2"]} for n in ("a", "b", "c")]
    assert [f["fix"] for f in advise(sizes)[0]][-1] == "torch.compile(..., dynamic=True)"
    fixes, _ = advise([{"kind": "int", "input": "n", "dim": None, "values": [], "more_values": 4}])
    assert fixes[0]["fix"] == "torch.compile(..., dynamic=True)" and "'n'" in fixes[0]["why"]


def test_a_reason_that_does_not_say_what_stops_it_says_so_and_names_no_fix() -> None:
    fixes, unclear = advise([{"kind": "stride", "input": "x", "dim": 0, "values": ["4", "1"]}])
    assert fixes == [] and unclear is not None and "does not say" in unclear and "stride" in unclear
    assert advise([]) == ([], "torch's reason does not say which change stops it: torch's reasons name no guard torch-otel reads")
    # a name torch gives that is no Python name: no code to paste, the tensor is described
    fixes, _ = advise([{"kind": "size", "input": "self.w[0]", "dim": 1, "values": ["1", "2"]}])
    assert fixes[0]["fix"] == "torch._dynamo.mark_dynamic(<the tensor torch names 'self.w[0]'>, 1)"


def _compile(cid: str, t0: int, reasons: list[str] | None = None, cache_size: int | None = None, **m: object) -> list[object]:
    fields = {"co_name": "fwd", "co_filename": "/src/model.py", "co_firstlineno": 30, "dynamo_config": CONFIG, **m}
    if cache_size is not None:
        fields["cache_size"] = cache_size
    if reasons:
        fields["recompile_reason"] = reasons[0]
    return [frame(cid, t0, t0 + 10), metrics(cid, **fields)]


def _shape_run(n: int) -> list[object]:
    """A frame recompiled for each new batch size 8, 16, ...: torch lists every cached entry's failure, newest first."""
    out: list[object] = []
    for i in range(n):
        reasons = [
            f"0/{j}: tensor 'x' size mismatch at index 0. expected {8 * (j + 1)}, actual {8 * (i + 1)}"
            for j in reversed(range(i))
        ]
        out += _compile(f"0/{i}", 100 * i, reasons, cache_size=i)
    return out


def test_the_assembler_derives_each_frames_compiles_so_far_the_limit_and_near_once() -> None:
    _, sink = feed(_shape_run(8))
    recs = sink.finished
    assert [r.frame_recompiles for r in recs] == list(range(8))
    assert {r.recompile_limit for r in recs} == {8}
    # limit 8: the 6th compile (5 before it) leaves two more before eager; marked once, not on every later compile
    assert [r.recompile_limit_near for r in recs] == [False] * 5 + [True, False, False]


def test_without_torchs_cache_size_the_assembler_counts_and_live_reads_the_limit() -> None:
    events = []
    for i in range(3):
        events += [frame(f"0/{i}", 100 * i, 100 * i + 10), metrics(f"0/{i}", co_name="f", co_filename="/a.py", co_firstlineno=1)]
    sink_recs = []

    class Keep(NearLimitWarning):
        def on_finish(self, record):  # type: ignore[no-untyped-def]
            sink_recs.append(record)

    asm = Assembler([Keep()], recompile_limit=lambda: 3)
    for ev in events:
        for e in ev if isinstance(ev, list) else [ev]:
            asm.feed(e)
    assert [r.frame_recompiles for r in sink_recs] == [0, 1, 2]
    assert [r.recompile_limit for r in sink_recs] == [3, 3, 3]
    assert [r.recompile_limit_near for r in sink_recs] == [False, True, False]


def test_the_near_limit_warning_is_one_line_per_frame() -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    try:
        asm = Assembler([NearLimitWarning()])
        for e in _shape_run(8):
            for x in e if isinstance(e, list) else [e]:
                asm.feed(x)
    finally:
        logger.removeHandler(handler)
    assert len(lines) == 1, lines
    assert "fwd (/src/model.py:30): 5 recompiles so far, 2 more before torch._dynamo.config.recompile_limit (8)" in lines[0]
    assert "torch._dynamo.mark_dynamic(x, 0)" in lines[0]


def test_the_summary_names_the_frame_its_guard_its_distance_to_the_limit_and_the_fix() -> None:
    summary = RunSummary("replay")
    _, sink = feed(_shape_run(5))
    for r in sink.finished:
        summary.on_finish(r)
    d = summary.to_dict()
    (f,) = d["recompiling_frames"]
    assert (f["function"], f["recompiles"], f["cache_entries"], f["limit"], f["left_before_limit"]) == ("fwd", 4, 5, 8, 3)
    assert f["guards"][0]["line"] == "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"
    assert f["fixes"][0]["fix"] == "torch._dynamo.mark_dynamic(x, 0)"
    assert limit_words(f) == "5 of 8 compiles, 3 more before eager"
    text = summary.format_text()
    assert "frames that keep recompiling: 1" in text and "fwd (model.py:30): 4 recompiles, 5 of 8 compiles" in text
    assert all(len(line) <= 100 for line in text.splitlines()) and len(text.splitlines()) <= 45


def test_an_int_arguments_values_are_counted_not_shown_unless_payloads_are_captured() -> None:
    frames = RecompilingFrames(capture_payloads=False)
    shown = RecompilingFrames(capture_payloads=True)
    events = []
    for i in range(4):
        reasons = [f"0/{j}: n == {j}  # return x * n  # m.py:3 in f" for j in reversed(range(i))]
        events += _compile(f"0/{i}", 100 * i, reasons, cache_size=i)
    _, sink = feed(events)
    for r in sink.finished:
        frames.add(r, ("fwd", "/src/model.py", 30))
        shown.add(r, ("fwd", "/src/model.py", 30))
    g = frames.to_dict()[0]["guards"][0]
    assert g["values"] == [] and g["line"].startswith("int argument 'n' took 3 values (not shown")
    assert shown.to_dict()[0]["guards"][0]["line"] == "int argument 'n' took 3 values: 0, 1, 2"
    assert frames.to_dict()[0]["fixes"][0]["fix"] == "torch.compile(..., dynamic=True)"


def test_replay_without_the_limit_in_its_log_says_limit_unknown() -> None:
    events = []
    for i in range(3):
        reasons = [f"tensor 'x' size mismatch at index 0. expected {j + 1}, actual {i + 1}" for j in reversed(range(i))]
        fields = {"co_name": "f", "co_filename": "/a.py", "co_firstlineno": 1}
        if reasons:
            fields["recompile_reason"] = reasons[0]
        events += [frame(f"0/{i}", 100 * i, 100 * i + 10), metrics(f"0/{i}", **fields)]
    summary = RunSummary("replay")
    _, sink = feed(events)
    for r in sink.finished:
        summary.on_finish(r)
    (f,) = summary.to_dict()["recompiling_frames"]
    assert f["limit"] is None and f["limit_status"] == "unknown"
    assert limit_words(f) == "limit unknown (the log does not say)"


def test_frame_lines_fit_the_room_they_are_given() -> None:
    fr = {
        "function": "f",
        "file": "/a.py",
        "line": 1,
        "recompiles": 3,
        "limit_hits": 0,
        "limit_status": "ok",
        "limit": 8,
        "cache_entries": 4,
        "left_before_limit": 4,
        "guards": [{"line": "dim 0 of input 'x' took 4 values: 1, 2, 3, 4"}],
        "fixes": [{"fix": "torch._dynamo.mark_dynamic(x, 0)", "link": DYNAMIC_SHAPES_URL}],
    }
    assert len(frame_lines([fr] * 5, 100, 100, _where)) == 1 + 5 * 4
    lines = frame_lines([fr] * 5, 100, 7, _where)
    assert len(lines) <= 7 and lines[-1].startswith("  (4 more")
    assert frame_lines([fr], 100, 1, _where) == []


def test_the_evidence_of_graph_calls_names_the_graphs_that_ran_once_as_a_range_only_when_they_are_one() -> None:
    from torch_otel._analysis.recompiles import add_call_evidence

    def evidence(calls: list[int]) -> dict[str, Any]:
        frames: list[dict[str, Any]] = [
            {"function": "f", "file": "/a/m.py", "line": 3, "fixes": [{"fix": "torch._dynamo.mark_dynamic(x, 0)"}]}
        ]
        graphs = [{"id": f"0/{i}", "kind": "frame", "calls": c, "compile_s": 1.5} for i, c in enumerate(calls)]
        graphs.append({"id": "0/1", "kind": "backward", "calls": 1, "compile_s": 9.0})  # a backward is no recompile
        add_call_evidence(frames, {"frames": [{"function": "f", "file": "m.py", "line": 3, "graphs": graphs}]})
        return frames[0].get("evidence") or {}

    ev = evidence([50, 1, 1, 1, 9])
    assert (ev["ids"], ev["of"], ev["compile_s"]) == (["0/1", "0/2", "0/3"], 5, 4.5)
    assert ev["line"] == (
        "graphs 0/1 to 0/3 ran at most once each and cost 4.50 s of compiling: torch._dynamo.mark_dynamic(x, 0) would "
        "have saved it"
    )
    assert evidence([50, 1, 7, 1, 1])["line"].startswith("graphs 0/1, 0/3, 0/4 ran at most once each")
    assert evidence([50, 0, 9])["line"].startswith("graph 0/1 ran at most once and cost 1.50 s")
    assert evidence([50, 9]) == {}  # every recompile paid off: no evidence
