"""Frames that keep recompiling: torch's reasons parsed, the limit read, the fix named only where the reason is clear.

The reasons' texts are torch's own (torch/csrc/dynamo/guards.cpp's TensorGuards, and dynamo's value guards with the
source comment it appends), as torch 2.13 logs them (tests/test_diff.py checks them against real runs).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fast.fastkit import cid, feed, frame, metrics
from torch_otel._analysis.recompile_guards import Guard, automatic_dynamic_of, guard_line, parse_guard, recompile_limit_of
from torch_otel._analysis.recompile_hints import DYNAMIC_SHAPES_URL, FrameContext, advise
from torch_otel._analysis.recompiling_frames import RecompilingFrames, frame_lines, limit_words
from torch_otel._assemble.assembler import Assembler
from torch_otel._core.categories import recompile_category, scrub_guard_text
from torch_otel._core.errors import logger
from torch_otel._sinks.near_limit import NearLimitWarning
from torch_otel._sinks.summary import RunSummary
from torch_otel._sinks.summary_text import row_where as _row_where

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
        (
            "0/0: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 8, actual 1",
            Guard("size", "kwargs['input_ids']", 1, ("8", "1")),
        ),
        (
            "0/0: len(kwargs) == 6   # if old in kwargs:  # transformers/utils/deprecation.py:134 in f",
            Guard("kwargs", None, None, ("6",)),
        ),
    ],
)
def test_torchs_reasons_are_read_as_guards(reason: str, guard: Guard) -> None:
    assert parse_guard(reason) == guard


# A Mamba trained with a new sequence length per step (transformers 5.24, torch 2.13, aot_eager): the guard dynamic
# shapes made on the sequence length, as torch logged its recompile reason
MAMBA_SHAPE_GUARD = (
    "0/1: (((-1) + (kwargs['input_ids'].size()[1] // 2)) // 2) == (2*(kwargs['input_ids'].size()[1] // 8))  # if "
    "batch_sizes and any(size != batch_sizes[0] for size in batch_sizes):  # _functorch/vmap.py:72 in "
    "_validate_and_get_batch_size (_dynamo/variables/tensor.py:2606 in evaluate_expr)"
)


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        # T5's generate, torch 2.13: a value guard whose source line says "is not None" (it read "id")
        (
            "0/0: kwargs['cache'].is_updated[0] == False                   # if is_cross_attention and cache is not "
            "None and is_updated:  # transformers/models/t5/modeling_t5.py:321 in forward",
            "value",
        ),
        ("0/0: n == 0                                  # y = x.to(x.device, x.dtype)  # m.py:8 in f", "value"),
        ("L['self'].training == True   # if self.training and x.requires_grad:  # m.py:3 in f", "value"),
        ("L['k'] <= 7                  # if x.dtype == y.dtype:  # m.py:4 in f", "size_mismatch"),
        ("___check_obj_id(L['fn'], 1403)   # return fn(x, size=3) == y  # m.py:9 in f", "id"),
        ("L['mask'] is None   # if mask is not None and mask.dtype == torch.bool:  # m.py:2 in f", "id"),
        ("0/1: tensor 'x' size mismatch at index 0. expected 8, actual 16", "size_mismatch"),
        ("tensor 'x' dtype mismatch. expected Float, actual Double", "dtype"),
        ("1/3: GLOBAL_STATE changed: grad_mode ", "global_state"),
        # a guard on sizes: a number a size was specialized to, a relation dynamic shapes made (Mamba, torch 2.13)
        ("0/0: L['x'].size()[1] == 8  # return x.view(-1, 8)  # m.py:3 in f", "size_mismatch"),
        (MAMBA_SHAPE_GUARD, "size_mismatch"),
        ("L['x'].stride()[0] == 8  # return x.view(-1)  # m.py:3 in f", "stride_mismatch"),
    ],
)
def test_a_recompiles_category_is_its_guards_not_the_source_line_torch_appends(reason: str, category: str) -> None:
    assert recompile_category(reason) == category


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("scale == 0.5  # y = x * s  # f.py:9 in f", "scale == <value>"),
        # a literal is taken whole, however deep it nests: none of it is left behind the mark
        ("L['cfg'] == (1, (2, 3))  # m.py:1 in f", "L['cfg'] == <value>"),
        ("L['xs'] == [1, [2, 3]]", "L['xs'] == <value>"),
        ("L['d'] == {'a': (1,)} and L['n'] != -3.5e-2", "L['d'] == <value> and L['n'] != <value>"),
        ("L['name'] == 'a)b'", "L['name'] == <value>"),
        # a guard on sizes keeps its numbers (shapes, not data): the relation whole, not cut inside its parentheses
        ("L['x'].size()[1] == 8  # return x.view(-1, 8)  # m.py:3 in f", "L['x'].size()[1] == 8"),
        ("L['x'].stride()[0] == 8", "L['x'].stride()[0] == 8"),
        (
            MAMBA_SHAPE_GUARD.removeprefix("0/1: "),
            "(((-1) + (kwargs['input_ids'].size()[1] // 2)) // 2) == (2*(kwargs['input_ids'].size()[1] // 8))",
        ),
        (
            "tensor 'x' size mismatch at index 0. expected 8, actual 16",
            "tensor 'x' size mismatch at index 0. expected 8, actual 16",
        ),
    ],
)
def test_a_reason_shown_keeps_its_shapes_and_hides_each_value_whole(reason: str, shown: str) -> None:
    """By default a value guard's literal leaves the process as ``<value>`` (docs/configuration.md, Privacy). Mamba's
    shape guard read ``... // 2) == <value>[1] // 8))``: the literal's pattern stopped at the first closing parenthesis
    of an expression of sizes, and named a shape relation a value."""
    assert scrub_guard_text(reason) == shown


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


USER = FrameContext("fwd", "/src/model.py", "train.py:12", True, False)
LIB = "/venv/lib/python3.11/site-packages/transformers/"
TORCH = "/venv/lib/python3.11/site-packages/torch/"


def _size(name: str, dim: int, *values: str, failures: int = 4) -> dict[str, object]:
    g: dict[str, object] = {"kind": "size", "input": name, "dim": dim, "values": list(values), "failures": failures}
    g["line"] = guard_line(g)
    return g


def test_a_dimension_of_the_users_input_is_fixed_at_the_call_site_and_by_automatic_dynamic() -> None:
    g = _size("x", 0, "8", "16", "24", "32", "40")
    assert g["line"] == "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"
    hints = advise([g], USER)
    assert [(h.fix, h.where) for h in hints] == [
        ("torch._dynamo.maybe_mark_dynamic(x, 0)", "call_site"),
        ("automatic dynamic shapes back on: no dynamic=False, automatic_dynamic_shapes = True", "compile"),
    ]
    assert hints[0].link == DYNAMIC_SHAPES_URL and "train.py:12" in hints[0].why and hints[0].guard == g["line"]
    assert "dynamic=False" in hints[1].why and hints[0].evidence == ()


def test_no_hint_marks_a_dimension_torch_specializes() -> None:
    """A dimension that took 1 (a decode step, a batch of one): marking it does not make it dynamic (torch compiles a
    size of 0 or 1 as a constant, and raises no ConstraintViolationError)."""
    on = FrameContext("fwd", "/src/model.py", "train.py:12", True, True)  # automatic dynamic shapes on
    for values in (("1", "8"), ("0", "4", "8")):
        (h,) = advise([_size("kwargs['input_ids']", 1, *values)], on)
        assert h.fix is None and "specializes sizes 0 and 1" in h.why and h.why.endswith("no hint is given")
    # automatic dynamic shapes off: turning them back on is safe (it never raises) and shares one graph among the
    # other sizes; 0 and 1 still compile their own (issue 52: sizes 4, 8, 2, 1, 3 recompile half as often)
    off = FrameContext("fwd", "/src/model.py", "train.py:12", True, False)
    for values in (("1", "8"), ("0", "4", "8")):
        (h,) = advise([_size("x", 0, *values)], off)
        assert h.fix == "automatic dynamic shapes back on: no dynamic=False, automatic_dynamic_shapes = True"
        assert h.where == "compile" and "Sizes 0 and 1 still compile a graph each" in h.why and "mark_dynamic" not in h.fix


def test_a_tensor_the_user_does_not_pass_gets_no_call_site_hint() -> None:
    """Built inside a library (a model's output, a cache's layer), or a resume function's local: not reachable."""
    inner = FrameContext("ForCausalLMLoss", LIB + "loss/loss_utils.py", "train.py:12", False, False)
    for name in ("kwargs['logits']", "labels", "kwargs['cache'].layers[0].keys"):
        hints = advise([_size(name, 1, "8", "12", "16")], inner)
        assert [h.where for h in hints] == ["compile"], (name, hints)
    resume = FrameContext("torch_dynamo_resume_in_forward_at_13", "/src/model.py", "train.py:12", False, False)
    assert [h.where for h in advise([_size("h", 0, "8", "16", "24")], resume)] == ["compile"]
    # automatic dynamic was on, yet it kept recompiling: no change is known to be safe
    on = FrameContext("ForCausalLMLoss", LIB + "loss/loss_utils.py", "train.py:12", False, True)
    (h,) = advise([_size("kwargs['logits']", 1, "8", "12", "16")], on)
    assert h.fix is None and "the fix belongs at the call site at train.py:12" in h.why


def test_the_entry_frame_of_a_library_model_is_fixed_on_what_the_user_passes() -> None:
    entry = FrameContext("wrapper", LIB + "utils/generic.py", "train.py:12", True, False)
    hints = advise([_size("kwargs['input_ids']", 1, "8", "12", "16")], entry)
    assert [h.fix for h in hints][1] == "torch._dynamo.maybe_mark_dynamic(input_ids, 1)"
    assert hints[0].where == "compile"  # a library frame: automatic dynamic covers this frame and every other


def test_a_guard_that_failed_once_under_automatic_dynamic_needs_no_fix() -> None:
    auto = FrameContext("fwd", "/src/model.py", None, True, True)
    (h,) = advise([_size("x", 1, "8", "12", failures=1)], auto)
    assert h.fix is None and "automatic dynamic shapes made dim 1" in h.why


def test_int_dtype_requires_grad_and_the_number_of_keyword_arguments() -> None:
    n = {"kind": "int", "input": "n", "dim": None, "values": [], "more_values": 4, "failures": 3}
    (h,) = advise([n], USER)
    assert h.fix == "torch.compile(..., dynamic=True)" and "'n'" in h.why
    for kind, fix in (
        ("dtype", "pass 'x' in one dtype (cast it before the call)"),
        ("requires_grad", "pass 'x' with the same requires_grad on every call"),
        ("rank", "pass 'x' with one number of dimensions"),
    ):
        (h,) = advise([{"kind": kind, "input": "x", "dim": None, "values": ["a", "b"], "failures": 2}], USER)
        assert (h.fix, h.where) == (fix, "call_site")
    kw = {"kind": "kwargs", "input": None, "dim": None, "values": ["6"], "failures": 1}
    generate = FrameContext("wrapped_func", LIB + "utils/deprecation.py", "gen.py:9", False, True)
    (h,) = advise([kw], generate)
    assert h.fix is None and "library code" in h.why and h.why.endswith("no hint is given")


def test_a_reason_that_does_not_say_what_stops_it_says_so_and_names_no_fix() -> None:
    (h,) = advise([{"kind": "stride", "input": "x", "dim": 0, "values": ["4", "1"], "failures": 2}], USER)
    assert h.fix is None and h.why.endswith("no hint is given")
    (h,) = advise([], USER, reasons=["id: ___check_obj_id(L['self'], <value>)"])
    assert h.fix is None and "does not name a guard torch-otel reads" in h.why


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
    assert "torch._dynamo.maybe_mark_dynamic(x, 0) would stop it" in lines[0]


def test_the_summary_names_the_frame_its_guard_its_distance_to_the_limit_and_the_fix() -> None:
    summary = RunSummary("replay")
    _, sink = feed(_shape_run(5))
    for r in sink.finished:
        summary.on_finish(r)
    d = summary.to_dict()
    (f,) = d["recompiling_frames"]
    assert (f["function"], f["recompiles"], f["cache_entries"], f["limit"], f["left_before_limit"]) == ("fwd", 4, 5, 8, 3)
    assert f["guards"][0]["line"] == "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"
    assert f["fixes"][0]["fix"] == "torch._dynamo.maybe_mark_dynamic(x, 0)"
    assert f["keeps_recompiling"] is True and f["stopped_by"] is None
    assert limit_words(f) == "5 of 8 frame compiles, 3 more before eager"
    text = summary.format_text()
    assert "frames that keep recompiling: 1 (the costliest first)" in text
    assert "fwd (model.py:30): 4 recompiles (0.00 s), 3 more before eager" in text
    assert "    torch's reason: dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40" in text
    assert "    fix: torch._dynamo.maybe_mark_dynamic(x, 0)" in text
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
    # four compiles, four values: each reason names the value its newest entry compiled for, so 3 is named by none
    assert g["values"] == [] and g["line"].startswith("int argument 'n' took 4 values (not shown")
    assert (
        shown.to_dict()[0]["guards"][0]["line"]
        == "int argument 'n' took 4 values: 0, 1, 2, and the newest, which no reason names"
    )
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
    assert len(frame_lines([fr] * 5, 100, 100, _row_where)) == 1 + 5 * 4
    lines = frame_lines([fr] * 5, 100, 7, _row_where)
    assert len(lines) <= 7 and lines[-1].startswith("  (4 more")
    # too little room: the block never vanishes (issue 52): its costliest frame, and how many more there are
    assert len(frame_lines([fr], 100, 1, _row_where)) == 1 + 4
    tight = frame_lines([fr] * 3, 100, 1, _row_where)
    assert len(tight) == 1 + 4 + 1 and tight[-1] == "  (2 more: --json or the HTML page lists them)"
    assert frame_lines([fr] * 5, 100, 100, _row_where, most=3)[-1] == "  (2 more: --json or the HTML page lists them)"


def _entries(reported: str, older: list[str], cid: str, t0: int, size: int, **m: object) -> list[object]:
    fields = {"co_name": "fwd", "co_filename": "/src/model.py", "co_firstlineno": 30, "dynamo_config": CONFIG, **m}
    fields["cache_size"] = size
    fields["recompile_reason"] = reported
    return [frame(cid, t0, t0 + 10), metrics(cid, **fields)]


def test_only_the_reason_torch_reported_makes_a_guard_and_its_hint() -> None:
    """An FSDP2-like run: torch reported requires_grad of x; older entries' failures were size guards. The guard and
    its hint are the reported one's, on the text as in the JSON: never a mark_dynamic drawn from another entry."""
    events = _compile("0/0", 0, cache_size=0)
    for i in range(1, 7):
        events += _entries(
            f"0/{i - 1}: tensor 'x' requires_grad mismatch. expected requires_grad={i % 2}", [], f"0/{i}", 100 * i, i
        )
    summary = RunSummary("replay")
    _, sink = feed(events)
    for r in sink.finished:
        summary.on_finish(r)
    (f,) = summary.to_dict()["recompiling_frames"]
    assert [g["kind"] for g in f["guards"]] == ["requires_grad"]
    assert [h["fix"] for h in f["hints"]] == ["pass 'x' with the same requires_grad on every call"]
    text = summary.format_text()
    assert "torch's reason: requires_grad of input 'x' took 2 values: False, True" in text
    assert "fix: pass 'x' with the same requires_grad on every call" in text and "mark_dynamic" not in text


def test_frames_automatic_dynamic_stopped_are_not_flagged() -> None:
    """Each guard failed once with automatic dynamic on (a dynamic cache's generate: 8 -> 1, then 8 -> 9): stopped."""
    auto = json.dumps({"automatic_dynamic_shapes": True, "recompile_limit": 8})
    events = _compile("0/0", 0, cache_size=0, dynamo_config=auto)
    events += _entries(
        "0/0: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 8, actual 1", [], "0/1", 100, 1, dynamo_config=auto
    )
    events += _entries(
        "0/1: tensor 'kwargs['k']' size mismatch at index 2. expected 8, actual 9", [], "0/2", 200, 2, dynamo_config=auto
    )
    summary = RunSummary("replay")
    _, sink = feed(events)
    for r in sink.finished:
        summary.on_finish(r)
    (f,) = summary.to_dict()["recompiling_frames"]
    assert f["recompiles"] == 2 and f["keeps_recompiling"] is False
    assert f["stopped_by"].startswith("automatic dynamic shapes")
    assert all(h["fix"] is None for h in f["hints"])  # 1 is specialized; 8 -> 9 became dynamic
    assert "frames that keep recompiling" not in summary.format_text()


def test_two_models_through_one_library_wrapper_are_two_frames_ordered_by_cost() -> None:
    """The same code object (a library's wrapper) called from two lines of the user's: two frames, as torch's cache
    keeps them, the costlier first."""
    from torch_otel._model.events import Origin

    summary = RunSummary("live")
    path = LIB + "utils/generic.py"
    for n, (line, dur) in enumerate(((20, 10), (21, 50))):
        events = []
        for i in range(3):
            cid = f"{n}/{i}"
            fields = {"co_name": "wrapper", "co_filename": path, "co_firstlineno": 1030, "dynamo_config": CONFIG, "cache_size": i}
            if i:
                fields["recompile_reason"] = (
                    f"{n}/{i - 1}: tensor 'kwargs['input_ids']' size mismatch at index 1. expected {8 * i}, actual {8 * i + 8}"
                )
            events += [frame(cid, 1000 * n + 100 * i, 1000 * n + 100 * i + dur), metrics(cid, duration_us=dur, **fields)]
        _, sink = feed(events)
        for r in sink.finished:
            r.origin = Origin(caller_function="main", caller_file="/home/me/train.py", caller_line=line)
            r.call_site, r.called_directly = r.user_call_site()
            summary.on_finish(r)
    rows = summary.to_dict()["recompiling_frames"]
    assert [(r["call_site"], r["recompiles"]) for r in rows] == [("train.py:21", 2), ("train.py:20", 2)]
    assert [g["values"] for r in rows for g in r["guards"]] == [["8", "16", "24"], ["8", "16", "24"]]
    assert "wrapper (generic.py:1030) from train.py:21" in summary.format_text()


def test_the_evidence_of_graph_calls_names_the_graphs_that_ran_once_as_a_range_only_when_they_are_one() -> None:
    from torch_otel._features.graph_calls.summary_part import add_call_evidence

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


def test_the_compile_the_limit_stopped_joins_its_frame_called_from_the_frames_last_call_site() -> None:
    """Replay: torch logs no code and no stack for the compile its recompile limit stops (a BERT trained with
    dynamic=False: its frame is transformers' wrapper, a library's, keyed by the user's call site too), so it read
    as another frame, with no call site: two rows, the one with the recompiles not at the limit."""
    from torch_otel._model.events import StartEvent

    limit_2 = json.dumps({"automatic_dynamic_shapes": False, "recompile_limit": 2})
    stack = [
        {"filename_str": "/src/train.py", "line": 18, "name": "train"},
        {"filename_str": LIB + "utils/generic.py", "line": 1030, "name": "wrapper"},
    ]
    events: list[object] = []
    for i in range(2):
        fields = {
            "co_name": "wrapper",
            "co_filename": LIB + "utils/generic.py",
            "co_firstlineno": 1030,
            "dynamo_config": limit_2,
            "cache_size": i,
        }
        if i:
            fields["recompile_reason"] = "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16"
        begin, end = frame(f"0/{i}", 100 * i, 100 * i + 10)
        events += [begin, StartEvent(cid(f"0/{i}"), stack), end, metrics(f"0/{i}", **fields)]  # dynamo_start: after begin
    limit = "Dynamo recompile limit exceeded\n  Developer debug context: Limit type: recompile_limit"
    events += [frame("0/2", 300, 310), metrics("0/2", fail_type="Unsupported", fail_reason=limit, dynamo_config=limit_2)]
    summary = RunSummary("replay")
    _, sink = feed(events)
    for r in sink.finished:
        summary.on_finish(r)
    d = summary.to_dict()
    (f,) = d["recompiling_frames"]
    assert (f["function"], f["call_site"], f["recompiles"], f["limit_hits"]) == ("wrapper", "train.py:18", 1, 1)
    assert [(g["function"], g["call_site"], g["compiles"]) for g in d["frames"]] == [("wrapper", "train.py:18", 3)]


_FRAGMENTS = [
    "0/1: ",
    "tensor 'L['x']' ",
    "Size Mismatch at index 0. ",
    "sizes of ",
    "x changed ",
    "Ne(",
    "EQ(",
    "<= ",
    ".size()",
    ".Stride()",
    "DTYPE mismatch",
    "device",
    "requires_grad",
    "NDIM",
    "isinstance",
    "___check_obj_id",
    "is not None",
    "==",
    "len(",
    "GLOBAL_STATE changed",
    "Grad_Mode",
    "new Autograd node",
    "  # ",
    "ſ",
    "K",
    "\n",
    " ",
    "7",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=8))
def test_the_category_read_in_lower_case_is_the_case_blind_rules_one(parts):
    """The rules run in lower case on the text in lower case (several times faster than case-blind matching): the
    same category as each rule matched case-blind, on any text made of the rules' words in any case."""
    from torch_otel._core import categories

    reason = "".join(parts)
    text = categories.strip_recompile_prefix(reason).split(categories.GUARD_COMMENT, 1)[0] if reason else ""
    expected = next((name for name, pat in categories._RECOMPILE_RULES if text and pat.search(text)), "other")
    assert categories.recompile_category.__wrapped__(reason) == expected
    assert not any(re.search(r"\\[A-Z]", pat.pattern) for _, pat in categories._RECOMPILE_RULES)  # no class lowered


def test_a_library_model_compiled_in_place_and_called_by_the_user_is_called_directly_on_replay() -> None:
    """``BertModel.compile()`` called with ``attention_mask`` as the user passes it: the stack torch logged (2.13, a
    real run's ``dynamo_start``) has module.py's ``_wrapped_call_impl`` under the compiled frame, where torch.compile's
    wrapper stands for a function; the user's code passed the arguments, as live capture says."""
    from torch_otel._model.record import CodeLocation, CompileRecord, PhaseNode

    def at(name: str, path: str, line: int) -> dict[str, Any]:
        return {"name": name, "filename_str": path, "line": line}

    stack = [
        at("<module>", "/home/me/train.py", 13),
        at("_wrapped_call_impl", "<torch-otel start-up hook>", 1),
        at("_wrapped_call_impl", TORCH + "nn/modules/module.py", 1776),
        at("wrapper", LIB + "utils/generic.py", 1030),
    ]
    rec = CompileRecord("frame", None, PhaseNode("dynamo", 0), start_stack=stack)
    site, direct = rec.user_call_site()
    assert (site, direct) == (CodeLocation("<module>", "/home/me/train.py", 13), True)
    rec.start_stack = [stack[0], at("helper", LIB + "pipelines/base.py", 7), *stack[1:]]  # a library's call between
    assert rec.user_call_site()[1] is False
