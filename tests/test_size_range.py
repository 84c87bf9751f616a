"""A size of 1 after automatic dynamic shapes made the dimension dynamic, live and on replay of the same run's
``TORCH_TRACE`` log, against torch's own record (``tests/workloads/size_range.py``, one small CPU run).

torch's reason for the size-1 recompile is a range guard, ``2 <= x.size()[1]``: the dynamic graph holds the sizes 2 and
up, and torch specializes sizes 0 and 1. The frame's row reads it (its guard line names the input, the dim and the
range), and its hint is the size-0/1 rule, not "new sizes compile no more; nothing to fix".
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import WORKLOADS, live_and_replayed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return live_and_replayed(WORKLOADS / "size_range.py", tmp_path_factory.mktemp("size1"), "size1")


def test_torch_recompiled_size_1_for_the_dynamic_graphs_range(run):
    reasons = [r["recompile_reason"] for r in run["torch"]["records"]]
    assert len(reasons) == 3 and reasons[0] is None, reasons
    assert reasons[1] == "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 16"
    assert reasons[2].startswith("0/1: 2 <= x.size()[1]  #"), reasons[2]


@pytest.mark.parametrize("how", ["live", "replay"])
def test_the_row_names_the_range_guard_and_the_size_0_or_1_rule(run, how):
    (row,) = [r for r in run[how]["recompiling_frames"] if r["function"] == "f"]
    assert (row["compiles"], row["recompiles"]) == (3, 2)
    assert [g["line"] for g in row["guards"]] == [
        "dim 1 of input 'x' took 2 values: 8, 16",
        "dim 1 of input 'x': a size of 0 or 1 fell below the dynamic graph's range 2.. (torch specializes sizes 0 and 1)",
    ]
    assert row["fixes"] == [] and all(h["fix"] is None for h in row["hints"])
    first = row["hints"][0]
    assert first["guard"] == row["guards"][1]["line"]
    assert first["why"].startswith("torch specializes sizes 0 and 1: dim 1 of 'x' took a size of 0 or 1")
    assert first["why"].endswith("no hint is given") and row["unclear"] == first["why"]
    assert not any("nothing to fix" in h["why"] for h in row["hints"]), row["hints"]
    assert row["stopped_by"].startswith("automatic dynamic shapes made a dimension dynamic, then a size of 0 or 1"), row
