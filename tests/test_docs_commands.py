"""The docs' commands, taken from the docs and run as a user would paste them, against real runs.

Each test reads its commands out of the Markdown (a fenced ``sh`` block, a command in backticks) and runs them in a
directory laid out like the checkout after the README's set-up: ``.venv`` (this test's environment) and ``tests``
(the workloads the docs name). Where a doc's command holds a fixed port (9464, 19090), a test that runs beside
others gives it a free port instead and says so; nothing else in the command is changed. A run with nothing
configured serves /metrics on 9464, which other tests hold or expect free: here it gets any free port instead
(OTEL_EXPORTER_PROMETHEUS_PORT=0, ANY_PORT).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import clean_env, own_lines
from tests.servers import http_get, require, wait_until
from torch_otel._core.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
ANY_PORT = {"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}
DECIMAL = re.compile(r"\d\.\d")  # a line with a time or a version in it: it differs from run to run


def _section(doc: str, heading: str) -> str:
    """The text of ``doc`` under ``heading`` (a Markdown heading line), up to the next heading of its level or above."""
    text = (ROOT / doc).read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    ends = [m.start() for m in re.finditer("\n#{1," + str(len(level)) + "} ", text) if m.start() > start]
    return text[start : ends[0] if ends else len(text)]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall("```" + lang + "\n(.*?)```", text, re.S)


def _checkout(path: Path) -> Path:
    """``path`` laid out as the docs' commands expect the checkout: ``.venv`` and ``tests`` in it."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "torch-otel").exists(), f"{venv} has no torch-otel: install the package in it"
    (path / ".venv").symlink_to(venv, target_is_directory=True)
    (path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    return path


def _bash(script: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _summaries(stderr: str) -> list[list[str]]:
    """Each run summary printed on stderr, as its lines."""
    out: list[list[str]] = []
    for line in stderr.splitlines():
        if line.startswith("torch.compile run summary"):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def _cache_lines(lines: list[str]) -> list[str]:
    start = next(i for i, ln in enumerate(lines) if ln.startswith("cache:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end]


def _no_times(lines: list[str]) -> list[str]:
    return [re.sub(r"\d+\.\d\d s", "T s", ln) for ln in lines]


def test_the_caches_walkthrough_runs_as_written_and_prints_the_lines_the_doc_shows(tmp_path):
    """docs/caches.md: a cold run, the same run warm, then one with an inductor config flipped (inductor, ~40 s)."""
    section = _section("docs/caches.md", "## A restarted job, as the run summary shows it")
    commands = _blocks(section, "sh")
    assert len(commands) == 1, commands
    r = _bash(commands[0], _checkout(tmp_path), ANY_PORT, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    runs = _summaries(r.stderr)
    assert len(runs) == 3, r.stderr[-4000:]
    shown = [b.strip().splitlines() for b in _blocks(section, "text")[:3]]  # the cold, warm and config runs' lines
    for doc_lines, run in zip(shown, runs, strict=True):
        assert _no_times(_cache_lines(run)) == _no_times(doc_lines), (doc_lines, run)
    closing = own_lines(r.stderr)
    assert len(closing) == 3 and all(ln.startswith("torch-otel: traces of ") for ln in closing), closing


def test_recording_two_runs_and_diffing_them_runs_as_written_and_fails_the_gate(tmp_path):
    """docs/diff.md#recording-the-two-runs: two TORCH_TRACE runs and the diff; it prints the doc's screen, exit 4."""
    section = _section("docs/diff.md", "### Recording the two runs")
    commands = _blocks(section, "sh")
    assert len(commands) == 1, commands
    assert "exits 4" in section and "runs/diff.html" in section
    r = _bash(commands[0], _checkout(tmp_path), ANY_PORT)
    assert r.returncode == 4, (r.stdout[-3000:], r.stderr[-3000:])
    page = tmp_path / "runs" / "diff.html"
    assert page.stat().st_size > 1000 and "<html" in page.read_text()[:500].lower()
    screen = _blocks(_section("docs/diff.md", "## What it shows"), "text")[0].splitlines()
    from_breaks = screen[next(i for i, ln in enumerate(screen) if ln.startswith("graph breaks:")) :]
    steady = [ln for ln in from_breaks if ln.strip() and not DECIMAL.search(ln)]  # no time in them
    assert len(steady) >= 15, steady
    printed = r.stdout.splitlines()
    assert [ln for ln in steady if ln not in printed] == [], r.stdout


TRAIN_WITH_STEPS = """\
import argparse
import torch

args = argparse.ArgumentParser()
args.add_argument("--steps", type=int, default=100)
n = args.parse_args().steps
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(n):
    loss = model(torch.randn(32, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained", n)
"""


def test_the_ci_jobs_commands_run_as_written_on_main_then_on_a_pull_request(tmp_path):
    """docs/diff.md's CI job: the wheel it installs is built by the doc's command and matches the job's path; the job's
    run steps, run as on main and then on a pull request of the same code, record the baseline and pass the gate."""
    section = _section("docs/diff.md", "### An example CI job")
    job = yaml.safe_load(_blocks(section, "yaml")[0])
    steps = job["jobs"]["compile-gate"]["steps"]
    runs = [s for s in steps if "run" in s]
    install = runs[0]["run"].split("#")[0].split()
    assert install[:2] == ["pip", "install"] and "torch-otel" not in install, install  # not by name from an index
    wheel_glob = next(a for a in install if a.endswith(".whl"))
    # the wheel, built as the doc says in a clone of this repository
    build = re.search(r"`(\.venv/bin/pip wheel [^`]*)`", section)
    assert build is not None, section
    clone = tmp_path / "torch-otel"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    built = _bash(build.group(1), clone, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    repo = tmp_path / "project"  # the user's repository, the wheels/ folder copied into it
    repo.mkdir()
    (repo / "wheels").mkdir()
    for w in (clone / "wheels").iterdir():
        (repo / "wheels" / w.name).write_bytes(w.read_bytes())
    wheels = sorted(p.name for p in repo.glob(wheel_glob))
    assert len(wheels) == 1 and wheels[0].startswith("torch_otel-"), (wheel_glob, wheels)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    dry = _bash(f"pip install --dry-run --no-deps --no-index {wheel_glob}", repo, {"PATH": path}, timeout=120)
    assert dry.returncode == 0 and "torch-otel" in dry.stdout.lower().replace("_", "-"), (dry.stdout, dry.stderr)

    # the job on main, then on a pull request (GitHub's expression for TRACE, evaluated for each event)
    trace_expr = job["jobs"]["compile-gate"]["env"]["TRACE"]
    names = re.fullmatch(r"\$\{\{ github\.event_name == 'pull_request' && '([\w-]+)' \|\| '([\w-]+)' \}\}", trace_expr)
    assert names is not None, trace_expr
    on_pr, on_main = names.groups()
    saved = [s for s in steps if "actions/cache/" in s.get("uses", "")]
    assert [s["with"]["path"] for s in saved] == [on_main, on_main]  # main's log is what the cache keeps and restores
    (repo / "train.py").write_text(TRAIN_WITH_STEPS)
    gate_ran = False
    for event, ref, trace in (("push", "refs/heads/main", on_main), ("pull_request", "refs/pull/1/merge", on_pr)):
        for step in runs[1:]:
            cond = step.get("if", "")
            if ("refs/heads/main" in cond and ref != "refs/heads/main") or ("pull_request" in cond and event != "pull_request"):
                continue
            r = _bash(step["run"], repo, {"PATH": path, "TRACE": trace}, timeout=300)
            gate = "torch-otel diff" in step["run"]
            if gate and r.returncode == 4 and _failed_on(repo / "compile-diff.json") == ["time"]:
                # The same code on both sides, so only time can differ: a loaded machine stalled one run's compiles
                # past the default threshold (50% and 4 s; once, 1.3 s became 9.2 s beside other heavy tests). What
                # this test holds the commands to is the rest of the verdict, checked below.
                print(f"the gate failed on compile time alone (a loaded machine): {r.stdout[-400:]}")
                continue
            assert r.returncode == 0, (event, step, r.stdout[-3000:], r.stderr[-3000:])
            gate_ran = gate_ran or gate
            if gate:
                assert "gate: passed" in r.stdout, r.stdout  # the same code on both sides: the gate passes
    assert gate_ran or _failed_on(repo / "compile-diff.json") == ["time"]
    summary = json.loads((repo / "compile-diff.json").read_text())
    assert summary and (repo / "compile-diff.html").stat().st_size > 1000
    assert "compile-diff.*" in str(steps[-1]["with"]["path"])  # the artifact keeps both


def _failed_on(summary: Path) -> list[str]:
    """The kinds of what a ``torch-otel diff --json`` gate failed on (``time``, ``recompiles``, ...)."""
    return sorted({f["kind"] for f in json.loads(summary.read_text())["gate"]["failed"]})


HOLD = """\
import sys, time
from pathlib import Path
import torch

model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="aot_eager")
for n in (4, 8):
    model(torch.randn(n, 8)).sum().backward()
Path("compiled").write_text("")
deadline = time.monotonic() + 120
while not Path("done").exists() and time.monotonic() < deadline:  # the test says when it has looked
    time.sleep(0.2)
Path("compiled").unlink()
Path("done").unlink(missing_ok=True)
print("trained")
"""


def _start(script: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: whatever it started in the background is stopped with it
    )


def _stop_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def test_your_own_script_with_nothing_configured_runs_as_written(tmp_path):
    """docs/configuration.md#with-nothing-configured: the summary and the closing line; the page with
    TORCH_OTEL_SUMMARY; the doc's curl of /metrics while it runs (on a free port: other tests serve 9464)."""
    section = _section("docs/configuration.md", "## With nothing configured")
    commands = _blocks(section.split("A script of your own", 1)[1], "sh")[0].strip().splitlines()
    assert len(commands) == 2, commands
    curl = re.search(r"`(curl -s http://127\.0\.0\.1:9464/metrics)`", section)
    assert curl is not None, section
    # the closing line of each command, as the doc shows it; the second's with the line that says where its page went
    shown = [
        next(ln for ln in b.splitlines() if ln.startswith("torch-otel: traces of 3 compiles")) for b in _blocks(section, "text")
    ]
    assert len(shown) == 2 and "TORCH_OTEL_SUMMARY=" not in shown[1], shown
    page_line = next(ln for ln in _blocks(section, "text")[1].splitlines() if "page written to" in ln)
    checkout = _checkout(tmp_path)
    (checkout / "train.py").write_text(HOLD)
    for command, closing in zip(commands, shown, strict=True):
        port = free_port()
        proc = _start(command, checkout, {"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)})
        try:
            wait_until(lambda p=proc: (checkout / "compiled").exists() or p.poll() is not None, 120, "the script to compile")
            scraped = _bash(curl.group(1).replace("9464", str(port)), checkout, timeout=30)
            (checkout / "done").write_text("")
            out, err = proc.communicate(timeout=120)
        finally:
            _stop_group(proc)
        assert proc.returncode == 0 and "trained" in out, err[-3000:]
        assert 'torch_compile_compiles_total{kind="frame",rank="0",status="ok"} 2.0' in scraped.stdout, scraped.stdout[-3000:]
        runs = _summaries(err)
        assert len(runs) == 1 and runs[0][0].startswith("torch.compile run summary (live): 3 compiles (1 backward, 2 frame)"), (
            err[-3000:]
        )
        assert err.splitlines()[-1] == closing.replace("9464", str(port)), err[-3000:]  # the doc's closing line, as printed
        if "compile.html" in command:
            assert err.splitlines()[-2] == page_line, err[-3000:]
    page = (checkout / "compile.html").read_text()
    assert "<html" in page[:500].lower() and "torch.compile run summary" in page


def test_the_host_prometheus_recipe_runs_as_written_and_keeps_the_runs_series(tmp_path):
    """docs/metrics.md#a-prometheus-on-your-machine: Debian's prometheus scrapes the run's /metrics; after the run the
    doc's query returns its compiles by kind. Ports 19090 and 9464 are given free ports here (other tests use 9464)."""
    require("prometheus")
    section = _section("docs/metrics.md", "### A Prometheus on your machine")
    script = _blocks(section, "sh")[0]
    assert "kill %1" in section
    prom_port, metrics_port = free_port(), free_port()
    script = script.replace("127.0.0.1:19090", f"127.0.0.1:{prom_port}").replace("127.0.0.1:9464", f"127.0.0.1:{metrics_port}")
    checkout = _checkout(tmp_path)
    (checkout / "train.py").write_text(HOLD)
    proc = _start(script + "kill %1\n", checkout, {"OTEL_EXPORTER_PROMETHEUS_PORT": str(metrics_port)})
    try:
        wait_until(lambda: (checkout / "compiled").exists() or proc.poll() is not None, 120, "the script to compile")

        def scraped() -> bool:
            try:
                body = http_get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=torch_compile_compiles_total", timeout=5)
            except OSError:
                return False
            # a scrape after the compiles were counted: the series may be served at 0 before the worker counts them
            return sum(float(r["value"][1]) for r in json.loads(body)["data"]["result"]) >= 3

        wait_until(lambda: scraped() or proc.poll() is not None, 90, "prometheus to scrape the run's compiles")
        (checkout / "done").write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        _stop_group(proc)
    assert proc.returncode == 0 and "trained" in out, (out[-2000:], err[-3000:])
    answer = json.loads(out.splitlines()[-1])  # the doc's curl, after the run ended
    assert answer["status"] == "success", answer
    by_kind = {s["metric"]["kind"]: float(s["value"][1]) for s in answer["data"]["result"]}
    assert by_kind == {"frame": 2.0, "backward": 1.0}, answer  # a recompile for the new size, one backward
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # kill %1 stopped prometheus: its port is free again
        try:
            http_get(f"http://127.0.0.1:{prom_port}/-/ready", timeout=1)
        except OSError:
            break
        time.sleep(0.5)
    else:
        pytest.fail("prometheus still answers after the recipe's kill %1")


def _setup_section() -> str:
    return _section("README.md", "## Set-up on a fresh machine")


def test_the_readme_has_two_set_up_commands_and_ci_runs_the_second():
    commands = [c.strip() for c in _blocks(_setup_section(), "sh")]
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1]


def test_the_test_command_names_every_package_it_installs_and_never_reuses_the_demos_venv(tmp_path):
    """README set-up step 2: the prose names each Debian package the command installs; run after step 1 in the same
    checkout, its venv step makes .venv afresh (step 1's packages are gone) rather than reusing it."""
    setup = _setup_section()
    step2 = setup[setup.index("2. **Tests.**") :]
    demo, tests = (c.strip() for c in _blocks(setup, "sh"))
    apt = re.search(r"apt-get install -y -qq ([a-z0-9 -]+?) >", tests)
    assert apt is not None, tests
    prose = step2.split("```", 1)[0]
    missing = [p for p in apt.group(1).split() if f"`{p}`" not in prose]
    assert missing == [], missing
    make_demo_venv = next(p for p in demo.split(" && ") if p.startswith("python3 -m venv"))
    make_tests_venv = next(p for p in tests.split(" && ") if p.startswith("python3 -m venv"))
    r = _bash(make_demo_venv, tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    leftover = next((tmp_path / ".venv" / "lib").glob("python3*/site-packages")) / "left_by_step_1.py"
    leftover.write_text("")
    r = _bash(make_tests_venv, tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not leftover.exists()
    assert (tmp_path / ".venv" / "bin" / "python").exists()


FIGURE = re.compile(r"(?:about |under |up to )?(?:\d+ to )?\d+ ?(?:s|min|minutes?|seconds?)\b|under a minute|\bseconds\b")


def test_the_fast_tier_has_one_figure_wherever_it_is_named():
    figures: dict[str, set[str]] = {}
    for doc in ("README.md", "docs/architecture.md", "docs/testing.md"):
        text = " ".join((ROOT / doc).read_text().split())
        for m in re.finditer(r"pytest tests/fast`|`tests/fast` is the quick tier", text):
            tail = text[m.end() : m.end() + 500].split("\n", 1)[0]
            found = FIGURE.findall(tail)
            assert found, (doc, tail)
            figures.setdefault(found[0], set()).add(doc)
    assert set(figures) == {"10 to 40 s"}, figures
    assert len(figures["10 to 40 s"]) == 3, figures
