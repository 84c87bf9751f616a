"""Frames that keep recompiling across ``torch._dynamo.reset()``: live and on replay of the same run's ``TORCH_TRACE``
log, against torch's own record (``tests/workloads/resets.py``, two small CPU runs).

torch numbers compiles again from ``0/0`` after a reset, so frame id 0 is reused by whatever function compiles first
next; torch logs no reset. The run summary's ``recompiling_frames`` took the earlier functions' compiles of frame 0 off
the count of the frame that later recompiled there ("compiles: 1, recompiles: 1"), and counted a fresh compile after a
reset, and its backward, into a frame's compiles and recompile cost. A frame compile ``N/0`` of a frame torch already
compiled in this generation marks a reset: a frame's counts are kept per generation, and its cache entries and the limit
it hit start again (torch's cache of it is empty: it no longer runs in eager).

tlparse folds the repeated ``0/0``s into one directory entry (``0/0``, ``0/1``): it does not say how many compiles
frame 0 had either. torch's ``CompilationMetrics`` list each, and are what these tests compare with.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.fast.fastkit import feed, frame, metrics
from tests.helpers import WORKLOADS, live_and_replayed
from torch_otel._analysis.eager import EagerFrames
from torch_otel._analysis.recompiling_frames import RecompilingFrames, frame_lines, limit_words

MODES = ("again",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {mode: live_and_replayed(WORKLOADS / "resets.py", tmp_path_factory.mktemp(mode), mode) for mode in MODES}


def _row(summary: dict[str, Any], function: str) -> dict[str, Any]:
    (row,) = [r for r in summary["recompiling_frames"] if r["function"] == function]
    return row


def _forwards(records: list[dict[str, Any]]) -> list[str]:
    """torch's frame compiles in order, as ``id code`` (a limit's compile names no code)."""
    return [f"{r['id']} {r['co_name']}" for r in records if r["forward"] is not False]


def _cost(records: list[dict[str, Any]], ids: set[int]) -> float:
    """What the records at those indexes took, their backwards (the next records of the same id) included."""
    total = 0
    for i in ids:
        total += records[i]["duration_us"]
        j = i + 1
        while j < len(records) and records[j]["forward"] is False and records[j]["id"] == records[i]["id"]:
            total += records[j]["duration_us"]
            j += 1
    return total / 1e6


@pytest.mark.parametrize("how", ["live", "replay"])
def test_a_frame_id_reused_after_resets_and_a_fresh_compile_after_one_are_not_recompiles(runs, how):
    records = runs["again"]["torch"]["records"]
    assert _forwards(records) == [
        "0/0 f",
        "0/0 f",
        "0/0 g",
        "0/1 g",
        "1/0 h",
        "1/1 h",
        "1/2 None",  # h's third size: the recompile limit (2), its input runs in eager
        "0/0 g",  # after the last reset: g and h afresh
        "1/0 h",
    ], records
    fresh = [i for i, r in enumerate(records) if r["forward"] is False and r["id"] == "0/0"][-1]
    assert fresh == len(records) - 2, records  # the fresh g's lazy backward, which must not count either
    g1 = next(r for r in records if r["id"] == "0/1" and r["forward"] is not False)  # g's recompile, for a new size
    assert "size mismatch" in g1["recompile_reason"] and g1["cache_size"] == 1, g1
    assert sorted(r["function"] for r in runs["again"][how]["recompiling_frames"]) == ["g", "h"]  # f never recompiled
    g = _row(runs["again"][how], "g")
    # frame id 0 was f's in two generations before g's: g compiled twice, one a recompile (not 1 compile, 1 recompile)
    assert (g["compiles"], g["recompiles"]) == (2, 1), g
    ids = [i for i, r in enumerate(records) if r["forward"] is not False]
    assert g["cost_s"] == pytest.approx(_cost(records, {ids[3]}), abs=2e-6), (g, records)
    assert g["cache_entries"] == 1 and g["limit_status"] == "near", g  # one entry since the reset, of 2
    assert (g["limit_hits"], g["limit_hits_before_reset"]) == (0, 0), g
    h = _row(runs["again"][how], "h")
    assert (h["compiles"], h["recompiles"], h["limit_hits"], h["limit_hits_before_reset"]) == (3, 2, 1, 1), h
    assert h["cost_s"] == pytest.approx(_cost(records, {ids[5], ids[6]}), abs=2e-6), (h, records)
    # the reset emptied h's cache: it compiled again, and no longer runs in eager
    assert (h["cache_entries"], h["left_before_limit"], h["limit_status"]) == (1, 1, "near"), h
    assert limit_words(h) == "1 of 2 frame compiles, 1 more before eager (near; hit before a reset)"
    shown = frame_lines([h], 120, 20, lambda f: f"{f['function']} ({Path(f['file']).name}:{f['line']})")
    assert re.match(r"  h \(resets\.py:\d+\): 2 recompiles \(0\.\d\d s\), 1 more before eager \(near; hit before a ", shown[1])
    assert "runs in eager" not in "\n".join(shown), shown
    # nor is h among the frames left in eager: it runs compiled again
    assert runs["again"][how]["eager_frames"] == [], runs["again"][how]["eager_frames"]


# -- the same rules on torch's records fed by hand: a suite that resets hundreds of times, and ranks ---------------------


def _compiles(ids: list[str], rank: int | None = None, limit: str | None = None, failed: str | None = None) -> list[Any]:
    """Frame compiles of ``f`` (``0/1`` and on: recompiles, for a new size), fed through the assembler; the one whose
    id is ``limit`` hits the recompile limit, in 2.13's words, and the one whose id is ``failed`` fails (a print
    torch cannot trace, under ``fullgraph=True``: no guarded code)."""
    events: list[object] = []
    for n, cid in enumerate(ids):
        fields: dict[str, Any] = {"co_name": "f", "co_filename": "/m.py", "co_firstlineno": 1, "duration_us": 1000 + n}
        k = int(cid.split("/")[1])
        if k:
            fields["recompile_reason"] = f"tensor 'x' size mismatch at index 0. expected {k}, actual {k + 1}"
            fields["cache_size"] = k
        if cid == limit:
            fields.update(fail_type="Unsupported", fail_reason="Dynamo recompile limit exceeded", co_name=None)
        if cid == failed:
            fields.update(fail_type="Unsupported", fail_reason="Failed to trace builtin operator", has_guarded_code=False)
        events += [frame(cid, 100 * n, 100 * n + 10), metrics(cid, **fields)]
    _, sink = feed(events)
    for r in sink.finished:
        r.rank = rank
    return sink.finished


def test_hundreds_of_resets_are_each_told_and_forget_what_they_left() -> None:
    frames = RecompilingFrames()
    f, other = ("f", "/m.py", 1), ("g", "/m.py", 5)
    for rec in _compiles(["0/0", "0/1"]):
        frames.add(rec, f)
    for _ in range(600):  # a test suite: reset, then other code on frames 0 and 1
        for rec in _compiles(["0/0", "1/0"]):
            frames.add(rec, other)
    for rec in _compiles(["0/0", "0/1", "0/2"]):  # f again: a fresh compile, then two recompiles
        frames.add(rec, f)
    (row,) = frames.to_dict()
    assert (row["compiles"], row["recompiles"], row["cache_entries"]) == (4, 3, 3), row
    assert row["cost_s"] == pytest.approx((1001 + 1001 + 1002) / 1e6), row
    assert len(frames._torch_frames) <= 2 and sum(len(s) for s in frames._seen.values()) <= 2


def test_each_ranks_first_compile_is_its_own_not_a_reset() -> None:
    """One replay of a job's ranks: each rank's ``0/0`` is its process's, not a reset of the rank before it."""
    frames = RecompilingFrames()
    for rank in (0, 1):
        for rec in _compiles(["0/0", "0/1"], rank):
            frames.add(rec, ("f", "/m.py", 1))
    (row,) = frames.to_dict()
    assert (row["compiles"], row["recompiles"], row["ranks"]) == (4, 2, [0, 1]), row


def test_a_hit_is_a_hit_of_now_unless_the_row_says_it_came_before_a_reset() -> None:
    """A summary merged from ranks keeps its first rank's ``limit_status``, and an older one has no
    ``limit_hits_before_reset``: their hits still read as hits."""
    row = {"limit": 8, "cache_entries": 3, "left_before_limit": 5, "limit_hits": 1, "limit_status": "ok"}
    assert limit_words(row) == "hit the recompile limit (8): runs in eager"
    assert limit_words({**row, "limit_hits_before_reset": 1}, short=True) == "5 more before eager (hit before a reset)"
    assert limit_words({**row, "limit_hits": 2, "limit_hits_before_reset": 1}) == "hit the recompile limit (8): runs in eager"


def test_a_frame_compiled_again_after_its_limit_leaves_the_eager_frames_only_in_the_process_that_did() -> None:
    """torch compiles no frame past its limit but after ``torch._dynamo.reset()``: a process that compiled the frame
    again since its hit runs it compiled; the row stays while any process's hit still stands."""
    key = ("f", "/m.py", 1)
    for ranks_reset in ((0, 1), (0,)):
        eager = EagerFrames()
        for rank in (0, 1):
            for rec in _compiles(["0/0", "0/1", "0/2"], rank, limit="0/2"):
                eager.add(rec, key)
        assert [(r["why"], r["compiles"]) for r in eager.to_dict()] == [("recompile_limit", 2)]
        for rank in ranks_reset:  # a reset, then f compiled afresh
            for rec in _compiles(["0/0"], rank):
                eager.add(rec, key)
        assert [r["why"] for r in eager.to_dict()] == ([] if ranks_reset == (0, 1) else ["recompile_limit"])


def test_a_failed_compile_then_the_frame_compiled_in_the_same_process_is_no_frame_left_in_eager() -> None:
    """A log does not say whether a failed compile was raised into the caller (``fullgraph=True``) or suppressed (the
    frame then runs in eager): where the same frame compiles later in that process, it runs compiled, and is not
    listed; a failure with nothing after it still is."""
    key = ("f", "/m.py", 1)
    for later in ([], ["0/1"]):
        eager = EagerFrames()
        for rec in _compiles(["0/0", *later], failed="0/0"):
            eager.add(rec, key)
        assert [r["why"] for r in eager.to_dict()] == ([] if later else ["failure"])
