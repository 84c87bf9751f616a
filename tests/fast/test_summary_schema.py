"""Fast tier: the run summary's JSON has one owner, torch_otel._sinks.summary, which writes it and says how it adds up
over a job's ranks (``MERGE``); ``torch-otel diff`` only reads it. No torch.compile anywhere.

A key the summary writes without saying how it merges fails here; so does a merge that does not sum to the summary
of all the ranks' compiles at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fast.fastkit import feed, frame, metrics
from torch_otel._core.compile_id import parse_compile_id
from torch_otel._model.events import GraphBreakEvent
from torch_otel._model.record import CompileRecord
from torch_otel._sinks.summary import RunSummary
from torch_otel._sinks.summary_merge import Merge, merge_rules, merge_summaries


def _records(rank: int, shapes: int, break_line: int | None = None, fail: bool = False) -> list[CompileRecord]:
    events: list[Any] = []
    t = rank * 10**9
    for i in range(shapes):
        reason = {"recompile_reason": f"tensor 'x' size mismatch at index 0. expected {i}, actual {i + 1}"} if i else {}
        events += [
            frame(f"0/{i}", t, t + 1_000_000 * (rank + 1), ("bytecode_tracing", t + 1, t + 400_000)),
            metrics(f"0/{i}", co_name="fwd", co_filename=f"/rank{rank}/model.py", co_firstlineno=30, cache_size=i, **reason),
        ]
        t += 2_000_000
    events += [frame("1/0", t, t + 700_000, ("bytecode_tracing", t + 1, t + 300_000))]
    if break_line is not None:
        events.append(GraphBreakEvent(parse_compile_id("1/0"), "Graph Break Reason: x", "print", "/src/model.py", break_line))
    events.append(metrics("1/0", co_name="loss", co_filename="/src/model.py", co_firstlineno=40))
    if fail:
        events += [
            frame("2/0", t + 10**6, t + 2 * 10**6),
            metrics("2/0", co_name="bad", fail_type="Unsupported", fail_reason="no"),
        ]
    _, sink = feed(events)
    for r in sink.finished:
        r.rank = rank
    return sink.finished


def _summary(*records: list[CompileRecord]) -> dict[str, Any]:
    s = RunSummary("replay")
    for recs in records:
        for r in recs:
            s.on_finish(r)
    return s.to_dict()


def _keys(rules: dict[str, Merge], doc: dict[str, Any], where: str = "") -> list[str]:
    """Every key of ``doc`` (and of its sections) that ``rules`` say nothing of."""
    missing = []
    for key, value in doc.items():
        rule = rules.get(key)
        if rule is None:
            missing.append(where + key)
        elif rule.section is not None and isinstance(value, dict):
            missing += _keys(dict(rule.section), value, f"{where}{key}.")
        elif rule.add is None and rule.section is None:
            assert rule.why, f"{where}{key} is not merged and says not why"
    return missing


def test_every_key_the_summary_writes_says_how_it_merges_across_ranks():
    doc = _summary(_records(0, 3, break_line=37, fail=True))
    assert _keys(merge_rules(), doc) == []


def test_the_check_itself_finds_a_key_written_without_a_rule():
    doc = _summary(_records(0, 1))
    doc["new_field"] = 1
    doc["caches"]["new_part"] = 2
    assert _keys(merge_rules(), doc) == ["caches.new_part", "new_field"]


def test_one_summary_merged_is_itself():
    doc = _summary(_records(0, 3, break_line=37, fail=True))
    merged = merge_summaries([doc])
    for key, rule in merge_rules().items():
        if key not in doc:  # an optional part with nothing to say (the start-up, with no recorder): none merged
            assert merged.get(key) is None, key
        elif rule.add is not None or rule.section is not None:
            want = doc[key] if rule.section is None else {k: v for k, v in doc[key].items() if k in merged[key]}
            assert merged[key] == want, key


def _rows(rows: list[dict[str, Any]], *key: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in key): r for r in rows}


def test_two_ranks_merged_sum_to_the_summary_of_both_ranks_compiles():
    a, b = _records(0, 3, break_line=37), _records(1, 2, fail=True)
    merged, both = merge_summaries([_summary(a), _summary(b)]), _summary(a, b)
    for key in ("compiles", "by_kind", "recompile_limit_hits", "eager_fallbacks", "ranks", "torch_versions"):
        assert merged[key] == both[key], key
    assert merged["wall_s"] == pytest.approx(both["wall_s"])
    assert merged["recompiles"]["total"] == both["recompiles"]["total"] == 3
    assert merged["recompiles"]["by_category"] == both["recompiles"]["by_category"]
    assert merged["graph_breaks"]["total"] == both["graph_breaks"]["total"] == 1
    assert merged["failures"]["by_type"] == both["failures"]["by_type"] == {"Unsupported": 1}
    got, want = _rows(merged["phases"], "name"), _rows(both["phases"], "name")
    assert got.keys() == want.keys()
    for name in want:
        assert got[name]["count"] == want[name]["count"] and got[name]["total_s"] == pytest.approx(want[name]["total_s"])
    # frames are matched by function, file name and line, as the diff matches them: /rank0/model.py is rank 1's too
    frames = _rows(merged["frames"], "function", "line")
    assert frames[("fwd", 30)]["compiles"] == 5 and frames[("loss", 40)]["compiles"] == 2
    assert [f["duration_s"] for f in merged["slowest"]] == [f["duration_s"] for f in both["slowest"]]
