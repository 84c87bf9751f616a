"""``torch-otel demo``'s output paths: one that cannot be written is one line naming its option and why, before the run.

Each case runs the real command. "Permission denied" needs a user the file
system refuses: as root (who may write anywhere) the demo runs as ``nobody``
through ``setpriv``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import run, run_cli


def _demo(args: list[str], cwd: Path, as_nobody: bool = False) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = [sys.executable, "-m", "torch_otel", "demo", "--metrics-port", "0", *args]
    if as_nobody:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    t0 = time.monotonic()
    r = run(cmd, cwd=cwd, timeout=120)
    return r, time.monotonic() - t0


# option, the path given (under the test's directory, which holds a file "afile" and a directory "adir"), the reason
CASES = {
    "html-under-a-file": ("--html", "afile/report.html", "{d}/afile is a file, not a directory"),
    "json-under-a-file-two-deep": ("--json", "afile/new/summary.json", "{d}/afile is a file, not a directory"),
    "traces-file-under-a-file": ("--traces-file", "afile/spans.jsonl", "{d}/afile is a file, not a directory"),
    "html-is-a-directory": ("--html", "adir", "it is a directory"),
    "traces-file-is-a-directory": ("--traces-file", "adir", "it is a directory"),
}


# The cases run together where their options differ: each unwritable path is its own line (the test below), so one
# start of the demo (an import of torch) checks several.
GROUPS = (
    ("html-under-a-file", "json-under-a-file-two-deep", "traces-file-is-a-directory"),
    ("html-is-a-directory", "traces-file-under-a-file"),
)
assert sorted(case for cases in GROUPS for case in cases) == sorted(CASES)  # every case, once


@pytest.mark.parametrize("cases", GROUPS, ids=",".join)
def test_a_demo_output_path_that_cannot_be_written_is_one_line_before_the_workload(tmp_path, cases):
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    args, want = [], []
    for case in cases:
        option, path, why = CASES[case]
        args += [option, path]
        want.append(f"torch-otel demo: cannot write {option} {path} ({why.format(d=tmp_path)}); pass a writable path")
    assert len({CASES[case][0] for case in cases}) == len(cases)  # one path per option
    r, _ = _demo(args, tmp_path)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert sorted(r.stderr.splitlines()) == sorted(want), r.stderr[-3000:]  # each case's one line, and nothing else
    assert "compiling a small workload" not in r.stdout  # checked before the workload, not after it
    assert "written to" not in r.stdout


def test_each_unwritable_demo_output_is_its_own_line_and_permission_denied_says_so(tmp_path):
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no user the file system refuses")
    as_nobody = os.geteuid() == 0
    if as_nobody:
        reach = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", "import torch_otel"],
            capture_output=True,
            text=True,
        )
        if reach.returncode != 0:
            # a checkout under a private folder (root's home, mktemp -d): nobody cannot reach this venv
            pytest.skip(
                f"user nobody cannot run this checkout's python ({reach.stderr.strip()[-200:]}); clone under a readable folder"
            )
    # a directory nobody may read but not write (pytest's own temporary directories are private to their owner)
    base = Path(tempfile.mkdtemp(prefix="torch-otel-paths-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        locked.chmod(0o555)
        (base / "afile").write_text("")
        args = ["--traces-file", f"{locked}/spans.jsonl", "--html", f"{locked}/new/page.html", "--json", f"{base}/afile/s.json"]
        r, took = _demo(args, base, as_nobody=as_nobody)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert r.stderr.splitlines() == [
        f"torch-otel demo: cannot write --traces-file {locked}/spans.jsonl (permission denied: {locked} is not writable); "
        "pass a writable path",
        f"torch-otel demo: cannot write --html {locked}/new/page.html (permission denied: {locked} is not writable); "
        "pass a writable path",
        f"torch-otel demo: cannot write --json {base}/afile/s.json ({base}/afile is a file, not a directory); "
        "pass a writable path",
    ], r.stderr[-3000:]
    assert "compiling a small workload" not in r.stdout
    assert took < 30, took  # no workload ran


LOG = Path(__file__).parent / "data" / "tlparse-corpus" / "simple.log.gz"


def test_replay_writes_json_and_html_into_folders_it_creates(tmp_path):
    """``--json`` into a folder that does not exist yet: created, as ``--html``'s is (the JSON was not written, said
    only after the replay, and the replay exited 0: issue 49)."""
    json_path, page = tmp_path / "new" / "deeper" / "s.json", tmp_path / "other" / "p.html"
    r = run_cli("replay", str(LOG), "--json", str(json_path), "--html", str(page), "--output", str(tmp_path / "spans.jsonl"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(json_path.read_text())["compiles"] > 0
    assert page.read_text().startswith("<!DOCTYPE html>") or "<html" in page.read_text()[:200]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("torch-otel replay: cannot write")], r.stderr


@pytest.mark.parametrize("option", ["--json", "--html", "--output"])
def test_a_replay_output_that_cannot_be_written_is_one_line_and_exit_2_before_the_replay(tmp_path, option):
    (tmp_path / "afile").write_text("")
    path = tmp_path / "afile" / "new" / "out.x"
    r = run_cli("replay", str(LOG), option, str(path))
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert r.stderr.splitlines() == [
        f"torch-otel replay: cannot write {option} {path} ({tmp_path}/afile is a file, not a directory); pass a writable path"
    ], r.stderr[-3000:]
    assert r.stdout == ""  # nothing replayed: no summary
