"""The package as a user meets it: README commands, the demo, settings, the public surface."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import read_otlp_json_spans, run_python

import torch_otel
from torch_otel import load_settings

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = [b.strip() for b in re.findall(r"```sh\n(.*?)\n\s*```", readme, re.S)]
    assert len(blocks) >= 2
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [blocks[1].strip()]
    assert "torch==2.13.0" in blocks[0] and "torch-otel demo" in blocks[0]


def test_demo_shows_traces_and_serves_metrics(tmp_path):
    res = run_python(
        "-m", args=["torch_otel", "demo", "--metrics-port", "0", "--traces-file", str(tmp_path / "d.jsonl")], cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "graph break [GB0025]" in out
    assert "recompile: tensor 'x' size mismatch at index 0. expected 8, actual 16" in out
    assert "ERROR: recompile limit exceeded: shift now runs in eager" in out
    assert re.search(r"torch_compile_recompile_limit_hits_total\{rank=\"0\"\} 1\.0", out)
    assert re.search(r"torch_compile_graph_breaks_total\{rank=\"0\",reason=\"GB0025\"\} 2\.0", out)
    spans = read_otlp_json_spans(tmp_path / "d.jsonl")
    roots = [s for s in spans if "torch.compile.kind" in s["attrs"]]
    assert len(roots) == 13 and len({s["traceId"] for s in roots}) == 13


def test_bad_settings_are_one_line_each_and_fall_back():
    s = load_settings(
        {
            "TORCH_OTEL_CAPTURE": "everything",
            "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH": "-5",
            "TORCH_OTEL_REDACT_PATHS": "maybe",
            "TORCH_OTEL_MAX_OPEN_COMPILES": "lots",
        },
        report=False,
    )
    assert (s.capture, s.attribute_max_length, s.redact_paths, s.max_open_compiles) == ("default", 4096, False, 256)
    assert len(s.problems) == 4
    for p in s.problems:
        assert "\n" not in p and p.startswith("TORCH_OTEL_") and "use " in p


def test_bad_env_at_import_never_raises(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import torch_otel.auto\nimport torch\nprint(torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1)))\n"
    )
    res = run_python(
        script,
        {
            "TORCH_OTEL_CAPTURE": "bogus",
            "OTEL_TRACES_EXPORTER": "zipkin,console",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon",
        },
    )
    assert res.returncode == 0 and "tensor([2.])" in res.stdout
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("torch-otel:")]
    assert any("TORCH_OTEL_CAPTURE='bogus'" in w for w in warnings)
    assert any("OTEL_TRACES_EXPORTER" in w and "zipkin" in w for w in warnings)
    assert "Traceback" not in res.stderr
    assert '"name": "torch.compile"' in res.stdout or "torch.compile" in res.stdout  # console exporter printed the span


def test_sdk_disabled_turns_everything_off(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch_otel.auto, torch_otel\nprint('on' if torch_otel.is_instrumented() else 'off')\n")
    res = run_python(script, {"OTEL_SDK_DISABLED": "true"})
    assert res.stdout.strip() == "off"


def test_public_surface():
    assert set(torch_otel.__all__) >= {"instrument", "uninstrument", "shutdown", "force_flush", "__version__"}
    assert (Path(torch_otel.__file__).parent / "py.typed").exists()
    assert sys.modules["torch_otel"].__version__ == torch_otel.__version__


def test_every_torch_otel_variable_is_documented_in_the_readme_table():
    used = set()
    for path in (ROOT / "torch_otel").rglob("*.py"):
        used |= set(re.findall(r"TORCH_OTEL_[A-Z_]+[A-Z]", path.read_text()))
    table = {m for m in re.findall(r"^\| `(TORCH_OTEL_[A-Z_]+)` \|", (ROOT / "README.md").read_text(), re.M)}
    assert used <= table, sorted(used - table)


def test_every_test_the_guarantees_section_names_exists():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## What torch-otel guarantees", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`", section)
    assert len(named) >= 25
    for file, test in named:
        assert re.search(rf"^def {test}\(", (ROOT / "tests" / file).read_text(), re.M), f"{file}::{test}"
