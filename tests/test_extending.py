"""docs/extending.md as a user follows it: the example sink, installed as a package, gets every compile's record.

The example package is taken from the doc as written (its ``title=`` code blocks), installed with pip into a fresh
virtual environment that sees this checkout's torch and torch-otel, and a real ``torch.compile`` runs under
``torch-otel run`` in it: the file the sink writes holds one record per compile, each the same compile as its root
span in the traces file (its trace id, its compile id). ``TORCH_OTEL_SINKS=none`` loads no sink, and a broken sink
package next to it is one counted error line while the good one still writes.
"""

from __future__ import annotations

import json
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env, read_otlp_json_spans, run_cli, spans_to_file

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "extending.md"

WORKLOAD = """
import torch

def scale(x):
    return x * 2 + 1

torch._dynamo.config.automatic_dynamic_shapes = False
f = torch.compile(scale, backend="eager")
for n in (2, 3, 3, 4):
    f(torch.ones(n))
print("ran")
"""

BROKEN = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "torch-otel-broken-sink"
version = "0.1.0"

[project.entry-points."torch_otel.sinks"]
broken = "broken_sink:make"
""",
    "broken_sink.py": "def make():\n    raise RuntimeError('this sink cannot start')\n",
}


def _doc_files() -> dict[str, str]:
    """The doc's example package: each code block with a ``title=`` (its path), as written."""
    text = DOC.read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r'```\w+ title="([^"]+)"\n(.*?)```', text, re.S)}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment that sees this checkout's torch and torch-otel (a .pth file: torch is not copied),
    with the doc's example sink and a broken one installed by pip."""
    root = tmp_path_factory.mktemp("extending")
    # the user's own steps (a venv, pip): not the bridge's commands
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    purelib = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           text=True).strip())  # fmt: skip
    # an ``import`` line: the checkout's site directories with their own .pth files (torch-otel's editable install)
    dirs = ", ".join(repr(d) for d in site.getsitepackages())
    (purelib / "checkout.pth").write_text(f"import site; list(map(site.addsitedir, ({dirs},)))\n", encoding="utf-8")
    files = _doc_files()
    assert sorted(files) == ["torch-otel-jsonl-sink/jsonl_sink.py", "torch-otel-jsonl-sink/pyproject.toml"], sorted(files)
    _write(root, files)
    _write(root / "torch-otel-broken-sink", BROKEN)
    for pkg in ("torch-otel-jsonl-sink", "torch-otel-broken-sink"):
        r = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(root / pkg)],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env({"PIP_NO_INDEX": "1"}),
        )
        assert r.returncode == 0, r.stdout + r.stderr
    return python


def test_the_example_sink_installed_as_a_package_gets_every_compile_under_torch_otel_run(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(WORKLOAD)
    out, spans = tmp_path / "compiles.jsonl", tmp_path / "spans.jsonl"
    env = {**spans_to_file(spans), "COMPILES_FILE": str(out), "TORCH_OTEL_SINKS": "jsonl"}
    r = run_cli("run", "--", str(venv), "train.py", env=env, cwd=tmp_path, python=str(venv))
    assert r.returncode == 0 and "ran" in r.stdout, r.stdout + r.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(c["schema_version"], c["kind"], c["id"], c["status"]) for c in records] == [
        (1, "frame", "0/0", "ok"),
        (1, "frame", "0/1", "ok"),
        (1, "frame", "0/2", "ok"),
    ]
    assert {c["function"] for c in records} == {"scale"} and all(c["phases"] for c in records)
    assert [c["recompile_reason"] is None for c in records] == [True, False, False]
    roots = {s["traceId"]: s for s in read_otlp_json_spans(spans) if "torch.compile.kind" in s["attrs"]}
    for c in records:  # the same compile as its root span: its trace, its id, its duration
        root = roots[c["trace_id"]]
        assert root["spanId"] == c["span_id"] and root["attrs"]["torch.compile.id"] == c["id"]
        assert root["attrs"]["torch.compile.duration_s"] == pytest.approx(c["duration_s"], abs=1e-6)


def test_torch_otel_sinks_none_loads_no_sink_and_a_broken_one_is_one_line_while_the_others_write(
    venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(WORKLOAD)
    out = tmp_path / "compiles.jsonl"
    env = {**spans_to_file(tmp_path / "spans.jsonl"), "COMPILES_FILE": str(out)}
    r = run_cli("run", "--", str(venv), "train.py", env={**env, "TORCH_OTEL_SINKS": "none"}, cwd=tmp_path, python=str(venv))
    assert r.returncode == 0 and "ran" in r.stdout and not out.exists(), r.stderr
    r = run_cli("run", "--", str(venv), "train.py", env=env, cwd=tmp_path, python=str(venv))  # every installed one
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr
    assert len(out.read_text().splitlines()) == 3  # the good sink wrote every compile
    broken = [ln for ln in r.stderr.splitlines() if "this sink cannot start" in ln]
    assert len(broken) == 1 and "sink broken" in broken[0], r.stderr
