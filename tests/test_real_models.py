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

from tests.helpers import (
    WORKLOADS,
    assert_summary_is_the_spans,
    assert_the_screen_keeps_the_recompiling_frames,
    read_otlp_json_spans,
    run_cli,
    run_python,
    spans_to_file,
    summary_screen,
)
from torch_otel._core.categories import scrub_guard_text, strip_recompile_prefix
from torch_otel._sinks.summary_text import format_text

HF = (
    "gpt2",
    "gpt2_static",
    "gpt2_static_marked",
    "generate_static",
    "generate_dynamic",
    "two_models",
    "llama_train",
    "llama_train_dynamic",
    "llama_modes",
    "gpt2_batches",
    "gpt2_batches_fixed",
    "llama_train_static",
)
TRACED = ("gpt2", "llama_modes", "llama_train_static")  # run with TORCH_TRACE
COUNTED = ("llama_train", "llama_train_dynamic", "llama_train_inductor", "llama_train_static")  # graph calls counted
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
        **({"TORCH_OTEL_GRAPH_CALLS": "on"} if args and args[0] in COUNTED else {}),
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
    jobs = [("hf_models.py", m, [m], m in TRACED) for m in HF]
    jobs += [
        ("hints.py", f"{m}{'_fixed' if fixed else ''}", [m, *(["fixed"] if fixed else [])], m == "int" and not fixed)
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
    # prefill's number and decode's: the reason names prefill's only (the newest entry's), decode's is counted too
    assert f["guards"][0]["line"].startswith("the number of keyword arguments took 2 values: "), f["guards"]
    (hint,) = f["hints"]
    assert hint["fix"] is None and "keyword arguments" in hint["why"] and hint["why"].endswith("no hint is given")
    assert "library code" in hint["why"]  # generate calls the compiled forward, not the user
    assert f["fixes"] == [] and not f["keeps_recompiling"]


def test_generate_with_a_dynamic_cache_never_marks_a_size_torch_specializes(runs):
    """The decode steps pass one token: dim 1 of input_ids took 1, which torch specializes. Marking it would not make
    it dynamic (torch compiles a size of 0 or 1 as a constant, and raises no ConstraintViolationError): no hint is
    given, and the reason is said."""
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
    # each its own compiles (4 lengths; the dynamic model's one), though torch numbers both models' compiles in one frame
    # (2/0, the static model's, 2/1 the dynamic's, 2/2 to 2/4 the static's): once, each counted the other's as its own
    assert (static[forward]["compiles"], dynamic[forward]["compiles"]) == (4, 1), (static[forward], dynamic[forward])
    assert static[forward]["keeps_recompiling"] and not dynamic[forward]["keeps_recompiling"]
    # their graphs' calls too, each frame at its own call site: the static model's 4 graphs ran once each (the evidence
    # on its frame alone), the dynamic model's one graph ran 4 times. Once, one frame of 5 graphs, whose evidence
    # both frames showed
    calls = {(f["function"], f["call_site"]): f for f in runs["two_models"]["summary"]["graph_calls"]["frames"]}
    assert (calls[(forward, STATIC)]["compiles"], calls[(forward, STATIC)]["dead"]) == (4, 4), calls[(forward, STATIC)]
    assert [g["calls"] for g in calls[(forward, DYNAMIC)]["graphs"]] == [4], calls[(forward, DYNAMIC)]
    assert static[forward]["evidence"]["ran_once"] == 4 and "evidence" not in dynamic[forward]


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
    # its name whole and the user's line; transformers' file gives way on a full row (the JSON and the page keep it)
    assert first.startswith(f"  {rec[0]['function']} ") and "…" not in first.split(" from ")[0], first
    assert f" from {TRAIN}: {rec[0]['recompiles']} recompiles ({rec[0]['cost_s']:.2f} s)" in first, first
    # the diff names them the same way
    res = run_cli(
        "diff",
        str(runs["gpt2"]["out"] / "summary.json"),
        str(runs["gpt2_static"]["out"] / "summary.json"),
        "--json",
        str(tmp_path / "d.json"),
    )
    assert res.returncode in (0, 4), res.stderr[-3000:]
    # its name whole and the user's line; transformers' place where the row has room for it (the JSON keeps it whole)
    row = rf"^  GPT2LMHeadModel\.wrapper( \(generic\.py:\d+\))? from {re.escape(TRAIN)} "
    assert re.search(row, res.stdout, re.M), res.stdout
    doc = json.loads((tmp_path / "d.json").read_text())
    assert any(f["function"] == "GPT2LMHeadModel.wrapper" and str(f["file"]).endswith("generic.py") for f in doc["frames"]), doc[
        "frames"
    ]
    assert all(f["call_site"] == TRAIN for f in doc["frames"]), doc["frames"]
    listed = [f["cost_s"] for f in doc["recompiling_frames"]]
    assert listed == sorted(listed, reverse=True)


# -- graph calls: a backward compiled with its forward is a graph of its own ----------------------------------------


def _calls(run: dict[str, Any]) -> tuple[int, int, dict[tuple[str, str], int], float, float]:
    """A Llama run's graph calls: the summary's graphs and calls, calls per (graph, pass), and the metric's forward and
    backward calls (torch_compile_graph_calls_total)."""
    part = run["summary"]["graph_calls"]
    rows = {(g["id"], g["kind"]): g["calls"] for f in part["frames"] for g in f["graphs"]}
    by_pass = {
        p: sum(
            float(m.group(1))
            for m in re.finditer(rf'^torch_compile_graph_calls_total{{[^}}]*pass="{p}"[^}}]*}} (\S+)$', run["metrics"], re.M)
        )
        for p in ("forward", "backward")
    }
    return part["graphs"], part["calls"], rows, by_pass["forward"], by_pass["backward"]


def test_a_backward_compiled_with_its_forward_counts_as_a_graph_cold_warm_and_with_dynamic_shapes(runs, tmp_path):
    """A Llama trained three steps (issue 52): AOTAutograd compiles its backward lazily at the first ``backward()``
    (``torch.compile(model)``), with its forward under ``dynamic=True``, and with it from AOTAutograd's cache on a warm
    inductor run. Every form reads "2 compiled graphs ran 6 times", as the metric counts 3 forward and 3 backward calls,
    and ``torch-otel diff`` of two forms (their summaries, their traces) says "graphs 2 -> 2", never "2 -> 1"."""
    got = {m: runs[m] for m in ("llama_train", "llama_train_dynamic")}
    # inductor, twice on the run's shared cache: the second run's AOTAutograd lookup hits, serving both graphs
    for name in ("inductor_first", "inductor_warm"):
        _, got[name] = _run(tmp_path, "hf_models.py", name, ["llama_train_inductor"], False)
        assert got[name]["rc"] == 0, got[name]["stderr"][-3000:]
    warm = {(r["cache"], r["result"]): r["count"] for r in got["inductor_warm"]["summary"]["cache"]}
    assert warm.get(("aot_autograd", "hit")) == 1 and not warm.get(("aot_autograd", "miss")), warm
    for name, run in got.items():
        graphs, calls, rows, fwd, bwd = _calls(run)
        assert (fwd, bwd) == (3, 3), name  # the metric: 3 forward and 3 backward calls
        assert (graphs, calls) == (2, 6), (name, rows)
        assert rows == {("0/0", "frame"): 3, ("0/0", "backward"): 3}, (name, rows)
        assert "graph calls: 2 compiled graphs ran 6 times" in format_text(run["summary"], WIDTH), name
    # the backward served or compiled with its forward says so (its compile time is its forward's)
    for name in ("llama_train_dynamic", "inductor_warm"):
        (bwd_row,) = [g for f in got[name]["summary"]["graph_calls"]["frames"] for g in f["graphs"] if g["kind"] == "backward"]
        assert bwd_row["with_forward"] is True and bwd_row["compile_s"] == 0 and bwd_row["compile_s_per_call"] is None
    (lazy,) = [g for f in got["llama_train"]["summary"]["graph_calls"]["frames"] for g in f["graphs"] if g["kind"] == "backward"]
    assert "with_forward" not in lazy and lazy["compile_s"] > 0
    # diff: the same graphs on both sides, from the summaries and from the traces (the spans written at exit)
    for base, new in (("inductor_first", "inductor_warm"), ("llama_train", "llama_train_dynamic")):
        for ext in ("summary.json", "spans.jsonl"):
            out = tmp_path / f"diff-{base}-{new}-{ext}.json"
            res = run_cli("diff", str(got[base]["out"] / ext), str(got[new]["out"] / ext), "--json", str(out))
            assert res.returncode in (0, 4), res.stderr[-3000:]
            gc = json.loads(out.read_text())["graph_calls"]
            assert (gc["base_graphs"], gc["new_graphs"], gc["base_calls"], gc["new_calls"]) == (2, 2, 6, 6), (base, new, ext)
            assert [(f["base_compiles"], f["new_compiles"]) for f in gc["frames"]] == [(2, 2)], (base, new, ext)
            assert "graph calls: 6 -> 6 calls of 2 -> 2 compiled graphs" in res.stdout, res.stdout
            assert "calls 3 -> 3, graphs 2 -> 2" in res.stdout and "graphs 2 -> 1" not in res.stdout, res.stdout


# -- recompile reasons: torch's words kept on screen, whole in the JSON ----------------------------------------------


def _torch_reasons(trace: Path) -> list[str]:
    """Each compile's ``recompile_reason`` in torch's own record (the TORCH_TRACE log's compilation_metrics)."""
    (log,) = trace.iterdir()
    out = []
    for line in log.read_text().splitlines():
        m = re.match(r"^[VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] (\{.*\})$", line)
        if m and "compilation_metrics" in m.group(1):
            reason = json.loads(m.group(1))["compilation_metrics"].get("recompile_reason")
            if reason:
                out.append(reason)
    return out


def test_recompile_reasons_keep_torchs_words_on_screen_and_are_whole_in_the_json(runs, tmp_path):
    """A Llama called under no_grad, then inference_mode (a dispatch key set mismatch on a parameter with a long module
    path), then with a layer's attention_dropout changed (issue 52). The text shortens the reasons and keeps what they
    mean: "dispatch key set mismatch", and the module path's last parts whole ("layers[1].self_attn.attention_dropout").
    The JSON keeps each reason whole, as torch's record has it (its values scrubbed), live and on replay: torch's
    advice after the facts ("Guard failed on a parameter, consider ...") included."""
    run = runs["llama_modes"]
    torch_said = sorted({scrub_guard_text(strip_recompile_prefix(r)) for r in _torch_reasons(run["out"] / "trace")})
    assert len(torch_said) == 3 and any(len(r) > 200 for r in torch_said), torch_said  # longer than the old cut
    res = run_cli("replay", str(run["out"] / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    replayed = json.loads((tmp_path / "replayed.json").read_text())
    for how, summary in (("live", run["summary"]), ("replay", replayed)):
        whole = sorted(r["reason"] for r in summary["recompiles"]["top_reasons"])
        assert whole == torch_said, how  # whole: JSON is for machines
        (frame,) = summary["recompiling_frames"]
        assert sorted(r["reason"] for r in frame["top_reasons"]) == torch_said, how
        text = format_text(summary, WIDTH) if how == "live" else res.stdout
        shown = [ln for ln in text.splitlines() if re.match(r"^ +1  (other|value): ", ln)]
        assert len(shown) == 3 and all(len(ln) <= WIDTH for ln in shown), (how, shown)
        dispatch = [ln for ln in shown if "DispatchKeySet" in ln or "dispatch" in ln]
        assert len(dispatch) == 2 and all("dispatch key set mismatch" in ln for ln in dispatch), (how, dispatch)
        # what changed between the two key sets, said in a few words: autograd's key, there under no_grad only
        assert any("mismatch. actual adds AutogradCPU" in ln for ln in dispatch), dispatch
        assert any("mismatch. actual lacks AutogradCPU" in ln for ln in dispatch), dispatch
        (value,) = [ln for ln in shown if "value:" in ln]
        assert value.endswith("layers[1].self_attn.attention_dropout == <value>"), (how, value)
        # the frame is transformers' deprecate_kwarg wrapper of the model's forward, named by the model it was given
        # (its args[0]: the frame has no self), live from the frame, on replay from torch's guard on L['args'][0]
        assert {f["function"] for f in summary["frames"]} == {"LlamaForCausalLM.wrapped_func"}, (how, summary["frames"])
        assert frame["function"] == "LlamaForCausalLM.wrapped_func", how
    # the diff's new recompiles keep them too
    res = run_cli("diff", str(runs["llama_train"]["out"] / "summary.json"), str(run["out"] / "summary.json"))
    assert res.returncode in (0, 4), res.stderr[-3000:]
    new = [ln for ln in res.stdout.splitlines() if ln.startswith("  new   other")]
    assert new and "dispatch key set mismatch" in new[0], res.stdout


# -- a safe hint for a size torch specializes: automatic dynamic shapes back on ---------------------------------------

COMPILE_FIX = "automatic dynamic shapes back on: no dynamic=False, automatic_dynamic_shapes = True"


def test_a_batch_that_took_size_1_under_dynamic_false_gets_the_compile_hint_and_applied_it_halves_the_recompiles(runs):
    """A GPT-2 compiled with ``dynamic=False`` and trained on batches of 4, 8, 2, 1 and 3 (issue 52). Sizes 0 and 1
    rule out ``mark_dynamic`` (torch specializes them: it would raise), not the compile-level fix: with automatic
    dynamic shapes back on, the sizes other than 1 share one graph. Every frame gets that fix first, its why says
    that size 1 still compiles its own graph, and, applied (``gpt2_batches_fixed``), the recompiles halve."""
    static = runs["gpt2_batches"]["summary"]
    frames = static["recompiling_frames"]
    assert frames and all(f["keeps_recompiling"] for f in frames)
    for f in frames:
        sizes = [g for g in f["guards"] if g["kind"] == "size"]
        assert sizes and all("1" in g["values"] for g in sizes), f["guards"]  # each took size 1
        first = f["hints"][0]
        assert (first["fix"], first["where"]) == (COMPILE_FIX, "compile"), (f["function"], f["hints"])
        assert "Sizes 0 and 1 still compile a graph each" in first["why"] and "ConstraintViolationError" in first["why"]
        assert not any(h["fix"] and "mark_dynamic" in h["fix"] for h in f["hints"])  # never on a size torch specializes
    assert f"fix: {COMPILE_FIX}" in format_text(static, WIDTH)
    fixed = runs["gpt2_batches_fixed"]["summary"]
    assert static["recompiles"]["total"] >= 2 * fixed["recompiles"]["total"] > 0, (static["recompiles"], fixed["recompiles"])
    by_frame = {(f["function"], f["call_site"]): f["recompiles"] for f in fixed["recompiling_frames"]}
    for f in frames:  # each frame: 4 recompiles (5 sizes) -> 2 (8 makes the dimension dynamic, 1 compiles its own)
        assert by_frame.get((f["function"], f["call_site"]), 0) <= f["recompiles"] // 2, (f["function"], by_frame)


# -- values counted: the newest value of an int no reason names ---------------------------------------------------


def test_an_int_argument_that_took_6_values_reads_6_live_and_on_replay(runs, tmp_path):
    """``step(x, n)`` with ``dynamic=False``, n taking 2 to 7 (issue 52: it read "took 5 values"). torch's reason for
    an int guard names the value its newest cache entry was compiled for ("n == 6"), never the new one, so no reason
    names the last value. The count is the compiles' (torch's record: 6 compiles of the frame, 5 of them recompiles)."""
    run = runs["int"]
    (log,) = (run["out"] / "trace").iterdir()
    metrics = [
        json.loads(m.group(1))["compilation_metrics"]
        for m in re.finditer(r"\] (\{\"compilation_metrics\".*\})$", log.read_text(), re.M)
    ]
    assert len(metrics) == 6 and sum(1 for m in metrics if m.get("recompile_reason")) == 5
    res = run_cli("replay", str(run["out"] / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    for how, summary in (("live", run["summary"]), ("replay", json.loads((tmp_path / "replayed.json").read_text()))):
        (f,) = summary["recompiling_frames"]
        (g,) = f["guards"]
        assert (g["kind"], g["failures"]) == ("int", 5), how
        assert g["line"].startswith("int argument 'n' took 6 values (not shown"), (how, g["line"])
        assert "torch's reason: int argument 'n' took 6 values" in format_text(summary, WIDTH), how


# -- a full screen keeps the frames that keep recompiling ---------------------------------------------------------


def test_a_llama_training_runs_full_screen_keeps_its_recompiling_frames_live_and_on_replay(runs, tmp_path):
    """A Llama trained with gradient checkpointing, ``dynamic=False`` and a sequence length that changes every step
    (issue 52): its summary reaches the screen's line limit (a frame left in eager, graph breaks, graph calls, five
    frames that keep recompiling). The frames that keep recompiling keep their block, the costliest with its fix; the
    slowest compiles, the phases and the costliest frames give way, each saying how many more the JSON has. Live (the
    summary TORCH_OTEL_SUMMARY wrote) and on replay of the same run's log (no graph calls there)."""
    run = runs["llama_train_static"]
    summary = run["summary"]
    assert summary["eager_frames"] and len([f for f in summary["recompiling_frames"] if f["keeps_recompiling"]]) >= 3
    live = format_text(summary, WIDTH)
    assert_the_screen_keeps_the_recompiling_frames(live, summary)
    assert "more frames: --json or the HTML page lists them" in live  # the blocks that gave way say so
    res = run_cli("replay", str(run["out"] / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 0, res.stderr[-3000:]
    replayed = json.loads((tmp_path / "replayed.json").read_text())
    assert_the_screen_keeps_the_recompiling_frames(summary_screen(res.stdout), replayed)
