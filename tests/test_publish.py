"""What gets published: the sdist and wheel build, pass ``twine check``, carry what they must, and install and run alone.

The wheel is installed into a fresh virtual environment (with ``torch==2.13.0``, as the README installs it) and
``torch-otel demo`` runs from there, outside the source tree, so nothing of the checkout can stand in for a file the
wheel forgot.
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helpers import clean_env, read_otlp_json_spans

ROOT = Path(__file__).resolve().parent.parent
PKG = "torch_otel"


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    for var in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(var, None)
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    # No flags: the sdist is built first and the wheel is built from it, so a file the sdist lacks breaks the wheel.
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


def test_sdist_and_wheel_pass_twine_check(dists: tuple[Path, Path]) -> None:
    twine = Path(sys.executable).with_name("twine")
    res = _run([str(twine), "check", "--strict", *map(str, dists)], cwd=dists[0].parent)
    assert res.stdout.count("PASSED") == 2, res.stdout


def test_wheel_carries_the_autostart_types_entry_points_licence_and_readme(dists: tuple[Path, Path]) -> None:
    wheel, _ = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    for path in (
        f"{PKG}/__init__.py",
        f"{PKG}/auto.py",
        f"{PKG}/py.typed",
        f"{PKG}/_autostart/sitecustomize.py",
        f"{info}/licenses/LICENSE",
    ):
        assert path in names, path
    # every module of the source tree is in the wheel
    source = {str(p.relative_to(ROOT)) for p in (ROOT / PKG).rglob("*.py")}
    assert source <= names, sorted(source - names)
    assert "torch-otel = torch_otel._cli:main" in entry_points
    assert "torch = torch_otel._instrumentor:TorchCompileInstrumentor" in entry_points
    assert "torch_otel = torch_otel._instrumentor:TorchOtelConfigurator" in entry_points
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    readme = (ROOT / "README.md").read_text()
    assert meta.get_payload().strip() == readme.strip()
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    # the supported torch range is declared, never required
    requires = meta.get_all("Requires-Dist") or []
    assert not [r for r in requires if r.startswith("torch") and "extra ==" not in r], requires
    assert any(r.startswith("torch") and 'extra == "instruments"' in r for r in requires), requires


def test_sdist_carries_docs_tests_and_shipped_configs(dists: tuple[Path, Path]) -> None:
    _, sdist = dists
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    wanted = {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "tests/conftest.py", "tests/helpers.py"}
    wanted |= {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    wanted |= {str(p.relative_to(ROOT)) for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    wanted |= {str(p.relative_to(ROOT)) for p in (ROOT / "collector-config").glob("*.yaml")}
    assert wanted <= names, sorted(wanted - names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_and_the_sdist_carry_the_html_pages_assets(dists: tuple[Path, Path]) -> None:
    """The pages' CSS and JS are package data (torch_otel/_assets/, and each feature's part of the pages beside its
    module): both distributions carry every file."""
    wheel, sdist = dists
    assets = {str(p.relative_to(ROOT)) for p in (ROOT / PKG / "_assets").iterdir() if p.is_file()}
    assets |= {str(p.relative_to(ROOT)) for p in (ROOT / PKG / "_features").rglob("*.js")}
    assert {f"{PKG}/_features/graph_calls/page.js", f"{PKG}/_features/cache_lookups/page.js"} <= assets
    assert {f"{PKG}/_assets/{n}" for n in ("summary.css", "summary.js", "page-kit.js", "diff.js")} <= assets, sorted(assets)
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
        assert assets <= in_wheel, sorted(assets - in_wheel)
        assert [a for a in sorted(assets) if zf.read(a) != (ROOT / a).read_bytes()] == []
    with tarfile.open(sdist) as tf:
        in_sdist = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert assets <= in_sdist, sorted(assets - in_sdist)


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_demo(dists: tuple[Path, Path], tmp_path: Path) -> None:
    """The wheel into a fresh venv that already sees a torch, as a user's does: the package never pulls torch. The
    suite's torch is made visible behind the venv's own packages (a .pth line) rather than installed a second time,
    which would take 5 GB of disk and a minute or two."""
    import torch

    wheel, _ = dists
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    bin_dir = venv / "bin"
    site = Path(
        _run(
            [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp_path
        ).stdout.strip()
    )
    _run([str(bin_dir / "pip"), "install", "-q", str(wheel)], cwd=tmp_path, timeout=900)
    # then torch: a plain path line puts the suite's site-packages after the venv's own (its .pth files, the
    # checkout's editable install among them, are not read)
    (site / "zz_suite_torch.pth").write_text(str(Path(torch.__file__).parent.parent) + "\n")
    where = _run([str(bin_dir / "python"), "-c", f"import {PKG}; print({PKG}.__file__)"], cwd=tmp_path).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed wheel, not the checkout
    deps = _run([str(bin_dir / "python"), "-c", "import opentelemetry.sdk.trace as m; print(m.__file__)"], cwd=tmp_path).stdout
    assert deps.startswith(str(venv)), deps  # the wheel's dependencies installed by pip into the venv, not borrowed
    res = _run(
        [str(bin_dir / "torch-otel"), "demo", "--metrics-port", "0", "--traces-file", str(tmp_path / "demo.jsonl")],
        cwd=tmp_path,
    )
    assert "ERROR: recompile limit exceeded: shift now runs in eager" in res.stdout
    assert "torch_compile_recompile_limit_hits_total" in res.stdout
    roots = [s for s in read_otlp_json_spans(tmp_path / "demo.jsonl") if "torch.compile.kind" in s["attrs"]]
    assert len(roots) == 13
    # `torch-otel run` from the wheel loads the wheel's own sitecustomize
    probe = "import sys; print(sys.modules['sitecustomize'].__file__)"
    env_python = str(bin_dir / "python")
    out = _run([str(bin_dir / "torch-otel"), "run", "--", env_python, "-c", probe], cwd=tmp_path).stdout.strip()
    assert out.startswith(str(venv)) and out.endswith(os.path.join("_autostart", "sitecustomize.py")), out
    # the HTML run summary rendered by the installed wheel (its packaged CSS and JS) is the source tree's, byte for byte
    import json

    from torch_otel._sinks.html import render_html

    sample = ROOT / "tests" / "data" / "summary-sample.json"
    page = tmp_path / "summary.html"
    render = (
        "import json, sys; from torch_otel._sinks.html import render_html; "
        "open(sys.argv[2], 'w', encoding='utf-8').write(render_html(json.load(open(sys.argv[1]))))"
    )
    _run([env_python, "-c", render, str(sample), str(page)], cwd=tmp_path)
    assert page.read_text(encoding="utf-8") == render_html(json.loads(sample.read_text()))


def _interpreter(version: str) -> str | None:
    """A Python ``version`` interpreter on this machine: on PATH, or one of pyenv's."""
    import glob
    import shutil

    found = [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python"))),
    ]
    for exe in found:
        if exe and subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=60).returncode == 0:
            return exe
    return None


@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_the_wheel_installs_and_replays_on_the_other_pythons_it_claims(
    dists: tuple[Path, Path], tmp_path: Path, version: str
) -> None:
    """The README claims Python 3.10 to 3.12. The torch wheel this machine keeps is for 3.11 (the suite's), so on
    3.10 and 3.12 the wheel is installed without torch and replays a real log: the same summary as on 3.11."""
    exe = _interpreter(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (PATH or ~/.pyenv/versions); install it to check the claim")
    wheel, _ = dists
    venv = tmp_path / "venv"
    _run([exe, "-m", "venv", str(venv)], cwd=tmp_path)
    _run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], cwd=tmp_path, timeout=600)
    log = ROOT / "tests" / "data" / "tlparse-corpus" / "multi_rank_runtime_rank_0.log.gz"
    there = _run([str(venv / "bin" / "torch-otel"), "replay", str(log), "-o", os.devnull, "--json", "-"], cwd=tmp_path)
    here = _run([sys.executable, "-m", PKG, "replay", str(log), "-o", os.devnull, "--json", "-"], cwd=tmp_path)
    import json

    doc = json.loads(there.stdout)
    assert doc == json.loads(here.stdout)
    assert doc["schema_version"] == 1 and doc["compiles"] == 4
