"""A size that fell outside a dynamic graph's range: torch's range guards read, and the hint they call for.

After automatic dynamic shapes made a dimension dynamic, its graph holds the sizes 2 and up (torch specializes sizes 0
and 1); a call with a size of 1 fails the guard ``2 <= x.size()[1]`` and compiles its own graph. The reasons here are
torch 2.13's, copied from real runs' ``CompilationMetrics.recompile_reason`` (also in their TORCH_TRACE logs), and the
forms torch's ``ShapeEnv.produce_guards_verbose`` writes (torch/fx/experimental/symbolic_shapes.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fast.fastkit import feed, frame, metrics
from torch_otel._analysis.recompile_guards import Guard, guard_line, parse_guard
from torch_otel._analysis.recompile_hints import FrameContext, advise, hints_for
from torch_otel._sinks.summary import RunSummary

_SLOC01 = (
    "(user code shown is first use of this value--the guard itself is not due user code but due to 0/1 specialization "
    "in the framework; to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))"
)
# f(x) with x of shape [2, 8], [2, 16], [2, 1]: 0/2's reason (torch 2.13, backend eager)
SIZE1 = f"0/1: 2 <= x.size()[1]  # return x.sin().sum(1)  # mp/hunt4/cases/m2_size1_after_dynamic.py:5 in f {_SLOC01}"
# BERT at sequence lengths 8, 16, 1: the range has the upper bound the model's code set (128 positions)
BERT = (
    "0/1: 2 <= kwargs['input_ids'].size()[1] <= 128  # if isinstance(attention_mask, (torch.Tensor, BlockMask)) and "
    "len(attention_mask.shape) == 4:  # transformers/masking_utils.py:818 in _preprocess_mask_arguments "
    f"{_SLOC01} and attn_output = torch.nn.functional.scaled_dot_product_attention(  # "
    "transformers/integrations/sdpa_attention.py:182 in sdpa_attention_forward (_dynamo/utils.py:4231 in run_node)"
)
POOL = f"1/2: 2 <= h.size()[1]  # def pool(h): return h.mean(1)  # mp/hunt4/cases/th1_threads.py:10 in pool {_SLOC01}"
AUTO = json.dumps({"accumulated_recompile_limit": 256, "automatic_dynamic_shapes": True, "recompile_limit": 8})
ON = FrameContext("f", "/src/m.py", "m.py:7", True, True)


@pytest.mark.parametrize(
    ("reason", "guard"),
    [
        (SIZE1, Guard("size_range", "x", 1, ("2..",))),
        (BERT, Guard("size_range", "kwargs['input_ids']", 1, ("2..128",))),
        (POOL, Guard("size_range", "h", 1, ("2..",))),
        # produce_guards_verbose's other forms; torch before strip_local_scope names the source L['x']
        ("2 <= L['x'].size()[0] <= 8  # if x.shape[0] > 8:  # m.py:4 in f", Guard("size_range", "x", 0, ("2..8",))),
        ("0/0: x.size()[0] <= 8  # if x.shape[0] > 8:  # m.py:4 in f", Guard("size_range", "x", 0, ("..8",))),
        ("L['kwargs']['input_ids'].size()[1] <= 64", Guard("size_range", "kwargs['input_ids']", 1, ("..64",))),
        ("3 <= self._modules['emb'].size()[0]", Guard("size_range", "self._modules['emb']", 0, ("3..",))),
    ],
)
def test_a_dynamic_graphs_size_range_is_read_as_a_guard(reason: str, guard: Guard) -> None:
    assert parse_guard(reason) == guard


def test_what_is_not_a_range_is_not_read_as_one() -> None:
    assert parse_guard("x.size()[0] == 3") is None  # not a range
    assert parse_guard("2 <= x.stride()[0]") is None  # a stride's: not read
    assert parse_guard("0/0: tensor 'x' size mismatch at index 1. expected 8, actual 16") == Guard("size", "x", 1, ("8", "16"))


def _g(reason: str, failures: int = 1) -> dict[str, object]:
    g = parse_guard(reason)
    assert g is not None, reason
    d: dict[str, object] = {"kind": g.check, "input": g.name, "dim": g.dim, "values": list(g.values), "failures": failures}
    d["line"] = guard_line(d)
    return d


def test_a_range_guards_line_names_the_input_the_dim_and_the_range() -> None:
    assert _g(SIZE1)["line"] == (
        "dim 1 of input 'x': a size of 0 or 1 fell below the dynamic graph's range 2.. (torch specializes sizes 0 and 1)"
    )
    assert _g(BERT)["line"] == (
        "dim 1 of input 'kwargs['input_ids']': a size of 0 or 1, or above 128, fell outside the dynamic graph's range "
        "2..128 (torch specializes sizes 0 and 1)"
    )
    assert _g("x.size()[0] <= 8")["line"] == "dim 0 of input 'x': a size fell above the dynamic graph's range ..8"


def test_a_size_of_0_or_1_after_the_dimension_became_dynamic_is_not_nothing_to_fix() -> None:
    """The frame's guards as its row has them: dim 1 took 8 and 16 (automatic dynamic made it dynamic), then a size of
    1 fell below the dynamic graph's range. The size-0/1 rule is said first; nothing says new sizes compile no more."""
    size = {"kind": "size", "input": "x", "dim": 1, "values": ["8", "16"], "failures": 1}
    size["line"] = guard_line(size)
    hints = advise([size, _g(SIZE1)], ON)
    assert [h.fix for h in hints] == [None, None]
    assert "torch specializes sizes 0 and 1" in hints[0].why and hints[0].why.endswith("no hint is given")
    assert hints[0].guard == _g(SIZE1)["line"]
    assert not any("nothing to fix" in h.why or "new sizes compile no more" in h.why for h in hints), hints
    assert "a size outside it compiles its own graph" in hints[1].why
    # the range guard alone (a dimension mark_dynamic made dynamic), and live, as the near-limit warning draws it
    for repeated in (False, True):
        (h,) = hints_for(_g(BERT), ON, repeated)
        assert h.fix is None and "torch specializes sizes 0 and 1" in h.why and "above 128" in h.why
    (h,) = hints_for(_g("x.size()[0] <= 8"), ON, False)
    assert h.fix is None and "the code bounds dim 0 of 'x'" in h.why and "specializes" not in h.why


def test_marking_a_size_of_0_or_1_dynamic_is_said_to_do_nothing_not_to_raise() -> None:
    """torch 2.13 compiles a size of 0 or 1 that mark_dynamic marked as a constant, and raises nothing
    (symbolic_shapes.py: "Don't complain about 0/1 specialization")."""
    off = FrameContext("f", "/src/m.py", "m.py:7", True, False)
    for ctx in (ON, off):
        size = {"kind": "size", "input": "x", "dim": 0, "values": ["1", "8"], "failures": 2}
        (h,) = advise([size], ctx)
        assert "would raise" not in h.why and "as a constant even where mark_dynamic marked it" in h.why, h.why
    (h,) = advise([_g(SIZE1)], ON)
    assert "would raise" not in h.why and "as a constant even where mark_dynamic marked it" in h.why, h.why


def _row(reasons: list[str | None], config: str) -> dict[str, Any]:
    """The run summary's row of f, compiled once per reason (None: its first compile), under that dynamo config."""
    fields = {"co_name": "f", "co_filename": "/src/m.py", "co_firstlineno": 3, "dynamo_config": config}
    events: list[object] = []
    for i, reason in enumerate(reasons):
        extra = {"recompile_reason": reason} if reason else {}
        events += [frame(f"0/{i}", 100 * i, 100 * i + 10), metrics(f"0/{i}", cache_size=i, **fields, **extra)]
    summary = RunSummary("replay")
    _, sink = feed(events)
    for r in sink.finished:
        summary.on_finish(r)
    (row,) = summary.to_dict()["recompiling_frames"]
    return row


def test_a_frames_row_reads_the_range_guard_of_its_last_recompile() -> None:
    """The reasons of f's three compiles at x of shape [2, 8], [2, 16], [2, 1], as torch 2.13 logs them."""
    row = _row([None, "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 16", SIZE1], AUTO)
    assert (row["compiles"], row["recompiles"]) == (3, 2)
    assert [(g["kind"], g["input"], g["dim"], g["values"]) for g in row["guards"]] == [
        ("size", "x", 1, ["8", "16"]),
        ("size_range", "x", 1, ["2.."]),
    ]
    assert "torch specializes sizes 0 and 1" in row["unclear"]
    assert not any("nothing to fix" in h["why"] for h in row["hints"]), row["hints"]
    assert row["stopped_by"] == (  # not "each changed dimension became dynamic": a size of 1 recompiled it after that
        "automatic dynamic shapes made a dimension dynamic, then a size of 0 or 1 fell outside its range (torch compiles "
        "those as constants); none came back"
    ), row["stopped_by"]


@pytest.mark.parametrize("guard", ["size", "int"])
def test_near_a_low_limit_one_recompile_that_made_it_dynamic_is_a_frame_that_stopped(guard: str) -> None:
    """``recompile_limit = 2``: f recompiled once, for a new size of ``x`` (or value of ``n``), and automatic dynamic
    shapes made it dynamic: torch compiled it no more (its graph served every later call). Two entries of 2 is near
    the limit, and that alone is no frame that keeps recompiling; an int that became a symbol has nothing to fix."""
    config = json.dumps({"accumulated_recompile_limit": 256, "automatic_dynamic_shapes": True, "recompile_limit": 2})
    reason = "0/0: tensor 'x' size mismatch at index 0. expected 3, actual 4" if guard == "size" else "0/0: n == 3"
    row = _row([None, reason], config)
    assert (row["recompiles"], row["cache_entries"], row["limit"], row["limit_status"]) == (1, 2, 2, "near"), row
    assert row["keeps_recompiling"] is False, row
    assert row["stopped_by"] == "automatic dynamic shapes: each changed dimension became dynamic after one recompile"
    if guard == "int":  # not "kept recompiling: code specializes it"
        (hint,) = row["hints"]
        assert hint["fix"] is None and hint["why"].startswith("automatic dynamic shapes made int argument 'n' a symbol")
    else:  # a size's recompile counts toward the limit: marking it saves it
        assert [h["fix"] for h in row["fixes"]] == ["torch._dynamo.maybe_mark_dynamic(x, 0)"], row["fixes"]
