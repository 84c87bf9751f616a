"""``torch-otel diff``'s logic on run summaries built from event sequences: matching, verdicts, the gate, one screen.

The summaries are :class:`RunSummary` facts of records the assembler built from fastkit's events, as a replay or a
live run builds them; tests/test_diff.py runs the same on real runs' logs, summaries and traces.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fast.fastkit import feed, frame, metrics
from torch_otel._analysis.diff_compare import Side, compare
from torch_otel._analysis.diff_gate import DEFAULTS, EXIT_GATE_FAILED, EXIT_OK, Gate, grew, parse_fail_on
from torch_otel._analysis.diff_text import format_text
from torch_otel._core.compile_id import parse_compile_id
from torch_otel._core.frame_names import match
from torch_otel._core.graph_breaks import graph_break_code
from torch_otel._model.events import GraphBreakEvent
from torch_otel._pipeline.diff_command import read_side
from torch_otel._sinks.diff_html import render_diff_html
from torch_otel._sinks.summary import RunSummary
from torch_otel._sinks.summary_merge import merge_summaries

GB_TYPE = "Call to `torch._dynamo.graph_break()`"


def run(
    *,
    scale: float = 1.0,
    break_at: int | None = None,
    shapes: int = 1,
    rank: int | None = None,
    line: int = 30,
    fail: bool = False,
    version: str = "2.13.0",
) -> dict[str, Any]:
    """A run's summary: frame ``fwd`` (model.py:``line``) compiled ``shapes`` times, ``loss`` once, optionally a graph
    break in ``loss`` at model.py:``break_at`` and a failed frame ``bad``; every duration times ``scale``."""
    events: list[Any] = []
    t = 0
    for i in range(shapes):
        reason = {"recompile_reason": f"tensor 'x' size mismatch at index 0. expected {8 * i}, actual {8 * (i + 1)}"} if i else {}
        dur = int(1e9 * scale)
        events += [
            frame(f"0/{i}", t, t + dur, ("bytecode_tracing", t + 1, t + dur // 2)),
            metrics(
                f"0/{i}",
                co_name="fwd",
                co_filename="/src/model.py",
                co_firstlineno=line,
                cache_size=i,
                pytorch_version=version,
                **reason,
            ),
        ]
        t += dur + 10
    dur = int(0.5e9 * scale)
    events += [frame("1/0", t, t + dur, ("bytecode_tracing", t + 1, t + dur // 2))]
    if break_at is not None:
        events.append(GraphBreakEvent(parse_compile_id("1/0"), "Graph Break Reason: x", GB_TYPE, "/src/model.py", break_at))
    events.append(metrics("1/0", co_name="loss", co_filename="/src/model.py", co_firstlineno=line + 10, pytorch_version=version))
    t += dur + 10
    if fail:
        events += [
            frame("2/0", t, t + 1000),
            metrics(
                "2/0", co_name="bad", co_filename="/src/model.py", co_firstlineno=90, fail_type="Unsupported", fail_reason="nope"
            ),
        ]
    _, sink = feed(events)
    summary = RunSummary("replay")
    for r in sink.finished:
        if rank is not None:
            r.rank = rank
        r.torch_version = version
        summary.on_finish(r)
    return summary.to_dict()


def side(summary: dict[str, Any], ranks: dict[int, dict[str, Any]] | None = None, form: str = "run summary") -> Side:
    return Side("p", form, summary, ranks or {})


ALL, _ = parse_fail_on(["all"])


def test_two_identical_runs_flag_nothing_and_pass_the_gate() -> None:
    d = compare(side(run()), side(run()), ALL)
    assert d["flags"] == [] and d["gate"]["passed"] and d["gate"]["exit"] == EXIT_OK
    assert d["graph_breaks"]["new"] == d["recompiles"]["new"] == d["failures"]["new"] == []
    assert "gate: passed" in format_text(d)


def test_a_new_graph_break_is_named_by_code_and_location_and_fails_the_gate() -> None:
    d = compare(side(run()), side(run(break_at=37)), ALL)
    (gb,) = d["graph_breaks"]["new"]
    code = graph_break_code(GB_TYPE)  # GB0025 with torch's registry
    assert (gb["code"], gb["type"], gb["file"], gb["line"], gb["frame"]) == (code, GB_TYPE, "/src/model.py", 37, "loss")
    assert [f["kind"] for f in d["gate"]["failed"]] == ["graph-breaks"]
    assert d["gate"]["exit"] == EXIT_GATE_FAILED
    text = format_text(d)
    assert f"new   {code} Call to `torch._dynamo.graph_break()` at model.py:37 in loss: 1" in text
    assert compare(side(run(break_at=37)), side(run()), ALL)["graph_breaks"]["gone"][0]["line"] == 37


def test_code_added_above_moves_lines_without_a_new_frame_or_graph_break() -> None:
    d = compare(side(run(break_at=37)), side(run(break_at=40, line=33)), ALL)
    assert d["graph_breaks"]["new"] == [] and d["graph_breaks"]["moved"][0]["base_line"] == 37
    assert {f["status"] for f in d["frames"]} == {"both"}
    assert d["gate"]["passed"]


def test_recompiles_new_by_frame_and_category_with_torchs_reason_and_the_fix() -> None:
    d = compare(side(run()), side(run(shapes=5)), ALL)
    (new,) = d["recompiles"]["new"]
    assert (new["category"], new["frame"], new["count"]) == ("size_mismatch", "fwd (model.py:30)", 4)
    assert new["reasons"][0].startswith("tensor 'x' size mismatch at index 0")
    (f,) = d["recompiling_frames"]
    assert f["guards"][0]["line"] == "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"
    assert f["fixes"][0]["fix"] == "torch._dynamo.maybe_mark_dynamic(x, 0)"
    kinds = {x["kind"] for x in d["gate"]["failed"]}
    assert "recompiles" in kinds
    assert "fix (before the call at" not in format_text(d) and "fix: torch._dynamo.maybe_mark_dynamic(x, 0)" in format_text(d)
    assert compare(side(run(shapes=5)), side(run()), ALL)["recompiles"]["gone"][0]["category"] == "size_mismatch"


def test_a_new_failure_is_named_with_its_frame() -> None:
    d = compare(side(run()), side(run(fail=True)), ALL)
    (f,) = d["failures"]["new"]
    assert (f["type"], f["function"], f["line"]) == ("Unsupported", "bad", 90)
    assert any(x["kind"] == "failures" for x in d["gate"]["failed"])


def test_time_fails_the_gate_only_past_every_threshold() -> None:
    assert DEFAULTS["time"] == (50.0, 4.0) and DEFAULTS["frame-time"] == (100.0, 3.0)  # docs/diff.md's measured spread
    assert not grew(10.0, 14.9, DEFAULTS["time"])  # +49 %
    assert not grew(1.0, 4.9, DEFAULTS["time"])  # +390 % but +3.9 s
    assert grew(10.0, 16.0, DEFAULTS["time"])  # +60 %, +6 s
    assert grew(0.0, 4.0, DEFAULTS["frame-time"]) and not grew(0.0, 2.0, DEFAULTS["frame-time"])  # a new frame
    d = compare(side(run()), side(run(scale=5.0)), parse_fail_on(["time"])[0])
    assert [x["kind"] for x in d["gate"]["failed"]] == ["time"]
    d = compare(side(run()), side(run(scale=5.0)), parse_fail_on(["time:500%"])[0])
    assert d["gate"]["passed"]
    d = compare(side(run()), side(run(scale=3.0)), parse_fail_on(["frame-time:50%:0.5s"])[0])
    assert {x["text"].split(" compile")[0] for x in d["gate"]["failed"]} == {"fwd (model.py:30)", "loss (model.py:40)"}


def test_fail_on_reads_conditions_thresholds_and_refuses_what_it_does_not_know() -> None:
    gate, problems = parse_fail_on(["time:10%:2s,graph-break", "cache:5%"])
    assert problems == [] and gate.conditions == {"time": (10.0, 2.0), "graph-breaks": (None, None), "cache": (5.0, None)}
    assert set(ALL.conditions) == {"time", "frame-time", "graph-breaks", "recompiles", "failures", "cache", "startup"}
    _, problems = parse_fail_on(["speed", "graph-breaks:3s", "time:fast"])
    assert len(problems) == 3 and "no such condition" in problems[0]


def test_a_cache_hit_rate_that_fell_and_each_new_miss_with_its_cause() -> None:
    base, new = run(), run()
    base["caches"] = {
        "hit_rate": {"fx_graph": {"hits": 2, "misses": 0, "rate": 1.0}},
        "misses": 0,
        "misses_by_cache_and_cause": [],
        "top_reasons": [],
    }
    new["caches"] = {
        "hit_rate": {"fx_graph": {"hits": 0, "misses": 2, "rate": 0.0}},
        "misses": 2,
        "misses_by_cache_and_cause": [{"cache": "fx_graph", "cause": "config", "count": 2}],
        "top_reasons": [{"cache": "fx_graph", "reason": "inductor config size_asserts: True → False, against 0/0", "count": 2}],
    }
    d = compare(side(base), side(new), ALL)
    (m,) = d["cache"]["new_misses"]
    assert (m["cache"], m["cause"], m["base"], m["new"]) == ("fx_graph", "config", 0, 2)
    assert "size_asserts: True → False" in m["reasons"][0]
    assert [x["kind"] for x in d["gate"]["failed"]] == ["cache"]
    assert "fx_graph hit rate fell: 100% -> 0%" in format_text(d)


def test_each_rank_is_compared_and_the_changed_one_named() -> None:
    base_ranks = {r: run(rank=r) for r in range(3)}
    new_ranks = {0: run(rank=0), 1: run(rank=1, break_at=37), 2: run(rank=2)}
    d = compare(
        side(merge_summaries(list(base_ranks.values())), base_ranks),
        side(merge_summaries(list(new_ranks.values())), new_ranks),
        ALL,
    )
    assert d["ranks"]["changed"] == [1] and d["ranks"]["compared"] == [0, 1, 2]
    assert d["gate"]["failed"][0]["kind"] == "graph-breaks"
    assert "ranks compared: 0-2; changed: 1" in format_text(d)


def test_one_log_against_a_job_of_another_world_size_says_what_is_compared() -> None:
    job = {r: run(rank=r) for r in range(3)}
    d = compare(side(run(rank=0)), side(merge_summaries(list(job.values())), job), ALL)
    assert (
        d["compared"][0]
        == "base is one process (rank 0), the other side 3 ranks: comparing with its rank 0; ranks 1-2 are not compared"
    )
    assert d["total"]["new_compiles"] == d["total"]["base_compiles"]  # against rank 0 alone, not the job's sum
    two = {0: run(rank=0), 1: run(rank=1)}
    d = compare(side(merge_summaries(list(job.values())), job), side(merge_summaries(list(two.values())), two), ALL)
    assert "base has 3 ranks (0-2), new has 2 (0-1): ranks 0-1 are compared one to one" in d["compared"][0]


def test_different_torch_releases_are_said_in_one_line() -> None:
    d = compare(side(run(version="2.13.0")), side(run(version="2.15.0")), ALL)
    assert d["compared"] == [
        "torch releases differ (2.13.0 -> 2.15.0): compile times, phases and cache keys change with the release; every "
        "fact is compared, the cause of a cache miss names the version"
    ]


def test_frames_match_by_name_file_and_line_then_by_name_and_file() -> None:
    a = [{"function": "f", "file": "/x/m.py", "line": 3}, {"function": "g", "file": "/x/m.py", "line": 9}]
    b = [
        {"function": "f", "file": "/y/m.py", "line": 3},
        {"function": "g", "file": "m.py", "line": 12},
        {"function": "h", "file": "m.py", "line": 1},
    ]
    pairs = {(x and x["function"], y and y["function"]) for x, y in match(a, b)}
    assert pairs == {("f", "f"), ("g", "g"), (None, "h")}
    # two frames of one name in one file: the line decides, never a guess
    a2 = [{"function": "f", "file": "m.py", "line": 3}, {"function": "f", "file": "m.py", "line": 9}]
    b2 = [{"function": "f", "file": "m.py", "line": 5}, {"function": "f", "file": "m.py", "line": 11}]
    assert sorted((x is None, y is None) for x, y in match(a2, b2)) == [(False, True)] * 2 + [(True, False)] * 2


def test_the_screen_is_at_most_45_lines_of_100_columns_however_much_changed() -> None:
    base = run(shapes=3)
    new = copy.deepcopy(run(shapes=9, break_at=37, fail=True, scale=4.0))
    new["frames"] += [
        {"function": f"frame_{i}", "file": "/src/very/long/path/to/a/module_name.py", "line": i, "compiles": 1, "total_s": 1.0}
        for i in range(60)
    ]
    new["graph_breaks"]["by_location"] += [
        {"code": f"GB{i:04d}", "type": "x" * 150, "file": "/a.py", "line": i, "frame": "f", "count": 1} for i in range(30)
    ]
    ranks_b = {r: run(rank=r) for r in range(8)}
    ranks_n = {r: run(rank=r, break_at=30 + r) for r in range(8)}
    d = compare(side(base, ranks_b), side(new, ranks_n), ALL)
    lines = format_text(d).splitlines()
    assert len(lines) <= 45 and max(len(x) for x in lines) <= 100, "\n".join(lines)
    assert lines[-1].startswith("  ") or lines[-1].startswith("gate")
    assert any(x.startswith("gate: FAILED, exit 4") for x in lines)


def test_the_page_is_self_contained_and_data_never_becomes_markup() -> None:
    evil = "<script>alert(1)</script></script>"
    d = compare(side(run()), side(run(break_at=37)), ALL)
    d["graph_breaks"]["new"][0]["type"] = evil
    page = render_diff_html(d)
    assert evil not in page and "\\u003cscript\\u003e" in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "<link" not in page


def test_a_summary_of_another_schema_version_is_refused_in_one_line(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"schema_version": 2, "compiles": 0}))
    err = io.StringIO()
    s, code, _ = read_side(str(p), err)
    assert s is None and code == 1
    assert err.getvalue().count("\n") == 1 and "schema_version 2" in err.getvalue()
    s, code, _ = read_side(str(tmp_path / "missing"), err)
    assert s is None and code == 2


def test_merged_rank_summaries_sum_what_the_diff_reads() -> None:
    parts = [run(rank=0), run(rank=1, break_at=37)]
    m = merge_summaries(parts)
    assert m["compiles"] == sum(p["compiles"] for p in parts)
    assert m["wall_s"] == pytest.approx(sum(p["wall_s"] for p in parts))
    assert m["graph_breaks"]["by_location"][0]["line"] == 37 and m["ranks"] == [0, 1]
    assert {f["function"]: f["compiles"] for f in m["frames"]} == {"fwd": 2, "loss": 2}


def test_no_gate_still_says_what_passes_the_default_thresholds() -> None:
    d = compare(side(run()), side(run(break_at=37)), Gate())
    assert d["gate"] is None and d["flags"][0]["kind"] == "graph-breaks"
    assert "changes past the default thresholds: new graph break" in format_text(d)


def test_each_new_miss_lists_the_reasons_of_its_own_cause() -> None:
    """Two causes of one cache: each row names its own reasons, not every reason of the cache."""
    base, new = run(), run()
    base["caches"] = {"hit_rate": {"fx_graph": {"hits": 4, "misses": 0, "rate": 1.0}}, "misses": 0}
    new["caches"] = {
        "hit_rate": {"fx_graph": {"hits": 0, "misses": 4, "rate": 0.0}},
        "misses": 4,
        "misses_by_cache_and_cause": [
            {"cache": "fx_graph", "cause": "config", "count": 2},
            {"cache": "fx_graph", "cause": "not_in_cache", "count": 2},
        ],
        "top_reasons": [
            {"cache": "fx_graph", "cause": "config", "reason": "inductor config size_asserts: True → False", "count": 2},
            {"cache": "fx_graph", "cause": "not_in_cache", "reason": "not in this cache: the same key was seen", "count": 2},
        ],
    }
    rows = {m["cause"]: m["reasons"] for m in compare(side(base), side(new), ALL)["cache"]["new_misses"]}
    assert rows == {
        "config": ["inductor config size_asserts: True → False"],
        "not_in_cache": ["not in this cache: the same key was seen"],
    }


def test_a_long_frame_name_is_cut_and_the_numbers_on_its_line_are_kept_whole() -> None:
    """The name gives way, not the numbers: the frames table's counts and change, the reason's "expected 24, actual
    32" (issue 42, item 8)."""
    long = "a_function_whose_name_is_long_enough_to_fill_the_frames_column_of_the_screen"
    sides = []
    for s in (run(), run(shapes=5, scale=3)):
        for rows in (s["frames"], s["recompiling_frames"]):
            for f in rows:
                if f["function"] == "fwd":
                    f["function"] = long
        sides.append(side(s))
    lines = format_text(compare(sides[0], sides[1], ALL)).splitlines()
    assert max(map(len, lines)) <= 100
    (row,) = [ln for ln in lines if ln.startswith("  a_function_whose") and " -> " in ln and "recompiles" not in ln]
    assert "…" in row and "(model.py:30)" in row and row.endswith(" 1 -> 5       1.000    15.000 +14.000 >+999%"), row
    (new,) = [ln for ln in lines if ln.startswith("  new   size_mismatch in ")]
    assert "…" in new and new.endswith("expected 16, actual 24"), new
    (gate,) = [ln for ln in lines if "compile time grew" in ln and "a_function" in ln]
    assert "…" in gate and gate.endswith("(model.py:30) compile time grew +14.00 s (>+999%)"), gate
