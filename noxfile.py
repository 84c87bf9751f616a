"""The torch release matrix, as opentelemetry-python-contrib tests each instrumented library's versions.

    nox -s matrix                       # the release tests on every supported torch release (about 6 GB each)
    nox -s "release(torch='2.15.0')"    # one release
    nox -s other_releases               # every release but the one the whole suite runs on (what CI runs)
    nox -s compat                       # docs/compatibility.md, from the reports the runs above left

Each release gets its own virtual environment with ``torch==X`` from the registry (on Linux, uv downloads
its CUDA build with NVIDIA's runtime packages, 2.13.0 included: about 5-6 GB and 1 to 2 minutes each; they import and
compile on a machine with no GPU), the package and its test dependencies. It runs ``torch-otel doctor`` (which
of torch's hooks this release has) and the tests marked ``release``: live capture, replay, the three ways of turning the bridge on, and torch's own logs replayed
against tlparse. Each leaves ``build/matrix/torch-X.json`` (doctor) and ``build/matrix/torch-X.xml`` (JUnit).
With ``CI`` or ``TORCH_OTEL_MATRIX_CLEAN`` set, a release's environment is removed after its run, so the
disk one matrix run uses stays near one environment's size.
"""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import nox

# The newest patch of each supported minor release, oldest first (torch_otel/_version.py TESTED_TORCH names the minors).
RELEASES = ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
FULL_SUITE = "2.13.0"  # the release the README's test command runs the whole suite on
REPORTS = Path("build/matrix")
COMPAT = Path("docs/compatibility.md")
# What one release needs free before it installs: torch's CUDA build with its NVIDIA packages, unpacked (5-6 GB), and
# the installer's download of them beside it.
NEEDS_FREE = 9 * 2**30

# uv creates the environments and installs into them: torch 2.14.1 with its NVIDIA packages, from the registry with
# an empty cache, took 37 s against pip's 102 s on the 2-core machine (uv downloads and unpacks in parallel)
nox.options.default_venv_backend = "uv"
# Each module compiled to bytecode as it installs, as pip does and uv does not unless asked: where the environment says
# PYTHONDONTWRITEBYTECODE (this project's machines do), a module never compiled is compiled from source by every process
# that imports it, and each of the tests' processes would compile torch afresh (the suite ran 2.3 times as long). An
# installer's configuration may cap torch's version (UV_CONSTRAINT): lifted for these installs only.
INSTALL_ENV = {"UV_COMPILE_BYTECODE": "1", "UV_CONSTRAINT": "/dev/null"}
nox.options.sessions = ["matrix"]
nox.options.reuse_existing_virtualenvs = True


# ``--seed``: pip and setuptools in each environment, as ``python -m venv`` puts them there and uv does not: torch 2.10's
# inductor imports setuptools to build its C++ on CPU, and declares it only for Python 3.12 and later
@nox.session(venv_params=["--seed"])
@nox.parametrize("torch", RELEASES)
def release(session: nox.Session, torch: str) -> None:
    """The release tests on one torch release."""
    clean = bool(os.environ.get("CI") or os.environ.get("TORCH_OTEL_MATRIX_CLEAN"))
    venv = Path(session.virtualenv.location)
    free = shutil.disk_usage(venv).free
    if free < NEEDS_FREE and not any(venv.glob("lib/python*/site-packages/torch")):  # a reused environment has it
        session.error(
            f"torch {torch}: {free / 2**30:.1f} GiB free where its environment goes, it needs about "
            f"{NEEDS_FREE / 2**30:.0f} GiB: free disk (old .nox environments, /tmp/torchinductor_*), or set "
            "TORCH_OTEL_MATRIX_CLEAN=1 so each release's environment is removed after its run"
        )
    REPORTS.mkdir(parents=True, exist_ok=True)
    stem = REPORTS / f"torch-{torch}"
    try:
        # An environment removed after its run leaves no wheels in uv's cache either (several GB a release).
        env = INSTALL_ENV | ({"UV_NO_CACHE": "1"} if clean else {})
        session.install(f"torch=={torch}", "-e", ".[test]", env=env)
        session.run("torch-otel", "doctor", "--json", f"{stem}.json", success_codes=[0, 1])
        session.run(
            "python",
            "-m",
            "pytest",
            "-m",
            "release",
            f"--junitxml={stem}.xml",
            "-o",
            f"junit_suite_name=torch-{torch}",
            *session.posargs,
        )
    finally:
        if clean:  # a failed install too: its half-written environment would take the next release's room
            shutil.rmtree(session.virtualenv.location, ignore_errors=True)


@nox.session
def fast_without_torch(session: nox.Session) -> None:
    """The fast tier in an environment without torch (docs/testing.md): the package, pytest, xdist, hypothesis and NumPy (one test times its import), nothing else."""
    session.install("-e", ".", "pytest>=8", "pytest-xdist==3.6.1", "hypothesis>=6", "numpy>=1.26", env=INSTALL_ENV)
    session.run("python", "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)")
    session.run("python", "-m", "pytest", "tests/fast", *session.posargs)


@nox.session(python=False)
def matrix(session: nox.Session) -> None:
    """The release tests on every supported release, then the compatibility table."""
    for torch in RELEASES:
        session.notify(f"release(torch='{torch}')")
    session.notify("compat")


@nox.session(python=False)
def other_releases(session: nox.Session) -> None:
    """Every release but the one the whole suite runs on (CI: the whole suite on one, the release tests on the rest)."""
    for torch in RELEASES:
        if torch != FULL_SUITE:
            session.notify(f"release(torch='{torch}')")


def _outcomes(xml: Path) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


@nox.session(python=False)
def compat(session: nox.Session) -> None:
    """Write docs/compatibility.md from the matrix's reports (each release's doctor JSON and JUnit results)."""
    reports = []
    for torch in RELEASES:
        doctor, junit = REPORTS / f"torch-{torch}.json", REPORTS / f"torch-{torch}.xml"
        if not doctor.exists() or not junit.exists():
            session.error(f"no report for torch {torch} in {REPORTS}: run `nox -s \"release(torch='{torch}')\"` first")
        reports.append((torch, json.loads(doctor.read_text()), _outcomes(junit)))
    COMPAT.write_text(render(reports, gpu_section(COMPAT.read_text() if COMPAT.exists() else "")))
    session.log(f"wrote {COMPAT}")


GPU_HEADING = "## On a GPU"


def gpu_section(page: str) -> str:
    """The page's GPU section, kept as it is: it comes from a GPU run (bench/gpu/check.py), which the matrix cannot make."""
    start = page.find("\n" + GPU_HEADING + "\n")
    if start < 0:
        return ""
    end = page.find("\n## ", start + 1)
    return page[start + 1 : end + 1 if end >= 0 else len(page)].rstrip("\n") + "\n"


def render(reports: list[tuple[str, dict, dict[str, int]]], gpu: str = "") -> str:
    heads = [t for t, _, _ in reports]
    lines = [
        "# Compatibility with torch releases",
        "",
        "Written by `nox -s compat` from the release matrix's reports (`nox -s matrix`): do not edit by hand.",
        "Each release ran `torch-otel doctor` and the tests marked `release` (live capture, replay against",
        "tlparse, and the three ways of turning the bridge on) in its own environment.",
        "",
        "## Where torch-otel attaches, by release",
        "",
        "`ok`: the release has the attach point and the bridge uses it. `-`: the release lacks it; the bridge",
        "says so in one line as it arms, and captures the rest.",
        "",
        "| source | what it gives | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(heads),
    ]
    names = [row["name"] for row in reports[0][1]["sources"]]
    for name in names:
        cells = []
        gives = ""
        for _, doc, _ in reports:
            row = next((r for r in doc["sources"] if r["name"] == name), None)
            gives = gives or (row or {}).get("gives", "")
            cells.append("ok" if row and row["present"] else "-")
        lines.append(f"| `{name}` | {gives} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## The release tests, by release",
        "",
        "| torch | installed build | passed | failed | skipped |",
        "|---|---|---|---|---|",
    ]
    for torch, doc, counts in reports:
        lines.append(f"| {torch} | {doc['torch']} | {counts['passed']} | {counts['failed']} | {counts['skipped']} |")
    lines += [
        "",
        "A skipped test names, in its reason, the release it applies to or what that release lacks.",
        "",
        "## What else differs between releases, and how the bridge reads it",
        "",
        '- **The recompile-limit hit.** 2.10 records `fail_type` `RecompileLimitExceeded` ("recompile_limit reached");',
        '  2.11 and later record `Unsupported` ("Dynamo recompile limit exceeded"). Both are an ERROR root with',
        "  `torch.compile.recompile_limit_exceeded` and count in `torch_compile_recompile_limit_hits_total`",
        "  (`torch_otel/_core/categories.py`, `is_recompile_limit_hit`).",
        "- **A type guard's wording.** 2.15 says \"expected type of 'x' to be <class 'torch.Tensor'>\" where earlier",
        '  releases say "to be a tensor type": both fall in the recompile category `type`.',
        "- **A module compiled through torch's own wrapper.** A module whose `forward` is torch's (`nn.Sequential`) is",
        "  compiled through a wrapper in `torch/_dynamo/external_utils.py` (`wrap_inline`'s `inner`: line 68 on 2.10, 67",
        "  on 2.13). The bridge names the frame by the module's class (`Sequential`), from the wrapper's `fn` live and",
        "  from the guards torch logs on `L['fn']` on replay; `tests/test_frame_names.py` checks it on every release.",
        "- **The AOT precompile.** `torch.compile(fn).aot_compile(...)` does not exist on 2.10. Its compile id is",
        "  torch's own count and differs by release (`1/0` on 2.13, `2/0` on 2.15); replay reads it from the log.",
        "- **The version string.** CUDA builds say `2.15.0+cu132` in `torch.__version__` and `2.15.0` in their",
        "  package metadata. Spans (`torch.version`) and `torch_compile_build_info` carry `torch.__version__`, live",
        "  and on replay.",
        "",
        "## Releases outside the tested ones",
        "",
        "- **Newer** than the newest tested release: captured on a best-effort basis. The bridge says so in one",
        "  line as it arms, and names in one more line any attach point it does not find. `opentelemetry-instrument`",
        "  skips an instrumentor whose library is outside its `instruments` range with a debug message only;",
        "  torch-otel's `opentelemetry_post_instrument` hook then instruments anyway, so that way is never silent.",
        "- **Older** than the supported range: one line names the range; what the release has is still captured.",
        "- `torch-otel --version` says whether the installed torch is a tested release; `torch-otel doctor` says",
        "  what torch-otel captures on the installed torch and what it does not, one line each (exit 1 if one its row",
        "  promises is missing); `--json` keeps the rows' ids.",
        "",
        "## Adding a release",
        "",
        "1. Add it to `RELEASES` in `noxfile.py` and to `TESTED_TORCH` in `torch_otel/_version.py`, and widen the",
        "   `instruments` extra in `pyproject.toml` (a test checks the three agree).",
        "2. `nox -s \"release(torch='X')\"`. A moved or renamed attach point fails",
        "   `tests/test_releases.py::test_this_release_has_every_attach_point_its_row_promises`: give the old row",
        "   its last release in `releases` and add a row for the new place in `torch_otel/_capture/attach_table.py`. torch's",
        "   wording that changed (recompile-limit hits, guard failures) is matched in `torch_otel/_core/categories.py`.",
        "3. `nox -s matrix` (or the new release's session and `nox -s compat`) rewrites this page, all but its GPU",
        "   section, which it keeps as it is.",
        "",
    ]
    if gpu:
        lines += [gpu.rstrip("\n"), ""]
    return "\n".join(lines)
