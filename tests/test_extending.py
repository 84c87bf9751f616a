"""docs/extending.md as a user follows it: the example sink, installed as a package, gets every compile's record; the
example feature, installed as a package, puts its fact on every compile, live and on replay.

The example packages are taken from the doc as written (its ``title=`` code blocks), installed with pip into a fresh
virtual environment that sees this checkout's torch and torch-otel, and a real ``torch.compile`` runs under
``torch-otel run`` in it: the file the sink writes holds one record per compile, each the same compile as its root
span in the traces file (its trace id, its compile id). ``TORCH_OTEL_SINKS=none`` loads no sink, and a broken sink
package next to it is one counted error line while the good one still writes. The feature's event on each frame
compile's root span holds torch's own ``graph_op_count`` (the sink's record of the same compile), its counter and its
summary key agree, and ``torch-otel replay`` of the run's ``TORCH_TRACE`` gives the same; ``TORCH_OTEL_FEATURES=none``
loads none, and a broken feature package is one line while the good one still works.
"""

from __future__ import annotations

import json
import re
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import clean_env, otlp_value, read_otlp_json_spans, run_cli, run_python, spans_to_file

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


def _broken(kind: str, entry: str, body: str) -> dict[str, str]:
    """A package of one module, ``broken_<kind>``, whose entry point in the group ``torch_otel.<kind>s`` is ``entry``."""
    pyproject = (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "torch-otel-broken-{kind}"\nversion = "0.1.0"\n\n'
        f'[project.entry-points."torch_otel.{kind}s"]\nbroken = "{entry}"\n'
    )
    return {"pyproject.toml": pyproject, f"broken_{kind}.py": body}


BROKEN = _broken("sink", "broken_sink:make", "def make():\n    raise RuntimeError('this sink cannot start')\n")
BROKEN_FEATURE = _broken("feature", "broken_feature", "raise RuntimeError('this feature cannot load')\n")


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
    with the doc's example sink and feature, and a broken one of each, installed by pip."""
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
    assert sorted(files) == [
        "torch-otel-graph-size/graph_size.py",
        "torch-otel-graph-size/pyproject.toml",
        "torch-otel-jsonl-sink/jsonl_sink.py",
        "torch-otel-jsonl-sink/pyproject.toml",
    ], sorted(files)
    _write(root, files)
    _write(root / "torch-otel-broken-sink", BROKEN)
    _write(root / "torch-otel-broken-feature", BROKEN_FEATURE)
    for pkg in ("torch-otel-jsonl-sink", "torch-otel-broken-sink", "torch-otel-graph-size", "torch-otel-broken-feature"):
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


FEATURE_WORKLOAD = (
    WORKLOAD
    + """
import prometheus_client, torch_otel
torch_otel.force_flush()  # the worker has handled every compile: its counter stands at its total
print("\\n".join(ln for ln in prometheus_client.generate_latest().decode().splitlines() if ln.startswith("graph_size")))
"""
)


def _sizes(spans: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each frame compile's ``graph_size`` event on its root span: compile id -> (ops, size)."""
    out = {}
    for s in spans:
        if s["attrs"].get("torch.compile.kind") != "frame":
            continue
        for ev in s.get("events", []):
            if ev["name"] == "graph_size":
                attrs = {kv["key"]: otlp_value(kv["value"]) for kv in ev.get("attributes", [])}
                out[s["attrs"]["torch.compile.id"]] = (int(attrs["graph_size.ops"]), attrs["graph_size.size"])
    return out


def test_the_example_feature_installed_as_a_package_is_on_every_compile_live_and_on_replay(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FEATURE_WORKLOAD)
    trace, spans, summary = tmp_path / "trace", tmp_path / "spans.jsonl", tmp_path / "summary.json"
    env = {
        **spans_to_file(spans),
        "TORCH_TRACE": str(trace),
        "TORCH_OTEL_SUMMARY": str(summary),
        "COMPILES_FILE": str(tmp_path / "compiles.jsonl"),
        "TORCH_OTEL_SINKS": "jsonl",
        "TORCH_OTEL_FEATURES": "graph_size",
    }
    r = run_cli("run", "--", str(venv), "train.py", env=env, cwd=tmp_path, python=str(venv))
    assert r.returncode == 0 and "ran" in r.stdout, r.stdout + r.stderr
    records = [json.loads(line) for line in (tmp_path / "compiles.jsonl").read_text().splitlines()]
    ops = {c["id"]: c["torch_metrics"]["graph_op_count"] for c in records}
    assert sorted(ops) == ["0/0", "0/1", "0/2"] and all(n > 0 for n in ops.values()), ops
    live = _sizes(read_otlp_json_spans(spans))
    assert live == {cid: (n, "small") for cid, n in ops.items()}  # torch's own count, on the compile's root span
    assert json.loads(summary.read_text())["graph_size"] == {"small": 3}
    assert re.search(r'^graph_size_compiles_total\{[^}]*size="small"[^}]*\} 3\.0$', r.stdout, re.M), r.stdout
    # torch's log of the same run, replayed in the same environment: the same fact on the same compiles
    out, replayed = tmp_path / "replayed.jsonl", tmp_path / "replayed.json"
    r = run_cli("replay", str(trace), "-o", str(out), "--json", str(replayed), env={"TORCH_OTEL_FEATURES": "graph_size"},
                python=str(venv))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert _sizes(read_otlp_json_spans(out)) == live
    assert json.loads(replayed.read_text())["graph_size"] == {"small": 3}
    assert "graph sizes: 3 small" in r.stdout + r.stderr  # its line of the summary's text


def test_torch_otel_features_none_loads_none_and_a_broken_one_is_one_line_while_the_others_work(
    venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(WORKLOAD)
    spans, summary = tmp_path / "spans.jsonl", tmp_path / "summary.json"
    env = {**spans_to_file(spans), "TORCH_OTEL_SUMMARY": str(summary), "TORCH_OTEL_SINKS": "none"}
    r = run_cli("run", "--", str(venv), "train.py", env={**env, "TORCH_OTEL_FEATURES": "none"}, cwd=tmp_path, python=str(venv))
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr
    assert _sizes(read_otlp_json_spans(spans)) == {} and "graph_size" not in json.loads(summary.read_text())
    roots = [sp for sp in read_otlp_json_spans(spans) if sp["attrs"].get("torch.compile.kind") == "frame"]
    assert len(roots) == 3  # the bridge's own spans are all there
    spans.unlink()
    r = run_cli("run", "--", str(venv), "train.py", env=env, cwd=tmp_path, python=str(venv))  # every installed one
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr
    assert len(_sizes(read_otlp_json_spans(spans))) == 3  # the good feature works
    broken = [ln for ln in r.stderr.splitlines() if "this feature cannot load" in ln]
    assert len(broken) == 1 and "broken_feature" in broken[0], r.stderr


def test_register_takes_a_module_before_the_bridge_starts_and_says_what_to_do_after(tmp_path: Path) -> None:
    script = """
import torch_otel, torch_otel.features as features
for bad in ("not a module", 3):
    try:
        features.register(bad)
    except TypeError as e:
        print("TypeError:", e)
features.register("graph_size_here")
features.register("graph_size_here")  # twice is once
torch_otel.instrument()
try:
    features.register("another")
except RuntimeError as e:
    print("RuntimeError:", e)
from torch_otel._features.registry import features as loaded
print([f.name for f in loaded()])
"""
    (tmp_path / "graph_size_here.py").write_text(_doc_files()["torch-otel-graph-size/graph_size.py"])
    (tmp_path / "main.py").write_text(script)
    r = run_python(tmp_path / "main.py", {"PYTHONPATH": str(tmp_path), "TORCH_OTEL_FEATURES": "none"}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["TypeError", "TypeError", "RuntimeError"], r.stdout
    assert "register features before torch_otel.instrument()" in lines[2]
    assert lines[3] == "['cache_lookups', 'graph_calls', 'startup', 'graph_size']"


def test_doctor_names_each_feature_of_your_own_and_fails_on_one_that_cannot_load(venv: Path, tmp_path: Path) -> None:
    r = run_cli("doctor", "--json", str(tmp_path / "doctor.json"), python=str(venv))
    assert r.returncode == 1, r.stdout + r.stderr  # the broken feature: what the user installed does not load
    lines = r.stdout.splitlines()
    head = lines.index("Features of your own (torch_otel.features: installed packages, TORCH_OTEL_FEATURES):")
    assert lines[head + 1 :] == [
        "  no       broken_feature: cannot be imported: RuntimeError: this feature cannot load",
        "  yes      graph_size (graph_size)",
    ], r.stdout
    doc = json.loads((tmp_path / "doctor.json").read_text())
    assert [(f["module"], f["feature"], f["loaded"]) for f in doc["features"]] == [
        ("broken_feature", None, False),
        ("graph_size", "graph_size", True),
    ]
    r = run_cli("doctor", env={"TORCH_OTEL_FEATURES": "graph_size"}, python=str(venv))  # the good one alone
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "  yes      graph_size (graph_size)", r.stdout + r.stderr
