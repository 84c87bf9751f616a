"""The recompile limit as torch counts it, and a graph break torch's counters leave out: live and on replay of the same
run's ``TORCH_TRACE`` log, against torch's own record (``tests/workloads/limits.py``, three small ``eager`` runs).

- **One frame of torch's for several classes.** ``torch.compile(module)`` on a module whose ``forward`` is torch's own
  goes through torch's wrapper ``inner``, as a library's ``wrapped_func(*args)`` does for every model class it wraps:
  one code object, one cache, one recompile limit. The bridge names each compile by its class (``Tanh``, ``Mish``),
  and its run summary once split the frame by class: seven frames of one or two recompiles, the limit hit by a class
  that compiled once, named after the class before the one that went to eager (torch's record names no code for the
  compile that hit it), and "near the limit" on classes that never came back. Found on a Qwen2-MoE, whose
  ``deprecate_kwarg`` wrapper is one frame for its model classes.
- **torch's other limit.** ``accumulated_recompile_limit`` caps every entry of a code object, whatever instance it was
  for (256 by default: a model whose 32 layers are each compiled, at eight shapes). The bridge read only
  ``recompile_limit`` and said "hit the recompile limit (8)" where torch hit the accumulated one (6 here).
- **Another class on a class's frame.** A compile with no guards of its own (a failed one, the recompile limit's) was
  named after the class its frame was named by last, even where torch's record of it says that class's type check
  failed: a ``MistralForCausalLM`` that hit the limit of transformers' ``wrapped_func`` was named
  ``LlamaForCausalLM.wrapped_func``, and the user sent to the wrong model. Such a compile is now named by torch's code,
  and its frame known to be shared.
- **A graph break raised as ``UserError``** (a loop over a data-dependent number of rows) is logged, splits the graph
  and resumes as any other, but torch's ``counters["graph_break"]`` count ``Unsupported`` breaks only: 0 on 2.13 (2.10's
  counted it). The log tlparse reads has the break (``dynamo_graph_break_reason``), and the bridge counts it on every
  release: torch's counters are what is wrong there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, live_and_replayed, run_tlparse

MODES = ("modules", "wrapper", "blocks", "unbacked", "other_class", "other_class_limit")

pytestmark = pytest.mark.release  # torch's records of a limit (its fields, its words) on every release


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {mode: live_and_replayed(WORKLOADS / "limits.py", tmp_path_factory.mktemp(mode), mode) for mode in MODES}


@pytest.mark.parametrize("how", ["live", "replay"])
def test_nine_module_classes_through_torchs_one_wrapper_are_one_frame_that_hits_its_limit(runs, how):
    run = runs["modules"]
    records = run["torch"]["records"]
    # torch: one frame (0), nine compiles, eight of them recompiles, the ninth the limit's: no code of its own
    assert {r["id"].split("/")[0] for r in records} == {"0"}, records
    assert [r["cache_size"] for r in records[:8]] == list(range(8)), records
    assert records[-1]["fail_type"] and records[-1]["co_name"] is None, records[-1]
    summary = run[how]
    (frame,) = summary["recompiling_frames"]  # one frame, not one per class
    assert frame["function"] == "inner" and frame["file"].endswith("external_utils.py"), frame
    assert (frame["compiles"], frame["recompiles"], frame["cache_entries"], frame["limit"]) == (9, 8, 8, 8), frame
    assert frame["limit_hits"] == 1 and frame["limit_status"] == "hit" and frame["limit_name"] == "recompile_limit"
    # the classes that share it, each named once, in the order torch compiled them: the first too (ReLU), compiled
    # before the frame was known to be shared; the ninth (Hardswish) hit the limit and compiled nothing
    assert frame["classes"] == ["ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Softplus", "ELU", "Mish"], frame["classes"]
    assert frame["more_classes"] == 0
    (eager,) = summary["eager_frames"]
    assert (eager["function"], eager["why"]) == ("inner", "recompile_limit"), eager
    assert eager["text"] == "hit the recompile limit (8): its new inputs run in eager"
    assert summary["recompile_limit_hits"] == 1 and summary["recompiles"]["total"] == 8


@pytest.mark.parametrize("how", ["live", "replay"])
def test_nine_model_classes_behind_one_library_wrapper_are_one_frame_named_by_the_wrapper(runs, how):
    records = runs["wrapper"]["torch"]["records"]
    assert {r["id"].split("/")[0] for r in records} == {"0"} and len(records) == 9, records
    summary = runs["wrapper"][how]
    (frame,) = summary["recompiling_frames"]
    assert frame["function"] == "wrapped_func" and frame["file"].endswith("deprecation.py"), frame
    assert (frame["compiles"], frame["recompiles"], frame["limit_hits"], frame["limit_status"]) == (9, 8, 1, "hit"), frame
    assert frame["classes"] == [f"Block{i}" for i in range(8)], frame["classes"]  # Block8 hit the limit
    (eager,) = summary["eager_frames"]
    assert eager["function"] == "wrapped_func", eager  # not Block7, the class before the one that went to eager


def test_the_near_limit_warning_names_torchs_shared_frame_and_the_summary_screen_says_who_shares_it(runs):
    run = runs["modules"]
    lines = [ln for ln in run["stderr"].splitlines() if "more before torch._dynamo.config.recompile_limit (8)" in ln]
    assert len(lines) == 1, run["stderr"][-3000:]
    assert lines[0].startswith("torch-otel: WARNING: inner (") and "external_utils.py" in lines[0], lines[0]
    assert "5 recompiles so far, 2 more before" in lines[0], lines[0]
    text = run["live"]
    (frame,) = text["recompiling_frames"]
    from torch_otel._analysis.recompiling_frames import frame_lines

    shown = frame_lines([frame], 120, 20, lambda f: f"{f['function']} ({Path(f['file']).name}:{f['line']})")
    assert "inner (external_utils.py" in shown[1] and "hit the recompile limit (8)" in shown[1], shown
    assert shown[2].startswith("    one frame of torch's, its limit shared by: ReLU, Tanh, Sigmoid, GELU,"), shown


@pytest.mark.parametrize("how", ["live", "replay"])
def test_blocks_compiled_one_by_one_hit_the_accumulated_limit_and_are_told_so(runs, how):
    run = runs["blocks"]
    records = run["torch"]["records"]
    failed = [r for r in records if r["fail_type"]]
    assert len(failed) == 1 and failed[0]["id"] == "0/6", records
    assert [r["cache_size"] for r in records[:6]] == list(range(6)), records  # under recompile_limit (8) throughout
    summary = run[how]
    (frame,) = summary["recompiling_frames"]
    assert frame["function"] == "Block.forward", frame
    assert (frame["limit"], frame["limit_name"], frame["cache_entries"], frame["limit_hits"]) == (
        6,
        "accumulated_recompile_limit",
        6,
        1,
    ), frame
    assert frame["classes"] == []  # one class, one name: not a frame shared by several
    (eager,) = summary["eager_frames"]
    assert eager["text"] == "hit the accumulated recompile limit (6): its new inputs run in eager", eager


def test_the_accumulated_limit_is_the_one_the_live_warning_counts_down_to(runs):
    lines = [ln for ln in runs["blocks"]["stderr"].splitlines() if "more before torch._dynamo.config" in ln]
    assert len(lines) == 1, runs["blocks"]["stderr"][-3000:]
    assert "3 recompiles so far, 2 more before torch._dynamo.config.accumulated_recompile_limit (6)" in lines[0], lines[0]


@pytest.mark.parametrize("how", ["live", "replay"])
def test_a_graph_break_raised_as_a_user_error_is_counted_where_torchs_counters_miss_it(runs, how, tmp_path):
    run = runs["unbacked"]
    torch_said = run["torch"]
    counted = sum(torch_said["counters"].get("graph_break", {}).values())  # 2.10's counters: 1; 2.13's: 0
    assert torch_said["counters"].get("resumes"), torch_said  # it resumed after a break, whatever the counters say
    # the log tlparse reads has the break, with its reason: the counters are what is wrong
    directory = run_tlparse(run["log"], tmp_path / "tl")
    reasons = [a for arts in directory.values() for a in arts.get("artifacts", []) if "graph_break_reason" in a.get("name", "")]
    assert reasons, directory
    breaks = run[how]["graph_breaks"]
    assert breaks["total"] + breaks["ends_frame"] >= 1, breaks
    assert breaks["total"] + breaks["ends_frame"] >= counted, (breaks, counted)
    # two reasons: the caller's break (0/0, resumed after the call) and the called frame's own (1/0, experts: its
    # compile failed, UserError, and the frame ran in eager: unhandled). 2.10 logs the second after 1/0's metrics
    assert breaks["total"] + breaks["ends_frame"] + breaks["unhandled"] == len(reasons), (breaks, reasons)


@pytest.mark.parametrize("how", ["live", "replay"])
@pytest.mark.parametrize("mode", ["other_class", "other_class_limit"])
def test_a_compile_another_class_made_on_a_classs_frame_is_not_named_after_that_class(runs, mode, how):
    run = runs[mode]
    records = run["torch"]["records"]
    frame = [r for r in records if r["id"].startswith("0/")]
    # torch: one frame, A's compiles, then B's, which failed (no guards of its own); torch's record of it says the
    # check that self is an A failed: self was not an A
    last = frame[-1]
    assert last["fail_type"] and all(not r["fail_type"] for r in frame[:-1]), frame  # 2.10: RecompileLimitExceeded
    assert "___check_type_id(self" in last["recompile_reason"], last
    assert "type=<class '__main__.A'>" in last["recompile_reason"], last
    summary = run[how]
    names = {f["function"]: f["compiles"] for f in summary["frames"]}
    assert names.get("A.shared_forward") == len(frame) - 1, names  # A's compiles only
    assert names.get("shared_forward") == 1, names  # B's, named by torch's code: which class came, no record says
    (eager,) = summary["eager_frames"]
    assert eager["function"] == "shared_forward", eager
    # one frame of torch's, one row: A's recompile before B came is folded into it, so no row of A's says "near"
    (rec,) = summary["recompiling_frames"]
    assert (rec["function"], rec["compiles"]) == ("shared_forward", len(frame)), rec
    # A is named where it recompiled (a row of its own until then); B's compile names no class (no guards of its own),
    # so where A did not recompile no class compiled the frame after another and the row lists none
    assert rec["classes"] == (["A"] if mode == "other_class_limit" else []), rec
    if mode == "other_class_limit":
        assert (rec["recompiles"], rec["limit_status"], rec["limit_hits"]) == (2, "hit", 1), rec
        assert rec["by_category"] == {"size_mismatch": 1, "type": 1}, rec
