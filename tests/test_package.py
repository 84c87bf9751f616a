"""The package as a user meets it: README commands and docs, the demo, settings, the public surface."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch_otel
from tests.helpers import assert_summary_is_the_spans, read_otlp_json_spans, run_python
from tests.readme_demo import mismatches, readme_block
from torch_otel import load_settings

ROOT = Path(__file__).resolve().parent.parent


# .ci/run's one line before the README's command: from a checkout whose path lacks "torch-otel", a clone of its HEAD in
# a temporary folder of that name (the name `git clone` gives a user's checkout; the suite must pass from it)
CI_FROM_A_CLONE_NAMED_TORCH_OTEL = (  # all may read it (a test runs the demo as nobody); removed when the run ends
    '[[ $PWD == *torch-otel* ]] || { tmp=$(mktemp -d) && trap \'rm -rf "$tmp"\' EXIT && chmod 755 "$tmp" && '
    "clone=$tmp/torch-otel && "
    'git clone --quiet "$PWD" "$clone" && cd "$clone"; }'
)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = [b.strip() for b in re.findall(r"```sh\n(.*?)\n\s*```", readme, re.S)]
    assert len(blocks) >= 2
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [CI_FROM_A_CLONE_NAMED_TORCH_OTEL, blocks[1].strip()]
    assert "torch==2.13.0" in blocks[0] and "torch-otel demo" in blocks[0]


def _where_ci_runs(checkout: Path, tmp: Path) -> list[str]:
    """.ci/run as it stands in ``checkout``, its last line (the README's command) swapped for one that prints where it
    would run and that folder's commit."""
    lines = (checkout / ".ci" / "run").read_text().rstrip("\n").splitlines()
    probe = checkout / ".ci" / "where"
    probe.write_text("\n".join([*lines[:-1], 'echo "$PWD"; git rev-parse HEAD']) + "\n")
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "CI": "true"}
    r = subprocess.run(["bash", str(probe)], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_ci_runs_from_a_checkout_whose_path_holds_torch_otel_as_a_users_clone_does(tmp_path):
    """A user's `git clone` makes a folder named torch-otel, and paths holding that name are printed by torch into
    the lines the tests read (issue 49). CI, given a checkout elsewhere, runs from a clone of it named so."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    plain = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(plain)], check=True, timeout=300)
    assert "torch-otel" not in str(plain)
    where, commit = _where_ci_runs(plain, tmp_path / "tmp")
    assert Path(where).name == "torch-otel" and Path(where).parent.parent == tmp_path / "tmp", where
    assert commit == head
    assert list((tmp_path / "tmp").iterdir()) == []  # the clone, with what it built, is gone when the run ends
    named = tmp_path / "torch-otel"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(named)], check=True, timeout=300)
    assert _where_ci_runs(named, tmp_path / "tmp") == [str(named), head]  # already such a path: run where it is


def test_demo_shows_traces_and_serves_metrics(tmp_path):
    """The demo on a busy port and with an OTEL_* setting it does not use: it says what it does about each."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run_python(
            "-m",
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"},
            args=[
                "torch_otel",
                "demo",
                "--metrics-port",
                str(port),
                "--traces-file",
                str(tmp_path / "out" / "d.jsonl"),  # missing parent directories are created (README, demo --help)
                "--json",
                str(tmp_path / "out" / "json" / "summary.json"),
            ],
            cwd=tmp_path,
        )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert f"port {port} is busy: serving metrics on a free port instead (pass --metrics-port PORT to choose)" in out
    assert "OTEL_EXPORTER_PROMETHEUS_PORT" not in res.stderr  # the demo's own option is named, not a variable it ignores
    assert "ignores OTEL_EXPORTER_OTLP_PROTOCOL" in out
    assert "hits torch's recompile limit on purpose" in out
    assert "graph break [GB0025]" in out
    assert "recompile: tensor 'x' size mismatch at index 0. expected 8, actual 16" in out
    assert "ERROR: recompile limit exceeded: shift now runs in eager" in out
    assert re.search(r"torch_compile_recompile_limit_hits_total\{rank=\"0\"\} 1\.0", out)
    assert re.search(r"torch_compile_graph_breaks_total\{rank=\"0\",reason=\"GB0025\"\} 2\.0", out)
    spans = read_otlp_json_spans(tmp_path / "out" / "d.jsonl")
    roots = [s for s in spans if "torch.compile.kind" in s["attrs"]]
    assert len(roots) == 13 and len({s["traceId"] for s in roots}) == 13
    # the run summary it prints is the sum of the spans it wrote, and fits one screen
    summary = json.loads((tmp_path / "out" / "json" / "summary.json").read_text())
    assert_summary_is_the_spans(summary, spans)
    lines = out.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("torch.compile run summary (live): 13 compiles")))
    screen = lines[start : lines.index(next(ln for ln in lines[start:] if ln.startswith("summary written")))]
    assert len(screen) <= 45 and max(map(len, screen)) <= 100
    # the README's example is still what the demo prints (python -m tests.readme_demo rewrites it)
    assert not mismatches(readme_block(), out, summary), "README's demo output is stale: run python -m tests.readme_demo"
    assert not [ln for ln in lines if "│" in ln and len(ln) > 100], "a tree line runs past the time columns"


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
    features = importlib.import_module("torch_otel.features")  # the extension point for a feature of the user's own

    assert {"Feature", "FeatureState", "SpanView", "MetricsView", "SummaryView", "register"} <= set(features.__all__)
    assert all(hasattr(features, name) for name in features.__all__)


def test_every_torch_otel_variable_is_documented_in_the_configuration_docs():
    used = set()
    for path in (ROOT / "torch_otel").rglob("*.py"):
        used |= set(re.findall(r"TORCH_OTEL_[A-Z_]+[A-Z]", path.read_text()))
    docs = (ROOT / "docs" / "configuration.md").read_text()
    table = {m for m in re.findall(r"^\| `(TORCH_OTEL_[A-Z_]+)` \|", docs, re.M)}
    assert used <= table, sorted(used - table)


def test_every_test_the_guarantees_section_names_exists():
    guarantees = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`", guarantees)
    assert len(named) >= 25
    for file, test in named:
        assert re.search(rf"^def {test}\(", (ROOT / "tests" / file).read_text(), re.M), f"{file}::{test}"


def _heading_slugs(markdown: str) -> set[str]:
    """Anchors GitHub gives the headings of ``markdown``: lowercased, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    slugs: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(
        r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.sub(r"^[ \t]*```.*?^[ \t]*```", "", markdown, flags=re.M | re.S), re.M
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def _markdown_links(markdown: str) -> list[str]:
    """Targets of the inline ``[text](target)`` links and ``[label]: target`` definitions outside code."""
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", markdown, flags=re.M | re.S)  # fenced blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    reference = re.findall(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", text, re.M)
    return inline + reference


def test_every_relative_link_in_the_docs_resolves():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += [ROOT / "collector-config" / "README.md", ROOT / "grafana" / "README.md", ROOT / "CHANGELOG.md"]
    assert len(files) >= 11
    broken = []
    for md in files:
        for target in _markdown_links(md.read_text()):
            if re.match(r"(https?|mailto):", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such path)")
            elif anchor and dest.suffix == ".md" and anchor not in _heading_slugs(dest.read_text()):
                broken.append(f"{where} (no such heading)")
    assert not broken, broken


def test_the_release_matrix_the_version_module_and_the_instruments_extra_agree():
    """noxfile.py's RELEASES, TESTED_TORCH and pyproject's `instruments` extra name the same releases."""
    import ast

    import tomllib

    from torch_otel._capture.attach_table import rows
    from torch_otel._version import SUPPORTED_TORCH, TESTED_TORCH

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    releases = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RELEASES"
    )
    assert tuple(".".join(r.split(".")[:2]) for r in releases) == TESTED_TORCH
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["instruments"]
    assert extra == [SUPPORTED_TORCH]
    first, last = TESTED_TORCH[0], TESTED_TORCH[-1]
    major, minor = last.split(".")
    assert SUPPORTED_TORCH == f"torch >= {first}, < {major}.{int(minor) + 1}"
    table = (ROOT / "docs" / "compatibility.md").read_text()
    header = next(ln for ln in table.splitlines() if ln.startswith("| source |"))
    assert [c.strip() for c in header.split("|")[3:-1]] == list(releases)  # a column per release the matrix ran
    for src in rows():
        assert f"| `{src.name}` |" in table, f"{src.name} is not in docs/compatibility.md: run `nox -s matrix`"


def test_the_test_environment_holds_torchs_bytecode():
    """The README's test command installs with ``--compile-bytecode``: where PYTHONDONTWRITEBYTECODE is set (this
    project's machines set it), a module never compiled to bytecode is compiled from source by every process that
    imports it, and the suite's hundreds of processes each compiled torch afresh (it ran 2.3 times as long)."""
    import importlib.util

    import torch
    import transformers

    for module in (torch, torch._dynamo, transformers):
        source = module.__file__
        assert source is not None
        assert Path(importlib.util.cache_from_source(source)).exists(), f"{module.__name__} has no bytecode: {source}"
