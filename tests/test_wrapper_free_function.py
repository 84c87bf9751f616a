"""A free function reached through a library's wrapper is not named after the class of a method the same wrapper wraps,
live and on replay of the same run's ``TORCH_TRACE`` log, against torch's own record
(``tests/workloads/wrapper_free_function.py``: a small ``eager`` run with the workload's own decorator; its
``transformers`` mode, transformers' own ``deprecate_kwarg``, reads the same and is left out of the suite for its time).

A library's decorator, ``wrapped_func(*args, **kwargs)``, on a model's ``forward`` and on a free function (transformers
5.x's ``deprecate_kwarg`` on ``LlamaModel.forward`` and on ``create_causal_mask``) is one code object: one frame of
torch's. The function's compile, called with keywords only, is a recompile of the model's (``len(args) == 2`` failed);
its guards say it had no positional argument (``not L['args']``), so no object of a class. The bridge named it as the
frame's earlier compile (``Net.wrapped_func``, class ``Net``), a fallback meant for compiles with no guards of their
own (a failed one, the recompile limit's): on a Llama, ``create_causal_mask`` was counted under
``LlamaModel.wrapped_func``. It now keeps torch's name (docs/span-model.md, "Which frame").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, live_and_replayed, read_otlp_json_spans

MODES = ("plain",)  # "transformers" (deprecate_kwarg itself) shows the same, by hand: the workload runs it
_GUARDS = re.compile(r'"dynamo_cpp_guards_str": \{\}, "frame_id": (\d+), "frame_compile_id": (\d+)')


@pytest.fixture(scope="module", params=MODES)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return live_and_replayed(WORKLOADS / "wrapper_free_function.py", tmp_path_factory.mktemp(request.param), request.param)


def _guards(log: Path) -> dict[str, str]:
    """The guards torch logged for each compile (``dynamo_cpp_guards_str``), by compile id: the payload's lines."""
    out: dict[str, str] = {}
    lines = log.read_text().splitlines()
    for i, line in enumerate(lines):
        found = _GUARDS.search(line)
        if found:
            payload = []
            for more in lines[i + 1 :]:
                if not more.startswith("\t"):
                    break
                payload.append(more)
            out[f"{found.group(1)}/{found.group(2)}"] = "\n".join(payload)
    return out


def _roots(path: Path) -> dict[str, dict[str, Any]]:
    """The frame compiles' root spans' attributes, by compile id."""
    return {
        s["attrs"]["torch.compile.id"]: s["attrs"]
        for s in read_otlp_json_spans(path)
        if s["attrs"].get("torch.compile.kind") == "frame" and not s.get("parentSpanId")
    }


def test_torch_compiles_the_method_and_the_free_function_as_one_frame_whose_function_compiles_hold_no_object(run):
    records = run["torch"]["records"]
    assert [r["id"] for r in records] == ["0/0", "0/1", "0/2"], records
    assert {(r["co_name"], r["co_filename"]) for r in records} == {("wrapped_func", records[0]["co_filename"])}, records
    assert all(not r["fail_type"] and r["guard_count"] > 0 for r in records), records  # guards of their own
    assert "len(args) == 2" in records[1]["recompile_reason"], records[1]
    guards = _guards(run["log"])
    assert "source=L['args'][0]" in guards["0/0"] and "__main__.Net'>" in guards["0/0"], guards["0/0"]
    for cid in ("0/1", "0/2"):  # no positional argument: no args[0], no class
        assert "LENGTH_CHECK: not L['args']" in guards[cid] and "L['args'][0]" not in guards[cid], guards[cid]


@pytest.mark.parametrize("how", ["live", "replay"])
def test_the_free_functions_compiles_keep_torchs_name_not_the_methods_class(run, how):
    tmp = run["tmp"]
    roots = _roots(tmp / ("live.jsonl" if how == "live" else "replay.jsonl"))
    assert set(roots) == {"0/0", "0/1", "0/2"}, sorted(roots)
    net = roots["0/0"]
    assert (net["code.function.name"], net.get("torch.compile.frame.class")) == ("Net.wrapped_func", "__main__.Net"), net
    for cid in ("0/1", "0/2"):
        attrs = roots[cid]
        assert attrs["code.function.name"] == "wrapped_func", (cid, attrs)
        assert "torch.compile.frame.class" not in attrs, (cid, attrs)
    summary = run[how]
    named: dict[str, int] = {}
    for f in summary["frames"]:
        named[f["function"]] = named.get(f["function"], 0) + f["compiles"]
    assert named == {"Net.wrapped_func": 1, "wrapped_func": 2}, summary["frames"]
    # the function's recompiles are counted under torch's name (live: a row per calling line), none under Net's
    rows = summary["recompiling_frames"]
    assert rows and all(r["function"] == "wrapped_func" and r["classes"] == [] for r in rows), rows
    assert sum(r["recompiles"] for r in rows) == 2, rows
