"""The torch releases torch-otel supports: what each one has, and what the bridge says about one it was not tested on.

Marked ``release``: the matrix (noxfile.py) runs these on every supported release, with the live, replay and
activation tests.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import torch_otel
from tests.helpers import WORKLOADS, read_otlp_json_spans, run, run_cli, run_python, spans_to_file
from torch_otel._attach import points, releases
from torch_otel._capture import attach_table
from torch_otel._version import SUPPORTED_TORCH, TESTED_TORCH

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)

BIN = Path(sys.executable).parent


def test_this_release_has_every_attach_point_its_row_promises():
    """Each row of the sources table that names this release is there: the matrix's doctor report agrees."""
    rows = attach_table.survey()
    missing = [r["name"] for r in rows if r["expected"] and not r["present"]]
    assert not missing, (
        f"torch {torch.__version__} lacks {missing}: add a row for this release to torch_otel/_capture/attach_table.py (or the feature's module)"
    )
    r = run_cli("doctor", script=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "a tested release" in r.stdout and "MISSING" not in r.stdout


def test_doctor_says_in_a_users_words_what_works_on_this_torch_and_what_does_not(tmp_path):
    """Each row of ``torch-otel doctor`` is what the user gets and whether this torch gives it: no internal row id
    (``graph_calls_lazy_backward_2_10  not in this release`` was the row a user could not read: issue 49). ``--json``
    keeps the ids for the release matrix, beside the same words."""
    r = run_cli("doctor", "--json", str(tmp_path / "d.json"), script=True)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    table = lines[lines.index("What torch-otel captures on this torch:") + 1 :]
    ids = [s.name for s in attach_table.rows() if "_" in s.name]  # an id that is also a plain word (export) aside
    assert not [i for i in ids if re.search(rf"\b{i}\b", r.stdout)], r.stdout
    assert "not in this release" not in r.stdout
    doc = json.loads((tmp_path / "d.json").read_text())
    by_words = {row["says"]: row for row in doc["sources"]}
    assert {row["name"] for row in doc["sources"]} == {s.name for s in attach_table.rows()}  # the ids stay in the JSON
    shown = []
    for line in table:
        m = re.fullmatch(r"  (yes|no|MISSING) +(\S.*)", line)
        assert m is not None, line
        row = by_words[m.group(2)]
        assert row["status"] == m.group(1) and m.group(2).startswith(row["gives"]), (line, row)
        assert (m.group(1) == "yes") == (row["expected"] and row["present"]), (line, row)
        if m.group(1) == "no":  # by design: the releases that have it are named
            assert not row["expected"] and re.search(r"only on torch 2\.\d+", m.group(2)), line
        shown.append(row["name"])
    # every row is shown, but a variant whose work a row shown here does on this torch (one line per thing a user gets)
    hidden = [row for row in doc["sources"] if row["name"] not in shown]
    assert all(row["status"] == "covered" and row["variant"] for row in hidden), hidden
    assert all(any(s["gives"] == row["gives"] and s["name"] in shown for s in doc["sources"]) for row in hidden), hidden
    assert len(set(m.split("  ", 2)[-1] for m in table)) == len(table)  # no two lines alike


@pytest.mark.parametrize(
    "version,status",
    [
        (str(torch.__version__), "tested"),
        ("2.15.0+cu132", "tested"),
        ("2.10.0", "tested"),
        ("2.16.0.dev20261201+cpu", "newer"),
        ("3.0.0", "newer"),
        ("2.9.1+cu128", "older"),
        ("nonsense", "unknown"),
    ],
)
def test_a_release_outside_the_tested_ones_gets_one_line(version, status):
    assert releases.tested_status(version) == status
    line = releases.release_line(version)
    if status == "tested":
        assert line is None
        return
    assert line is not None and "\n" not in line
    assert SUPPORTED_TORCH in line
    if status == "newer":
        assert "best-effort" in line and TESTED_TORCH[-1] in line
    if status == "older":
        assert "older than the supported range" in line


def test_a_hook_this_torch_lacks_is_one_line_and_the_rest_is_captured(monkeypatch):
    """A release that lacks an attach point: the bridge names what it cannot give, once, and traces the rest.

    The row is one a later release could need: a function this torch does not have (torch's own functions are left
    as they are, since torch calls them).
    """
    import torch._dynamo.utils as du

    future = points.FunctionHook(
        "recompile_reasons_v2",
        "a hook of a release to come",
        "torch._dynamo.utils",
        attrs=(("a_function_this_torch_lacks", "_recompilation_reasons"),),
    )
    monkeypatch.setattr(attach_table, "CORE", (*attach_table.CORE, future))
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("torch_otel").addHandler(handler)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        torch_otel.instrument(provider, registry=None)
        torch._dynamo.config.automatic_dynamic_shapes = False
        fn = torch.compile(lambda x: x * 2, backend="eager")
        fn(torch.ones(2))
        fn(torch.ones(3))
        torch_otel.force_flush()
        torch_otel.uninstrument()
    finally:
        logging.getLogger("torch_otel").removeHandler(handler)
    lacking = [ln for ln in lines if "lacks what torch-otel attaches to" in ln]
    assert len(lacking) == 1 and "a hook of a release to come (recompile_reasons_v2)" in lacking[0], lines
    assert "\n" not in lacking[0] and lacking[0].startswith(f"torch {torch.__version__} lacks")
    roots = [s for s in exporter.get_finished_spans() if s.attributes and s.attributes.get("torch.compile.kind") == "frame"]
    assert sorted(s.attributes["torch.compile.id"] for s in roots) == ["0/0", "0/1"]
    recompile = next(s for s in roots if s.attributes["torch.compile.id"] == "0/1")
    assert recompile.attributes.get("torch.compile.recompile_reason")  # the rows this torch has still work
    assert not hasattr(du, "a_function_this_torch_lacks")  # nothing left behind where torch had nothing


# A torch newer than the tested releases: its distribution reads 2.99.0 (so opentelemetry-instrument's range check
# skips the instrumentor) and so does torch.__version__ (so the bridge's line says best effort).
NEWER = """
import sys, torch
torch.__version__ = "2.99.0"
f = torch.compile(lambda x: x.sin() + 1, backend="eager")
f(torch.randn(3))
print("done")
"""


@pytest.mark.parametrize("way", ["import", "opentelemetry-instrument", "torch-otel run"])
def test_a_newer_torch_is_traced_on_a_best_effort_basis_by_every_way_with_one_line(way, tmp_path):
    dist = tmp_path / "site" / "torch-2.99.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0\n")
    script = tmp_path / "newer.py"
    script.write_text(("import torch_otel.auto\n" if way == "import" else "") + NEWER)
    argv = {
        "import": [sys.executable, str(script)],
        "opentelemetry-instrument": [str(BIN / "opentelemetry-instrument"), sys.executable, str(script)],
        "torch-otel run": [str(BIN / "torch-otel"), "run", "--", sys.executable, str(script)],
    }[way]
    spans = tmp_path / "spans.jsonl"
    env = {**spans_to_file(spans), "PYTHONPATH": str(tmp_path / "site")}
    r = run(argv, env=env)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    ours = [ln for ln in r.stderr.splitlines() if ln.startswith("torch-otel:") and "lacks what torch-otel" not in ln]
    assert len(ours) == 1 and "torch 2.99.0 is newer than the newest release" in ours[0], r.stderr[-3000:]
    assert list(frame_roots_of(spans)) == ["0/0"]


def frame_roots_of(path: Path) -> dict[str, dict]:
    return {
        s["attrs"]["torch.compile.id"]: s for s in read_otlp_json_spans(path) if s["attrs"].get("torch.compile.kind") == "frame"
    }


def test_the_recompile_limit_is_an_error_root_on_this_release(tmp_path):
    """The most expensive silent failure: whatever this release words it as, the hit is an ERROR root."""
    spans = tmp_path / "spans.jsonl"
    r = run_python(WORKLOADS / "mixed.py", {**spans_to_file(spans), "WITH_BRIDGE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    roots = frame_roots_of(spans)
    hit = roots["3/2"]
    assert hit["status"]["code"] == 2  # ERROR
    assert hit["attrs"]["torch.compile.recompile_limit_exceeded"] is True
    assert "recompile limit exceeded" in hit["status"]["message"]


def test_what_this_release_is_documented_to_lack_is_said_once_as_the_bridge_arms():
    """On 2.10 (no cache counts in CompilationMetrics) one line names it; on the others, nothing is said."""
    documented = [
        s.name
        for s in attach_table.rows()
        if not s.variant and not releases.in_releases(str(torch.__version__), s.releases)  # a variant is never lacking
    ]
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("torch_otel").addHandler(handler)
    try:
        torch_otel.instrument(TracerProvider(), registry=None)
        torch.compile(lambda x: x - 1, backend="eager")(torch.ones(2))
        torch_otel.uninstrument()
        torch_otel.instrument(TracerProvider(), registry=None)  # a second bridge in the process: said once only
        torch_otel.uninstrument()
    finally:
        logging.getLogger("torch_otel").removeHandler(handler)
    lacking = [ln for ln in lines if "lacks what torch-otel attaches to" in ln]
    if not documented:
        assert lacking == [], lacking
        return
    assert len(lacking) == 1 and all(f"({name})" in lacking[0] for name in documented), lines
