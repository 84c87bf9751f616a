"""The bridge next to torch's own logging: stderr, TORCH_LOGS, TORCH_TRACE and tlparse."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from tests.helpers import (
    WORKLOADS,
    normalize_stderr,
    own_lines,
    read_otlp_json_spans,
    recompile_limit_fail_type,
    run_python,
    span_compile_ids,
    tlparse_compile_ids,
)
from torch_otel._sinks.near_limit import NEAR_LIMIT_WORDS


def _torchs_lines(stderr: str) -> list[str]:
    """torch's lines of a bridged run: the bridge adds one of its own, for mixed.py's frame near the recompile limit."""
    ours = [ln for ln in normalize_stderr(stderr) if NEAR_LIMIT_WORDS in ln]
    assert len(ours) == 1 and ours[0].startswith("torch-otel: WARNING: shift ("), ours
    return [ln for ln in normalize_stderr(stderr) if ln not in ours]


BRIDGE_ENV = {"WITH_BRIDGE": "1", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}


def test_stderr_is_unchanged_by_the_bridge(tmp_path):
    plain = run_python(WORKLOADS / "mixed.py")
    bridged = run_python(WORKLOADS / "mixed.py", {**BRIDGE_ENV, "TORCH_OTEL_TRACES_FILE": str(tmp_path / "s.jsonl")})
    assert plain.returncode == 0 and bridged.returncode == 0, bridged.stderr[-2000:]
    assert _torchs_lines(bridged.stderr) == normalize_stderr(plain.stderr)
    assert bridged.stdout == plain.stdout
    assert "recompile_limit" in plain.stderr, "torch's own warning is still there"
    assert (tmp_path / "s.jsonl").stat().st_size > 0


def test_the_bridges_own_lines_are_those_with_its_prefix_even_from_a_folder_named_torch_otel(tmp_path):
    """Run from a folder named torch-otel (what `git clone` makes), torch's warnings and tracebacks hold that name in
    their paths: the lines the bridge adds are exactly those that begin with its prefix (docs/guarantees.md), and no
    line of torch's does (issue 49)."""
    folder = tmp_path / "torch-otel"
    folder.mkdir()
    script = folder / "mixed.py"
    shutil.copy(WORKLOADS / "mixed.py", script)
    bad = {"TORCH_OTEL_CAPTURE_PAYLOADS": "maybe"}  # a setting the bridge warns about, in one line
    plain = run_python(script, bad, cwd=folder)
    bridged = run_python(script, {**BRIDGE_ENV, **bad, "TORCH_OTEL_TRACES_FILE": str(tmp_path / "s.jsonl")}, cwd=folder)
    assert plain.returncode == 0 and bridged.returncode == 0, bridged.stderr[-2000:]
    assert str(folder) in plain.stderr  # torch's own lines name the folder: what a substring test took for the bridge's
    assert not own_lines(plain.stderr), plain.stderr[-3000:]
    added = Counter(normalize_stderr(bridged.stderr)) - Counter(normalize_stderr(plain.stderr))
    assert sorted(added.elements()) == sorted(own_lines(bridged.stderr)), (added, own_lines(bridged.stderr))
    assert len(added) == 2, added  # the bad setting, and mixed.py's frame near the recompile limit


def test_torch_logs_graph_breaks_still_printed(tmp_path):
    env = {"TORCH_LOGS": "graph_breaks,recompiles"}
    plain = run_python(WORKLOADS / "mixed.py", env)
    bridged = run_python(WORKLOADS / "mixed.py", {**env, **BRIDGE_ENV, "TORCH_OTEL_TRACES_FILE": str(tmp_path / "s.jsonl")})
    assert "Graph break in user code" in plain.stderr
    assert _torchs_lines(bridged.stderr) == normalize_stderr(plain.stderr)
    spans = read_otlp_json_spans(tmp_path / "s.jsonl")
    assert any(e["name"] == "torch.compile.graph_break" for s in spans for e in s.get("events", []))


@pytest.mark.parametrize("capture", ["default", "full"])
def test_torch_trace_still_written_and_compile_ids_match_tlparse(tmp_path, capture):
    trace_dir = tmp_path / "trace"
    spans_file = tmp_path / "spans.jsonl"
    res = run_python(
        WORKLOADS / "mixed.py",
        {
            **BRIDGE_ENV,
            "TORCH_TRACE": str(trace_dir),
            "COMPILED_AUTOGRAD": "1",
            "TORCH_OTEL_CAPTURE": capture,
            "TORCH_OTEL_TRACES_FILE": str(spans_file),
        },
    )
    assert res.returncode == 0, res.stderr[-3000:]
    logs = list(trace_dir.glob("*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 10_000, "TORCH_TRACE still gets its log"
    roots = [s for s in read_otlp_json_spans(spans_file) if "torch.compile.kind" in s["attrs"]]
    assert span_compile_ids(roots) == tlparse_compile_ids(logs[0], tmp_path / "tl_out")
    kinds = {r["attrs"]["torch.compile.kind"] for r in roots}
    assert kinds == {"frame", "backward", "compiled_autograd"}
    failed = [r for r in roots if r.get("status", {}).get("code") == 2]  # OTLP/JSON: STATUS_CODE_ERROR
    assert {r["attrs"]["error.type"] for r in failed} == {"TorchRuntimeError", recompile_limit_fail_type()}


@pytest.mark.release
@pytest.mark.parametrize("capture", ["default", "full"])
@pytest.mark.parametrize("mode", ["dict_config", "disable"])
def test_an_applications_own_logging_set_up_loses_no_graph_break(tmp_path, mode, capture):
    """An application's logging set-up after torch is imported: logging.config.dictConfig disables torch's loggers
    (its default disable_existing_loggers=True), and logging.disable(WARNING) holds every logger's debug records. The
    records the bridge reads from them were dropped before its handler: a graph break torch counted was missing from
    the trace (at full capture, the backward's whole compile too). Where the bridge's handler is a logger's only
    reader, the bridge lets them through as each compile starts: every graph break torch counted is on the trace, and
    the bridge says nothing. torch prints nothing new."""
    spans = tmp_path / "spans.jsonl"
    env = {"TORCH_OTEL_CAPTURE": capture, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    env["TORCH_OTEL_TRACES_FILE"] = str(spans)
    res = run_python(WORKLOADS / "user_logging.py", env, args=[mode, str(tmp_path / "c")])
    assert res.returncode == 0, res.stderr[-3000:]
    torchs = json.loads((tmp_path / "c").read_text())["graph_breaks"]
    got = read_otlp_json_spans(spans)
    kinds = sorted(s["attrs"]["torch.compile.kind"] for s in got if "torch.compile.kind" in s["attrs"])
    breaks = [e for s in got for e in s.get("events", []) if e["name"] == "torch.compile.graph_break"]
    assert torchs >= 1 and len(breaks) == torchs, (torchs, breaks)
    assert kinds.count("backward") == kinds.count("frame") == 2, kinds  # two graphs (the break), each with its backward
    # the bridge says nothing (but, on 2.10, the line it says on every run: what the release lacks)
    assert not [ln for ln in own_lines(res.stderr) if " lacks what torch-otel attaches to " not in ln], res.stderr[-3000:]
    assert "Graph break" not in res.stderr


@pytest.mark.parametrize(("mode", "says"), [("dict_config", "is disabled (logging.config.dictConfig"),
                                            ("disable", "is held by logging.disable(WARNING)")])  # fmt: skip
def test_an_applications_logging_set_up_over_torch_logs_says_in_one_line_what_the_bridge_cannot_see(tmp_path, mode, says):
    """TORCH_LOGS=graph_breaks sends torch's graph-break records to torch's own handler too, and the application then
    silences them (dictConfig, logging.disable): letting them through would print torch's lines the application
    silenced, so the bridge leaves them, and says once, in its own line (its logger, disabled by dictConfig too,
    speaks for this), what it does not see and the fix."""
    env = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "TORCH_LOGS": "graph_breaks"}
    res = run_python(WORKLOADS / "user_logging.py", env, args=[mode, str(tmp_path / "c")])
    assert res.returncode == 0, res.stderr[-3000:]
    said = own_lines(res.stderr)
    assert len(said) == 1 and says in said[0] and "graph-break events" in said[0], res.stderr[-3000:]
    assert "Graph break" not in res.stderr  # torch's own lines stay as the application left them: silenced
