"""Graph calls under compiled autograd, live, against torch's own counts (``tests/workloads/ca_backward_calls.py``: a
small MLP, ``aot_eager`` on the CPU, batches 4, 4, 8, 8, 3 with a backward each, compiled autograd off and on).

``0/1`` (a dynamic batch) saves a size for its backward, so AOTAutograd compiles that backward with its forward; ``0/0``'s
compiles lazily, at its first call. Under compiled autograd neither runs as a graph of its own: compiled autograd
traces each AOT backward into its own graphs (the ``!N/...`` compiles), and a lazy backward never compiles. The run
summary listed ``0/1``'s backward as a graph that ran 0 times, a compile that never paid off (``dead``), and
``graphs`` counted one more than torch's ``unique_graphs``. Without compiled autograd both backwards are graphs of their
own, with their calls.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.helpers import GRAPH_CALLS_SPAN, WORKLOADS, read_otlp_json_spans, run_python

MODES = ("noca", "ca")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmps = {mode: tmp_path_factory.mktemp(mode) for mode in MODES}

    def one(mode: str) -> subprocess.CompletedProcess[str]:
        tmp = tmps[mode]
        env = {
            "TORCH_OTEL_SUMMARY": str(tmp / "live.json"),
            "TORCH_OTEL_TRACES_FILE": str(tmp / "spans.jsonl"),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
        }
        return run_python(WORKLOADS / "ca_backward_calls.py", env, args=[str(tmp), mode])

    with ThreadPoolExecutor(len(MODES)) as pool:  # two small processes at once
        done = dict(zip(MODES, pool.map(one, MODES), strict=True))
    out: dict[str, dict[str, Any]] = {}
    for mode, res in done.items():
        assert res.returncode == 0, res.stderr[-3000:]
        tmp = tmps[mode]
        out[mode] = {
            "torch": json.loads((tmp / "torch.json").read_text()),
            "live": json.loads((tmp / "live.json").read_text()),
            "spans": [s for s in read_otlp_json_spans(tmp / "spans.jsonl") if s["name"] == GRAPH_CALLS_SPAN],
        }
    return out


def _rows(part: dict[str, Any]) -> dict[tuple[str, str], int]:
    """Calls per (compile id, kind) over the graph-calls part's frames."""
    return {(g["id"], g["kind"]): g["calls"] for f in part["frames"] for g in f["graphs"]}


def _backward_calls(spans: list[dict[str, Any]]) -> list[int]:
    return sorted(
        int(s["attrs"]["torch.compile.graph.backward_calls"]) for s in spans if "torch.compile.graph.backward_calls" in s["attrs"]
    )


def test_without_compiled_autograd_each_backward_is_a_graph_with_its_calls(runs):
    t = runs["noca"]["torch"]
    part = t["graph_calls"]
    assert t["stats"]["unique_graphs"] == 2 and not t["compiled_autograd"]
    # 0/0 (batch 4) twice, 0/1 (dynamic batch: its backward compiled with it) three times; each backward as often
    assert _rows(part) == {("0/0", "frame"): 2, ("0/0", "backward"): 2, ("0/1", "frame"): 3, ("0/1", "backward"): 3}
    assert part["graphs"] == t["stats"]["unique_graphs"] + 2 and part["calls"] == 2 * t["steps"]
    assert part["dead"] == [] and part["ran_at_most"][0]["compiles"] == 0
    assert t["frames"] == [["0", "backward", t["steps"]], ["0", "forward", t["steps"]]]
    assert t["dead_compile_s"] == 0
    assert _backward_calls(runs["noca"]["spans"]) == [3]  # 0/1's, on its frame compile's span (0/0's has its own compile)
    exit_part = runs["noca"]["live"]["graph_calls"]  # the run summary written at exit: the same graphs and calls
    assert (_rows(exit_part), exit_part["graphs"], exit_part["dead"]) == (_rows(part), part["graphs"], [])


def test_under_compiled_autograd_no_aot_backward_is_listed_as_a_graph_that_never_ran(runs):
    t = runs["ca"]["torch"]
    part = t["graph_calls"]  # after the steps under compiled autograd
    rows = _rows(part)
    ca = {k: n for k, n in rows.items() if k[0].startswith("!")}
    # torch: the two frame compiles and compiled autograd's graphs (one per capture), no backward of its own
    assert part["graphs"] == t["stats"]["unique_graphs"] == 2 + t["compiled_autograd"]["captures"]
    assert {k: n for k, n in rows.items() if k not in ca} == {("0/0", "frame"): 2, ("0/1", "frame"): 3}
    assert len(ca) == t["compiled_autograd"]["captures"] and all(kind == "frame" for _, kind in ca)
    assert sum(ca.values()) == t["steps"]  # every backward() ran in one of compiled autograd's graphs
    assert part["calls"] == 2 * t["steps"]
    # no graph ran 0 times; the compiles that ran at most once are compiled autograd's (two of its graphs ran once)
    assert part["ran_at_most"][0]["compiles"] == 0
    assert {(r["id"], r["kind"]) for r in part["dead"]} == {k for k, n in ca.items() if n <= 1}
    (user,) = [f for f in part["frames"] if any(g["id"] == "0/0" for g in f["graphs"])]
    assert user["dead"] == 0 and user["calls"] == t["steps"]
    # the metrics: no backward series for the frame, and the dead compile seconds are compiled autograd's once-run graphs
    assert [r for r in t["frames"] if r[1] == "backward"] == []
    assert ["0", "forward", t["steps"]] in t["frames"]
    assert t["dead_compile_s"] == pytest.approx(sum(r["compile_s"] for r in part["dead"]), abs=1e-5)


def test_a_backward_compiled_under_compiled_autograd_that_then_runs_on_its_own_is_counted(runs):
    # after compiled autograd: batches 8 and 3, so 0/1 and the backward compiled with it run twice more
    live = runs["ca"]["live"]["graph_calls"]
    rows = _rows(live)
    assert rows[("0/1", "frame")] == 5 and rows[("0/1", "backward")] == 2
    assert ("0/0", "backward") not in rows  # never compiled: compiled autograd ran 0/0's backward
    assert live["ran_at_most"][0]["compiles"] == 0
    assert _backward_calls(runs["ca"]["spans"]) == [2]
