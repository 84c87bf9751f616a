"""``torch-otel diff`` on pairs of real runs, each pair differing in one thing, read from every form a run leaves.

One module fixture runs the workloads, each with the bridge on, ``TORCH_TRACE``, ``TORCH_OTEL_SUMMARY`` and
``TORCH_OTEL_TRACES_FILE``, so every run is there as a log, a run summary and OTLP-JSON traces:

- tests/workloads/diff_pair.py (aot_eager): ``base`` twice (identical code), ``graph_break`` (a graph break added),
  ``shapes`` (a new batch size per step) and ``shapes_fixed`` (the fix the summary names for ``shapes``, applied);
- tests/workloads/diverge.py under ``torch-otel run -- torchrun`` (2 ranks, gloo): ``control``, and
  ``graph_break`` where rank 1 alone breaks the graph.

Each pair is diffed with each side read from its log, its summary and its traces, each against the others: the
verdicts (what is new or gone, the gate) are the same whichever form a side came from.
"""

from __future__ import annotations

import io
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, run, run_cli, run_python, spans_to_file, torchrun_under_torch_otel
from tests.servers import free_port
from torch_otel._analysis.diff_compare import compare
from torch_otel._analysis.diff_gate import parse_fail_on
from torch_otel._analysis.diff_text import format_text
from torch_otel._pipeline.diff_command import read_side

BIN = Path(sys.executable).parent
ALL, _ = parse_fail_on(["all"])
GATE_NO_TIME, _ = parse_fail_on(["graph-breaks,recompiles,failures,cache"])


def _bridge_env(out: Path, job: bool = False) -> dict[str, str]:
    if job:  # one summary and one traces file per rank, each in a directory of its own
        return {
            "TORCH_TRACE": str(out / "trace"),
            "TORCH_OTEL_SUMMARY": str(out / "summaries" / "summary-{rank}.json"),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "TORCH_OTEL_TRACES_FILE": str(out / "spans" / "spans-{rank}.jsonl"),
        }
    return {
        "TORCH_TRACE": str(out / "trace"),
        "TORCH_OTEL_SUMMARY": str(out / "summary.json"),
        **spans_to_file(out / "spans.jsonl"),
    }


def _forms(out: Path, job: bool = False) -> dict[str, Path]:
    if job:
        return {"log": out / "trace", "summary": out / "summaries", "traces": out / "spans"}
    return {"log": out / "trace", "summary": out / "summary.json", "traces": out / "spans.jsonl"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("diff")
    got: dict[str, Any] = {}
    errors: list[str] = []

    def pair_runs() -> None:
        for name, mode in (
            ("base1", "base"),
            ("base2", "base"),
            ("graph_break", "graph_break"),
            ("shapes", "shapes"),
            ("shapes_fixed", "shapes_fixed"),
        ):
            out = tmp / name
            res = run_python(WORKLOADS / "diff_pair.py", _bridge_env(out), args=[mode], timeout=600)
            if res.returncode != 0:
                errors.append(f"{name}: {res.stderr[-3000:]}")
                return
            got[name] = {"out": out, "forms": _forms(out), "stderr": res.stderr}
        for name, scenario in (("job_a", "control"), ("job_b", "graph_break")):
            out = tmp / name
            env = {
                **_bridge_env(out, job=True),
                "SCENARIO": scenario,
                "ODD_RANK": "1",
                "SKEW_S": "0",
                "HOLD_SECONDS": "0",
                "OMP_NUM_THREADS": "1",
                "MASTER_PORT": str(free_port()),
            }
            (out / "spans").mkdir(parents=True)
            argv = torchrun_under_torch_otel(2, WORKLOADS / "diverge.py")
            res = run(argv, env=env, timeout=600)
            if res.returncode != 0:
                errors.append(f"{name}: {res.stderr[-3000:]}")
                return
            got[name] = {"out": out, "forms": _forms(out, job=True)}

    pair_runs()
    assert not errors, errors
    return got


def _side(path: Path, baseline: Any = None) -> Any:
    err = io.StringIO()
    s, code, keys = read_side(str(path), err, baseline)
    assert s is not None, (path, code, err.getvalue())
    return s, keys


def _verdicts(d: dict[str, Any], causes: bool) -> dict[str, Any]:
    """What a diff says changed, apart from the times themselves (each form of a run holds the same times)."""
    base = lambda p: Path(p).name if p else None  # noqa: E731
    return {
        "graph_breaks_new": sorted((g["code"], base(g["file"]), g["line"], g.get("count")) for g in d["graph_breaks"]["new"]),
        "graph_breaks_gone": sorted((g["code"], base(g["file"]), g["line"]) for g in d["graph_breaks"]["gone"]),
        "recompiles_new": sorted((r["category"], r["frame"], r["count"]) for r in d["recompiles"]["new"]),
        "recompiles_gone": sorted((r["category"], r["frame"]) for r in d["recompiles"]["gone"]),
        "failures_new": sorted((f["type"], f.get("function")) for f in d["failures"]["new"]),
        "limit_hits_new": d["failures"]["limit_hits"]["new_frames"],
        "hit_rates": {k: (v["base"], v["new"]) for k, v in d["cache"]["hit_rate"].items()},
        "new_miss_causes": sorted((m["cache"], m["cause"]) for m in d["cache"]["new_misses"]) if causes else None,
        "ranks_changed": (d.get("ranks") or {}).get("changed"),
        "gate": sorted({x["text"] for x in (d["gate"] or {}).get("failed", [])}),
        "totals": (
            round(d["total"]["base_s"], 3),
            round(d["total"]["new_s"], 3),
            d["total"]["base_compiles"],
            d["total"]["new_compiles"],
        ),
        "frames": sorted((f["function"], f["base_compiles"], f["new_compiles"]) for f in d["frames"]),
    }


def _every_form(runs: dict[str, Any], a: str, b: str, gate: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """The diff of run ``a`` against run ``b``, with each side read from each of its forms (9 diffs)."""
    out = {}
    for fa, fb in itertools.product(("log", "summary", "traces"), repeat=2):
        base, keys = _side(runs[a]["forms"][fa])
        new, _ = _side(runs[b]["forms"][fb], keys)
        out[(fa, fb)] = compare(base, new, gate)
    return out


def _same_verdicts(diffs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    # A new miss's cause needs the keys: a live run's summary and traces carry theirs; a log explains its misses
    # against the base's keys when the base is a log too (else against its own run only)
    seen = {k: _verdicts(d, causes=not (k[1] == "log" and k[0] != "log")) for k, d in diffs.items()}
    first = seen[("log", "log")]
    for k, v in seen.items():
        for key, value in v.items():
            if value is None or first[key] is None:
                continue
            if key == "totals":  # torch's duration (summary, traces) and the log's agree to the microsecond
                assert value == pytest.approx(first[key], abs=2e-3), (k, key)
            else:
                assert value == first[key], (k, key, value, first[key])
    return first


def test_two_runs_of_identical_code_flag_nothing_and_pass_the_gate(runs: dict[str, Any]) -> None:
    diffs = _every_form(runs, "base1", "base2", ALL)
    v = _same_verdicts(diffs)
    assert v["graph_breaks_new"] == v["recompiles_new"] == v["failures_new"] == [] and v["gate"] == []
    for d in diffs.values():
        assert d["gate"]["passed"], d["gate"]
    res = run_cli("diff", str(runs["base1"]["forms"]["log"]), str(runs["base2"]["forms"]["log"]), "--fail-on", "all", script=True)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) <= 45 and max(len(x) for x in lines) <= 100
    assert lines[-1].startswith("gate: passed")


def test_a_graph_break_added_is_named_with_its_code_and_location_and_fails_the_gate(runs: dict[str, Any]) -> None:
    diffs = _every_form(runs, "base1", "graph_break", GATE_NO_TIME)
    v = _same_verdicts(diffs)
    assert v["graph_breaks_new"] == [("GB0025", "diff_pair.py", 37, 1)]
    assert v["gate"] == ["new graph break GB0025 Call to `torch._dynamo.graph_break()` at diff_pair.py:37"]
    assert ("torch_dynamo_resume_in_loss_fn_at_37", 0, 2) in v["frames"]  # its frame and its backward
    res = run_cli(
        "diff",
        str(runs["base1"]["forms"]["summary"]),
        str(runs["graph_break"]["forms"]["traces"]),
        "--fail-on",
        "graph-breaks",
        "--html",
        str(runs["graph_break"]["out"] / "diff.html"),
        "--json",
        "-",
        script=True,
    )
    assert res.returncode == 4, res.stderr
    doc = json.loads(res.stdout)
    assert doc["gate"]["failed"][0]["text"] == v["gate"][0]
    assert "new   GB0025 Call to `torch._dynamo.graph_break()` at diff_pair.py:37 in loss_fn: 1" in res.stderr


def test_a_new_shape_per_step_is_named_with_its_category_and_the_fix_that_stops_it(runs: dict[str, Any]) -> None:
    diffs = _every_form(runs, "base1", "shapes", GATE_NO_TIME)
    v = _same_verdicts(diffs)
    assert v["recompiles_new"] == [
        ("size_mismatch", "Model.forward (diff_pair.py:30)", 6),
        ("size_mismatch", "loss_fn (diff_pair.py:34)", 6),
    ]
    d = diffs[("log", "log")]
    frames = {f["function"]: f for f in d["recompiling_frames"]}
    assert frames["Model.forward"]["guards"][0]["line"] == "dim 0 of input 'x' took 7 values: 8, 16, 24, 32, 40, 48, 56"
    assert frames["Model.forward"]["fixes"][0]["fix"] == "torch._dynamo.maybe_mark_dynamic(x, 0)"
    assert frames["loss_fn"]["fixes"][0]["fix"] == "torch._dynamo.maybe_mark_dynamic(out, 0)"
    # torch's limit, 8, is in each compile's record: 7 compiles, one more before eager; the live run warned once each
    assert (
        frames["Model.forward"]["limit"],
        frames["Model.forward"]["cache_entries"],
        frames["Model.forward"]["left_before_limit"],
    ) == (8, 7, 1)
    for traces in (diffs[("log", "traces")], diffs[("summary", "summary")]):
        assert {f["function"]: f["fixes"][0]["fix"] for f in traces["recompiling_frames"]} == {
            "Model.forward": "torch._dynamo.maybe_mark_dynamic(x, 0)",
            "loss_fn": "torch._dynamo.maybe_mark_dynamic(out, 0)",
        }
    warned = [x for x in runs["shapes"]["stderr"].splitlines() if "torch._dynamo.config.recompile_limit" in x]
    assert len(warned) == 2 and all("2 more before" in x and "mark_dynamic" in x for x in warned), warned
    near = [
        e
        for line in runs["shapes"]["forms"]["traces"].read_text().splitlines()
        for e in _events(json.loads(line))
        if e == "torch.compile.recompile_limit_near"
    ]
    assert len(near) == 2  # one event per frame, not one per compile
    # the summary names the fix; the run that applies it recompiles no more
    summary = json.loads(runs["shapes"]["forms"]["summary"].read_text())
    # (the frames come costliest first; these two cost about the same, so their order is the run's)
    assert sorted(f["fixes"][0]["fix"] for f in summary["recompiling_frames"]) == [
        "torch._dynamo.maybe_mark_dynamic(out, 0)",
        "torch._dynamo.maybe_mark_dynamic(x, 0)",
    ]
    fixed = _same_verdicts(_every_form(runs, "shapes", "shapes_fixed", GATE_NO_TIME))
    assert fixed["recompiles_gone"] == [
        ("size_mismatch", "Model.forward (diff_pair.py:30)"),
        ("size_mismatch", "loss_fn (diff_pair.py:34)"),
    ]
    assert fixed["recompiles_new"] == [] and fixed["gate"] == []
    after = json.loads(runs["shapes_fixed"]["forms"]["summary"].read_text())
    assert after["recompiles"]["total"] == 0 and after["recompiling_frames"] == []


def _events(doc: dict[str, Any]) -> list[str]:
    return [
        e["name"]
        for rs in doc.get("resourceSpans", [])
        for ss in rs.get("scopeSpans", [])
        for s in ss.get("spans", [])
        for e in s.get("events", [])
    ]


def test_a_job_against_itself_with_one_rank_changed_names_the_rank(runs: dict[str, Any]) -> None:
    diffs = _every_form(runs, "job_a", "job_b", GATE_NO_TIME)
    v = _same_verdicts(diffs)
    assert v["ranks_changed"] == [1]
    assert v["gate"] == ["new graph break GB0025 Call to `torch._dynamo.graph_break()` at diverge.py:41 (rank 1)"]
    assert v["graph_breaks_new"] == [("GB0025", "diverge.py", 41, 1)]
    d = diffs[("log", "log")]
    assert d["ranks"]["compared"] == [0, 1] and d["compared"] == []
    assert "ranks compared: 0-1; changed: 1" in format_text(d)
    same = _same_verdicts(_every_form(runs, "job_a", "job_a", GATE_NO_TIME))
    assert same["ranks_changed"] == [] and same["gate"] == []


def test_a_log_against_a_job_of_another_world_size_says_what_is_compared(runs: dict[str, Any]) -> None:
    base, keys = _side(runs["base1"]["forms"]["log"])
    job, _ = _side(runs["job_a"]["forms"]["log"], keys)
    d = compare(base, job, GATE_NO_TIME)
    assert d["compared"][0].startswith("base is one process (rank 0), the other side 2 ranks")
    assert format_text(d).splitlines()[4].startswith("  note: base is one process")


def test_unreadable_input_gets_replays_exit_codes_and_one_line(runs: dict[str, Any], tmp_path: Path) -> None:
    good = str(runs["base1"]["forms"]["log"])
    empty = tmp_path / "empty.log"
    empty.write_text("")
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps({"schema_version": 2}))
    for argv, code, words in (
        ([good, str(tmp_path / "missing")], 2, "no such file or directory"),
        ([str(empty), good], 1, "the file is empty"),
        ([good, str(v2)], 1, "schema_version 2"),
        ([good, good, "--fail-on", "speed"], 2, "no such condition"),
    ):
        res = run_cli("diff", *argv, script=True)
        assert res.returncode == code, (argv, res.stderr)
        assert words in res.stderr, res.stderr


def test_the_side_by_side_page_renders_in_headless_chromium(runs: dict[str, Any], tmp_path: Path) -> None:
    from tests import test_report_html as chrome

    if not chrome.CHROMIUM:
        pytest.skip("no chromium (apt-get install chromium)")
    from torch_otel._sinks.diff_html import render_diff_html

    base, keys = _side(runs["job_a"]["forms"]["log"])
    new, _ = _side(runs["job_b"]["forms"]["summary"], keys)
    d = compare(base, new, ALL)
    d["graph_breaks"]["new"][0]["type"] = chrome.XSS  # names from user code stay text
    page = chrome._open(tmp_path, render_diff_html(d), "diff.html")
    chrome._assert_clean(page)
    assert chrome._rendered(page) > 5
    assert "Frames, side by side" in page.dom and "Ranks" in page.dom and "alert(" not in page.dom.split("<script")[0]
    shapes, keys = _side(runs["base1"]["forms"]["log"])
    fixed = compare(shapes, _side(runs["shapes"]["forms"]["traces"], keys)[0], ALL)
    page = chrome._open(tmp_path, render_diff_html(fixed), "shapes.html")
    chrome._assert_clean(page)
    assert "torch._dynamo.maybe_mark_dynamic(x, 0)" in page.dom and "torch's docs" in page.dom
    # the run summary's own page has the frames that keep recompiling too, with their fix
    from torch_otel._sinks.html import render_html

    summary = json.loads(runs["shapes"]["forms"]["summary"].read_text())
    page = chrome._open(tmp_path, render_html(summary), "summary.html")
    chrome._assert_clean(page)
    assert "Frames that keep recompiling" in page.dom and "torch._dynamo.maybe_mark_dynamic(out, 0)" in page.dom
    assert "7 of 8 compiles, 1 more before eager" in page.dom
