"""Answers to "why" on code nobody here wrote: tiny Hugging Face ``transformers`` models built from configs.

One module fixture runs each workload once, in its own process with the bridge on (tests/workloads/hf_models.py and
tests/workloads/hints.py), two at a time; random weights, no hub (``HF_HUB_OFFLINE=1``), backend ``eager``: dynamo's
work (graph breaks, guards, recompiles) is the model's, at a fraction of a compiler's time.

- a GPT-2 trained with its sequence length changing per step: the graph-break metric agrees with torch's
  ``counters["graph_break"]``; the breaks torch could not resume after are their own kind, and the summary says the
  rest of the function ran in eager; library frames are named with the user's call site, in the summary and the diff;
- the same compiled with ``dynamic=False``, and again with the summary's fix applied: the frames it names stop
  recompiling; the recompile block is ordered by cost;
- ``generate`` with a static cache (``len(kwargs)``) and a dynamic cache (a size of 1): no hint is given, and the
  reason is said; no hint names what only the library reaches;
- two GPT-2s compiled through the same library code: two frames, not one;
- small frames that recompile for an int, a dtype and requires_grad: each hint, applied, stops the recompiles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import WORKLOADS, assert_summary_is_the_spans, read_otlp_json_spans, run_cli, run_python, spans_to_file

from torch_otel._sinks.summary import format_text

HF = ("gpt2", "gpt2_static", "gpt2_static_marked", "generate_static", "generate_dynamic", "two_models")
HINTS = ("int", "dtype", "requires_grad")


def _site(code: str) -> str:
    """``hf_models.py:N``: the workload's line that holds ``code`` (the user's call site the answers must name)."""
    lines = (WORKLOADS / "hf_models.py").read_text().splitlines()
    (n,) = [i for i, ln in enumerate(lines, 1) if ln.strip().startswith(code)]
    return f"hf_models.py:{n}"


TRAIN = _site("loss = model(input_ids=ids, labels=ids).loss")  # the training step's call of the compiled GPT-2
STATIC = _site("static(input_ids=ids")  # two_models: the dynamic=False model's call
DYNAMIC = _site("dynamic(input_ids=ids")  # and the dynamic=True one's
WIDTH = 100


def _run(tmp: Path, script: str, name: str, args: list[str], trace: bool) -> tuple[str, dict[str, Any]]:
    out = tmp / name
    out.mkdir(parents=True)
    env = {
        "HF_HUB_OFFLINE": "1",
        "TORCH_OTEL_SUMMARY": str(out / "summary.json"),
        **spans_to_file(out / "spans.jsonl"),
        **({"TORCH_TRACE": str(out / "trace")} if trace else {}),
    }
    argv = [str(out), *args] if script == "hf_models.py" else args
    res = run_python(WORKLOADS / script, env, args=argv, timeout=600)
    got: dict[str, Any] = {"out": out, "rc": res.returncode, "stderr": res.stderr}
    if res.returncode == 0:
        got["summary"] = json.loads((out / "summary.json").read_text())
        got["spans"] = read_otlp_json_spans(out / "spans.jsonl")
        if (out / "counters.json").exists():
            got["counters"] = json.loads((out / "counters.json").read_text())
            got["metrics"] = (out / "metrics.txt").read_text()
    return name, got


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("real-models")
    jobs = [("hf_models.py", m, [m], m == "gpt2") for m in HF]
    jobs += [
        ("hints.py", f"{m}{'_fixed' if fixed else ''}", [m, *(["fixed"] if fixed else [])], False)
        for m in HINTS
        for fixed in (False, True)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(pool.map(lambda j: _run(tmp, *j), jobs))
    for name, got in done.items():
        assert got["rc"] == 0, (name, got["stderr"][-3000:])
    return done


def _frames(summary: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {(f["function"], f.get("call_site")): f for f in summary["recompiling_frames"]}


def _metric(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))


# -- item 2: graph breaks as torch counts them; the ones that end a frame apart ----------------------------------


def test_gpt2s_graph_breaks_agree_with_torchs_counters_and_those_that_end_a_frame_are_their_own_kind(runs, tmp_path):
    run = runs["gpt2"]
    counters, summary = run["counters"], run["summary"]
    torch_breaks = sum(counters["graph_break"].values())
    cannot_resume = sum(counters["unimplemented"].values())
    assert torch_breaks > 0 and cannot_resume > 0, counters  # the loss's logger.warning_once ends forward's frame
    gb = summary["graph_breaks"]
    assert gb["total"] == torch_breaks == _metric(run["metrics"], "torch_compile_graph_breaks_total")
    assert gb["ends_frame"] == cannot_resume and gb["unhandled"] == 0
    assert_summary_is_the_spans(summary, run["spans"])
    # on the spans: each one a graph-break event marked as ending its frame
    events = [e for s in run["spans"] for e in s.get("events", []) if e["name"] == "torch.compile.graph_break"]
    ends = [e for e in events if any(a["key"] == "torch.compile.graph_break.ends_frame" for a in e.get("attributes", []))]
    assert (len(events) - len(ends), len(ends)) == (torch_breaks, cannot_resume)
    # the summary says that the rest of the function ran in eager, where the break is and which frame it ended
    text = format_text(summary, WIDTH)
    assert (
        f"graph breaks: {torch_breaks} (GB0291 {torch_breaks}); {cannot_resume} more ended their frame (the rest of the function ran in eager)"
        in text
    )
    assert (
        f"{cannot_resume:>7}  GB0291 at modeling_utils.py:" in text
        and "ended GPT2LMHeadModel.forward: the rest of it ran in eager" in text
    )
    # tlparse, on the same log, lists both kinds as graph-break records: torch's count plus those that ended a frame
    (log,) = (run["out"] / "trace").iterdir()
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    subprocess.run(
        [tlparse, str(log), "-o", str(tmp_path / "tlparse"), "--no-browser", "--overwrite"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    directory = json.loads((tmp_path / "tlparse" / "compile_directory.json").read_text())
    listed = sum(1 for v in directory.values() for a in v.get("artifacts", []) if "graph_break" in a.get("name", ""))
    assert listed == torch_breaks + cannot_resume
    # replayed from the same run's TORCH_TRACE: the same counts
    res = run_cli("replay", str(run["out"] / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    replayed = json.loads((tmp_path / "replayed.json").read_text())["graph_breaks"]
    assert (replayed["total"], replayed["ends_frame"], replayed["unhandled"]) == (torch_breaks, cannot_resume, 0)
    assert replayed["ends_frame_by_location"] == gb["ends_frame_by_location"]


# -- item 3: hints drawn from the guard torch reported; applied, they stop the recompiles ----------------------------


def test_the_hint_for_the_frame_the_user_calls_applied_to_gpt2_stops_its_recompiles(runs):
    """dynamic=False: every frame recompiles on the sequence length. The frame the user's call enters gets
    ``maybe_mark_dynamic(input_ids, 1)`` before the call; the frames inside the library get the compile-level fix
    (automatic dynamic shapes back on), as what they see is built by the library. Both applied: they stop."""
    static = _frames(runs["gpt2_static"]["summary"])
    assert static and all(f["keeps_recompiling"] for f in static.values())
    marks = {k: h for k, f in static.items() for h in f["hints"] if h["fix"] and "mark_dynamic" in h["fix"]}
    assert list(marks) == [("GPT2LMHeadModel.wrapper", TRAIN)], marks  # the frame the call enters, from the test's line
    (hint,) = marks.values()
    assert hint["fix"] == "torch._dynamo.maybe_mark_dynamic(input_ids, 1)" and hint["where"] == "call_site"
    assert hint["guard"] == "dim 1 of input 'kwargs['input_ids']' took 4 values: 8, 12, 16, 20"
    # applied (hf_models.py gpt2_static_marked): the frames that saw input_ids recompile no more
    marked = _frames(runs["gpt2_static_marked"]["summary"])
    for k, f in static.items():
        if any("input_ids" in g["input"] for g in f["guards"]):
            assert k not in marked or not marked[k]["keeps_recompiling"], (k, marked.get(k))
    # what is left is built by the library (the loss's labels, the output's logits): their hint is the compile one
    assert marked and all(f["hints"][0]["where"] == "compile" for f in marked.values())
    # no hint names a tensor inside the library's output object
    for f in [*static.values(), *marked.values()]:
        assert not any(h["fix"] and "logits" in h["fix"] for h in f["hints"]), f["hints"]
    # the compile-level hint applied (hf_models.py gpt2: torch.compile(model), automatic dynamic on): none keeps recompiling
    assert all(
        h["fix"] == "automatic dynamic shapes back on: no dynamic=False, automatic_dynamic_shapes = True"
        for f in marked.values()
        for h in f["hints"][:1]
    )
    dynamic = runs["gpt2"]["summary"]
    assert dynamic["recompiles"]["total"] > 0 and not any(f["keeps_recompiling"] for f in dynamic["recompiling_frames"])
    assert all(f["stopped_by"].startswith("automatic dynamic shapes") for f in dynamic["recompiling_frames"])
    assert "frames that keep recompiling" not in format_text(dynamic, WIDTH)


def test_generate_with_a_static_cache_gets_no_hint_for_len_kwargs_and_says_why(runs):
    """Prefill and decode pass different keyword arguments: torch guards len(kwargs). No size hint is made up."""
    summary = runs["generate_static"]["summary"]
    (f,) = summary["recompiling_frames"]
    assert [g["kind"] for g in f["guards"]] == ["kwargs"]
    (hint,) = f["hints"]
    assert hint["fix"] is None and "keyword arguments" in hint["why"] and hint["why"].endswith("no hint is given")
    assert "library code" in hint["why"]  # generate calls the compiled forward, not the user
    assert f["fixes"] == [] and not f["keeps_recompiling"]


def test_generate_with_a_dynamic_cache_never_marks_a_size_torch_specializes(runs):
    """The decode steps pass one token: dim 1 of input_ids took 1, which torch specializes. Marking it would raise
    ConstraintViolationError: no hint is given, and the reason is said."""
    (f,) = runs["generate_dynamic"]["summary"]["recompiling_frames"]
    one = [g for g in f["guards"] if g["kind"] == "size" and "1" in g["values"]]
    assert one, f["guards"]
    for h in f["hints"]:
        assert h["fix"] is None, h
    spec = [h for h in f["hints"] if "specializes sizes 0 and 1" in h["why"]]
    assert spec and "ConstraintViolationError" in spec[0]["why"] and spec[0]["why"].endswith("no hint is given")
    # the cache's keys grew by one per step: automatic dynamic made that dimension dynamic; nothing to fix
    assert f["stopped_by"] is not None and not f["keeps_recompiling"]


def test_two_models_compiled_through_one_library_wrapper_are_two_frames(runs):
    """One GPT-2 with dynamic=False (called from one line), one with dynamic=True (from another): the same code
    objects, two frames, each its own sizes and reasons."""
    frames = runs["two_models"]["summary"]["recompiling_frames"]
    sites = {f["call_site"] for f in frames}
    assert sites == {STATIC, DYNAMIC}, sites
    by_fn: dict[str, set[str]] = {}
    for f in frames:
        by_fn.setdefault(f["function"], set()).add(f["call_site"])
    assert by_fn["GPT2LMHeadModel.forward"] == sites  # one code object, two frames
    static = {f["function"]: f for f in frames if f["call_site"] == STATIC}
    dynamic = {f["function"]: f for f in frames if f["call_site"] == DYNAMIC}
    forward = "GPT2LMHeadModel.forward"
    assert static[forward]["recompiles"] > dynamic[forward]["recompiles"]
    assert static[forward]["keeps_recompiling"] and not dynamic[forward]["keeps_recompiling"]


@pytest.mark.parametrize("mode", HINTS)
def test_each_hint_applied_stops_the_recompiles(runs, mode):
    """An int argument (dynamic=False), a dtype and requires_grad (under a recompile limit of 1): the summary's
    first hint is drawn from the guard torch reported, shown in the text, and, applied, the frame compiles once."""
    summary = runs[mode]["summary"]
    (f,) = summary["recompiling_frames"]
    assert f["keeps_recompiling"] and f["guards"] and f["guards"][0]["kind"] == mode
    first = f["hints"][0]
    assert first["fix"] and first["guard"] == f["guards"][0]["line"]
    want = {
        "int": "torch.compile(..., dynamic=True)",
        "dtype": "pass 'x' in one dtype (cast it before the call)",
        "requires_grad": "pass 'x' with the same requires_grad on every call",
    }[mode]
    assert first["fix"] == want
    assert all("mark_dynamic" not in (h["fix"] or "") for h in f["hints"])  # no size guard was reported
    text = format_text(summary, WIDTH)
    assert f"fix{' (before the call at ' + f['call_site'] + ')' if first['where'] == 'call_site' else ''}: {want}" in text
    fixed = runs[f"{mode}_fixed"]["summary"]
    assert fixed["recompiles"]["total"] == 0 and fixed["recompiling_frames"] == [], fixed["recompiling_frames"]
    assert fixed["recompile_limit_hits"] == 0


# -- item 4: library frames named with the user's call site; the costliest first -------------------------------------


def test_library_frames_show_the_users_call_site_and_the_costliest_recompiling_frame_leads(runs, tmp_path):
    summary = runs["gpt2_static"]["summary"]
    frames = summary["frames"]
    assert frames and all(f["call_site"] == TRAIN for f in frames), frames
    # on the spans: the caller attributes name the user's line, not transformers'
    roots = [s for s in runs["gpt2_static"]["spans"] if s["attrs"].get("torch.compile.kind") == "frame"]
    assert roots and {
        (os.path.basename(str(r["attrs"]["torch.compile.caller.file.path"])), int(r["attrs"]["torch.compile.caller.line.number"]))
        for r in roots
    } == {("hf_models.py", int(TRAIN.split(":")[1]))}
    text = format_text(summary, WIDTH).splitlines()
    # transformers' decorator, named by the class of the model it wraps (its ``self``)
    assert any(ln.startswith("  GPT2LMHeadModel.wrapper (generic.py:") and f" from {TRAIN} " in ln for ln in text), text
    # the recompile block: the costliest first, as the JSON orders them
    rec = summary["recompiling_frames"]
    costs = [f["cost_s"] for f in rec]
    assert costs == sorted(costs, reverse=True) and len(rec) >= 3
    start = text.index(next(ln for ln in text if ln.startswith("frames that keep recompiling:")))
    first = text[start + 1]
    assert (
        first.startswith(f"  {rec[0]['function']} (")
        and f" from {TRAIN}: {rec[0]['recompiles']} recompiles ({rec[0]['cost_s']:.2f} s)" in first
    )
    # the diff names them the same way
    res = run_cli(
        "diff",
        str(runs["gpt2"]["out"] / "summary.json"),
        str(runs["gpt2_static"]["out"] / "summary.json"),
        "--json",
        str(tmp_path / "d.json"),
    )
    assert res.returncode in (0, 4), res.stderr[-3000:]
    assert re.search(rf"^  GPT2LMHeadModel\.wrapper \(generic\.py:\d+\) from {re.escape(TRAIN)} ", res.stdout, re.M), res.stdout
    doc = json.loads((tmp_path / "d.json").read_text())
    assert all(f["call_site"] == TRAIN for f in doc["frames"]), doc["frames"]
    listed = [f["cost_s"] for f in doc["recompiling_frames"]]
    assert listed == sorted(listed, reverse=True)
