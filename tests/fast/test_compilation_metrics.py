"""Fast tier: every field of torch's CompilationMetrics, in every supported release, is read or said to be left out.

The fields of each release (tests/data/compilation-metrics/fields-<release>.txt) were read from that release's
wheel, torch/_dynamo/utils.py; no torch is imported here. A field is read when the package's table of what it
reads names it (torch_otel/_model/compilation_metrics.py) and the code that reads it names it too; else
docs/span-model.md's "CompilationMetrics fields left out" names it, with why.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import torch_otel
from torch_otel._model import compilation_metrics
from torch_otel._model.compilation_metrics import READ, compile_on_one_rank, kernel_sources, user_contexts

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "compilation-metrics"
RELEASES = sorted(p.name[len("fields-") : -len(".txt")] for p in DATA.glob("fields-*.txt"))


def _fields(release: str) -> list[str]:
    return (DATA / f"fields-{release}.txt").read_text().split()


def _left_out(doc: str | None = None) -> set[str]:
    """The fields docs/span-model.md names in its "CompilationMetrics fields left out" table (first column)."""
    text = doc if doc is not None else (ROOT / "docs" / "span-model.md").read_text()
    section = text.split("## CompilationMetrics fields left out", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2 and "`" in cells[1]:
            names |= set(re.findall(r"`([a-z0-9_]+)`", cells[1]))
    return names


def _named_in_code() -> set[str]:
    """Every string the package's code names, the table of what it reads left out (it must not vouch for itself)."""
    names: set[str] = set()
    table = Path(compilation_metrics.__file__).resolve()
    for path in Path(torch_otel.__file__).resolve().parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        skip: set[int] = set()
        if path.resolve() == table:
            for node in ast.walk(tree):
                if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "READ":
                    skip |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                names.add(node.value)
            if isinstance(node, ast.JoinedStr) and id(node) not in skip:  # f"{prefix}_{location}_cache_{result}_count"
                names.add("".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values))
    return names


def test_the_field_lists_of_every_supported_release_are_here():
    assert RELEASES == ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
    assert len(_fields("2.10.0")) == 92 and len(_fields("2.13.0")) == len(_fields("2.15.0")) == 99


@pytest.mark.parametrize("release", RELEASES)
def test_every_field_of_the_release_is_read_or_said_to_be_left_out(release):
    left_out = _left_out()
    neither = [f for f in _fields(release) if f not in READ and f not in left_out]
    assert neither == [], f"torch {release}: read these or name them in docs/span-model.md's left-out table: {neither}"


def test_no_field_is_both_read_and_left_out_and_none_is_a_stale_name():
    every = {f for r in RELEASES for f in _fields(r)}
    left_out = _left_out()
    assert set(READ) & left_out == set()
    assert set(READ) - every == set() and left_out - every == set()


def test_every_field_said_to_be_read_is_named_by_the_code_that_reads_it():
    named = _named_in_code()
    patterns = [re.compile("^" + re.escape(n).replace(r"\*", r"[a-z_]+") + "$") for n in named if "*" in n]
    unread = [f for f in READ if f not in named and not any(p.match(f) for p in patterns)]
    assert unread == [], f"the table says these are read, and no code names them: {unread}"


def test_the_check_finds_a_field_that_is_neither():
    doc = "## CompilationMetrics fields left out\n\n| fields | why |\n|---|---|\n| `frame_key` | bookkeeping |\n"
    assert "frame_key" in _left_out(doc)
    assert [f for f in ["frame_key", "a_new_field", "co_name"] if f not in READ and f not in _left_out(doc)] == ["a_new_field"]


def test_the_fields_read_by_their_helpers():
    """compiler_config (torch 2.15's compile_on_one_rank), recompile_user_contexts, inductor_provenance: as torch writes
    them (the provenance's stacks are torch's traceback text; only file, line and function are kept)."""
    config = '{"cache_key_tag": "", "compile_on_one_rank": true, "dynamic_sources": ""}'
    assert compile_on_one_rank({"compiler_config": config})
    assert not compile_on_one_rank({"compiler_config": config.replace("true", "false")}) and not compile_on_one_rank({})
    assert user_contexts({"recompile_user_contexts": {"epoch 3", "shard 1"}}) == ["epoch 3", "shard 1"]
    stack = '  File "/src/train.py", line 5, in <lambda>\n    f = torch.compile(lambda x: torch.relu(x) * 2)\n'
    prov = {json.dumps({"cpp_fused_mul_relu_0:1": [stack]})}
    assert kernel_sources({"inductor_provenance": prov}) == [("cpp_fused_mul_relu_0:1", "/src/train.py", 5, "<lambda>")]
