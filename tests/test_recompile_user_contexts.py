"""torch's CompilationMetrics fields read on real compiles: what the user's recompile hooks said.

The fast tier (tests/fast/test_compilation_metrics.py) checks that every field of every supported release is read or
said to be left out; inductor's kernel provenance is checked on the 3-rank job of tests/test_caches.py.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import WORKLOADS, read_otlp_json_spans, run_cli, run_python, spans_to_file
from torch_otel._sinks.summary_text import format_text

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)


def test_what_the_users_recompile_hooks_said_is_on_each_compile_and_beside_the_recompiles(tmp_path):
    """A hook says the step; the function recompiles at steps 1 and 2. Each compile's root span carries what torch
    recorded (its recompile_user_contexts); the summary counts them beside the recompiles, live and on replay."""
    env = {
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCH_OTEL_SUMMARY": str(tmp_path / "summary.json"),
        **spans_to_file(tmp_path / "spans.jsonl"),
    }
    res = run_python(WORKLOADS / "user_contexts.py", env, args=[str(tmp_path)], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    recorded = {m["id"]: m["contexts"] for m in json.loads((tmp_path / "torch-metrics.json").read_text())}
    assert recorded["0/1"] == ["step 1"] and recorded["0/2"] == ["step 2"], recorded
    roots = {
        s["attrs"]["torch.compile.id"]: s["attrs"]
        for s in read_otlp_json_spans(tmp_path / "spans.jsonl")
        if "torch.compile.kind" in s["attrs"]
    }
    for cid, contexts in recorded.items():
        said = roots[cid].get("torch.compile.recompile_user_contexts") or {"values": []}
        assert [v["stringValue"] for v in said["values"]] == contexts, (cid, roots[cid])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["recompiles"]["user_contexts"] == [{"context": "step 1", "count": 1}, {"context": "step 2", "count": 1}]
    assert "  your recompile hooks said: step 1 (1), step 2 (1)" in format_text(summary)
    replayed = run_cli(
        "replay", str(tmp_path / "trace"), "--json", str(tmp_path / "replayed.json"), "-o", str(tmp_path / "r.jsonl")
    )
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert (
        json.loads((tmp_path / "replayed.json").read_text())["recompiles"]["user_contexts"]
        == summary["recompiles"]["user_contexts"]
    )
    assert "your recompile hooks said: step 1 (1), step 2 (1)" in replayed.stdout
