"""collector-config/build.sh when it cannot build: one line on stderr naming what is missing, exit 1.

The build itself (minutes) is the collector tests' (tests/test_collector_config_run.py, which fail on CI and skip
elsewhere with this same line when the build cannot run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BUILD_SH = Path(__file__).resolve().parents[2] / "collector-config" / "build.sh"


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BUILD_SH)], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_no_go_toolchain_is_one_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TORCH_OTEL_BUILD_CACHE": str(tmp_path / "cache")}
    if shutil.which("go", path=env["PATH"]):
        env["PATH"] = str(tmp_path / "nothing")  # a machine whose go is in /usr/bin: no PATH at all
        (tmp_path / "nothing").mkdir()
    proc = subprocess.run(["/bin/bash", str(BUILD_SH)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "collector-config/build.sh: no Go toolchain on PATH: install Go 1.24.6 or newer (https://go.dev/doc/install), then run this again"
    ]


def test_an_unreachable_module_proxy_is_one_line_naming_it(tmp_path):
    go = shutil.which("go")
    if go is None:
        return  # the line above is this machine's answer
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "TORCH_OTEL_BUILD_CACHE": str(cache),
        "GOPROXY": "http://127.0.0.1:9",  # the discard port: nothing answers
        "GOSUMDB": "off",
        "GOMODCACHE": str(tmp_path / "mod"),  # nothing downloaded before
        "GOFLAGS": "-modcacherw",
    }
    proc = _run(env)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()[-1:]
    assert line.startswith("collector-config/build.sh: building the collector failed: "), proc.stderr
    assert "127.0.0.1:9" in line and "GOPROXY=http://127.0.0.1:9" in line and str(cache) in line, line
    assert [
        ln for ln in proc.stderr.splitlines() if not ln.startswith("collector-config/build.sh: building the collector (")
    ] == [line]
