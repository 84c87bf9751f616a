"""Nothing is paid until torch compiles: the zero-code ways arm the bridge as ``torch._dynamo`` is first imported.

Each test runs a real Python process the way a user would (``torch-otel run``, ``import torch_otel.auto``) and reads
what that process itself reports about its modules, threads and spans. No timing asserts: the costs are in bench/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_argv, own_lines, read_otlp_json_spans, run
from torch_otel._version import SUPPORTED_TORCH

BIN = Path(sys.executable).parent
QUIET = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}

# What the process says about itself at exit: which heavy modules are loaded, and which threads run.
REPORT = """
import atexit, sys, threading
def _report():
    heavy = ("torch", "torch._dynamo", "opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
             "grpc", "prometheus_client", "torch_otel._pipeline.bridge", "torch_otel._otel.providers")
    print("LOADED", ",".join(m for m in heavy if m in sys.modules) or "-")
    print("THREADS", ",".join(sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())) or "-")
    print("FINDERS", ",".join(type(f).__name__ for f in sys.meta_path if "torch_otel" in type(f).__module__) or "-")
atexit.register(_report)
"""


def _run(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    r = run(argv, env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _report(stdout: str) -> dict[str, set[str]]:
    out = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("LOADED", "THREADS", "FINDERS"):
            out[key] = set() if value == "-" else set(value.split(","))
    return out


def test_a_process_that_never_imports_torch_loads_no_torch_under_torch_otel_run():
    r = _run([str(BIN / "torch-otel"), "run", "--", sys.executable, "-c", REPORT + "import json; print('ok')"])
    got = _report(r.stdout)
    assert got["LOADED"] == set(), got  # no torch, no SDK, no exporter, no Prometheus client
    assert got["THREADS"] == set(), got
    assert got["FINDERS"] == {"_DynamoFinder"}  # only the post-import hook, waiting
    assert r.stderr == ""


@pytest.mark.parametrize("way", ["torch-otel run", "import"])
def test_a_process_that_imports_torch_and_never_compiles_has_no_dynamo_imported_by_the_bridge(way):
    script = REPORT + ("import torch_otel.auto\n" if way == "import" else "") + "import torch\nprint(torch.ones(2).sum())\n"
    argv = [sys.executable, "-c", script]
    if way == "torch-otel run":
        argv = [str(BIN / "torch-otel"), "run", "--", *argv]
    r = _run(argv)
    got = _report(r.stdout)
    assert "torch" in got["LOADED"]
    assert got["LOADED"] & {"torch._dynamo", "opentelemetry.sdk.trace", "grpc", "torch_otel._pipeline.bridge"} == set(), got
    assert got["THREADS"] == set(), got


def _compile_script(before: str, n_shapes: int = 2) -> str:
    return (
        REPORT
        + before
        + "import torch\n"
        + "torch._dynamo.config.automatic_dynamic_shapes = False\n"
        + "f = torch.compile(lambda x: x.sin() + 1, backend='eager')\n"
        + "".join(f"f(torch.randn({n + 1}))\n" for n in range(n_shapes))
        + "import torch_otel\nprint('INSTRUMENTED', torch_otel.is_instrumented())\n"
        + "import torch._dynamo as d\nprint('LOADER', type(d.__loader__).__name__, type(d.__spec__.loader).__name__)\n"
    )


@pytest.mark.parametrize("capture", ["default", "full"])
@pytest.mark.parametrize(
    "order",
    ["bridge first", "torch imported before the bridge", "torch._dynamo imported before the bridge", "torch-otel run"],
)
def test_the_first_compile_is_captured_whatever_was_imported_first(tmp_path, order, capture):
    spans_file = tmp_path / "spans.jsonl"
    before = {
        "bridge first": "import torch_otel.auto\n",
        "torch imported before the bridge": "import torch\nimport torch_otel.auto\n",
        "torch._dynamo imported before the bridge": (
            "import torch._dynamo\nimport torch_otel, torch_otel.auto\nprint('ARMED AT IMPORT', torch_otel.is_instrumented())\n"
        ),
        "torch-otel run": "",
    }[order]
    argv = [sys.executable, "-c", _compile_script(before)]
    if order == "torch-otel run":
        argv = [str(BIN / "torch-otel"), "run", "--", *argv]
    r = _run(argv, {**QUIET, "TORCH_OTEL_TRACES_FILE": str(spans_file), "TORCH_OTEL_CAPTURE": capture})
    assert "INSTRUMENTED True" in r.stdout
    if order == "torch._dynamo imported before the bridge":
        assert "ARMED AT IMPORT True" in r.stdout  # nothing to wait for: armed at once
    got = _report(r.stdout)
    assert got["FINDERS"] == set()  # the hook removed itself ...
    assert "LOADER SourceFileLoader SourceFileLoader" in r.stdout  # ... and left torch._dynamo's loader as it was
    spans = read_otlp_json_spans(spans_file)
    roots = {s["attrs"]["torch.compile.id"]: s for s in spans if s["attrs"].get("torch.compile.kind") == "frame"}
    assert set(roots) == {"0/0", "0/1"}, sorted(roots)
    first = roots["0/0"]
    children = [s for s in spans if s.get("parentSpanId") == first["spanId"]]
    # each graph's calls are counted (by default, and at full capture): their span, written at exit, is the root's
    # child beside its phase
    assert [c["name"] for c in children] == ["entire_frame_compile", "torch.compile.graph_calls"], [c["name"] for c in children]
    events = {e["name"] for e in first.get("events", [])}
    if capture == "full":  # the first compile's structured-trace records too (torch resets its loggers as it starts)
        assert any(name.startswith("torch.compile.artifact") for name in events), events
    assert not own_lines(r.stderr), r.stderr[-2000:]


def test_bad_settings_are_reported_once_at_arming_and_not_by_a_process_that_never_compiles():
    env = {**QUIET, "TORCH_OTEL_CAPTURE": "everything", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}
    idle = _run([str(BIN / "torch-otel"), "run", "--", sys.executable, "-c", "import torch"], env)
    assert not own_lines(idle.stderr), idle.stderr[-2000:]
    busy = _run([str(BIN / "torch-otel"), "run", "--", sys.executable, "-c", _compile_script("")], env)
    ours = own_lines(busy.stderr)
    assert len(ours) == 1 and "TORCH_OTEL_CAPTURE='everything'" in ours[0], ours
    assert "INSTRUMENTED True" in busy.stdout


def test_uninstrument_cancels_an_arming_that_is_still_waiting():
    script = REPORT + "import torch_otel.auto, torch_otel\ntorch_otel.uninstrument()\nimport torch._dynamo\n"
    script += "print('INSTRUMENTED', torch_otel.is_instrumented())\n"
    r = _run([sys.executable, "-c", script], QUIET)
    assert "INSTRUMENTED False" in r.stdout
    assert _report(r.stdout)["FINDERS"] == set()


def test_version_prints_torch_otels_and_torchs_versions_without_importing_torch():
    import torch

    import torch_otel

    for argv in (cli_argv("--version", script=True), cli_argv("--version")):
        r = _run(argv)
        assert r.stdout.strip().startswith(f"torch-otel {torch_otel.__version__} (torch {torch.__version__}"), r.stdout
        assert f"tested: {SUPPORTED_TORCH}" in r.stdout and "a tested release" in r.stdout
