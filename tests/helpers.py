"""Shared helpers for subprocess tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
_GLOG = re.compile(r"^([VIWEC])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")


def clean_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any OTEL_/TORCH_OTEL_/TORCH_TRACE/TORCH_LOGS setting, plus ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
    full.update(env or {})
    return full


def spans_to_file(path: Path) -> dict[str, str]:
    """The environment that has a bridged process write its spans to ``path`` (OTLP JSON lines) and export nothing else."""
    return {"TORCH_OTEL_TRACES_FILE": str(path), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}


def torchrun_under_torch_otel(nproc: int, script: Path) -> list[str]:
    """``torch-otel run -- python -m torch.distributed.run --nproc-per-node N --standalone SCRIPT``."""
    launcher = [str(Path(sys.executable).parent / "torch-otel"), "run", "--", sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--nproc-per-node", str(nproc), "--standalone", str(script)]


def start_python(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A background ``python ARGS...`` (or ``-m module ...``) with stdout and stderr into ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, *args], env=clean_env(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def run_python(
    script: Path | str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    args: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *(args or [])],
        env=clean_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def normalize_stderr(text: str) -> list[str]:
    """torch's glog prefix carries time and pid: drop them to compare two runs."""
    return [_GLOG.sub(r"\1 ", line) for line in text.splitlines()]


def read_otlp_json_spans(path: Path) -> list[dict[str, Any]]:
    """Flatten an OTLP-JSON lines file into spans with plain attribute dicts."""
    spans: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        req = json.loads(line)
        for rs in req.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    attrs = {}
                    for kv in sp.get("attributes", []):
                        v = kv["value"]
                        attrs[kv["key"]] = next(iter(v.values())) if v else None
                    sp["attrs"] = attrs
                    spans.append(sp)
    return spans


def tlparse_compile_ids(log: Path, out_dir: Path) -> set[str]:
    """The compile ids the reference reader, tlparse (a test dependency), lists for a log."""
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    subprocess.run(
        [tlparse, str(log), "-o", str(out_dir), "--no-browser", "--overwrite"], check=True, capture_output=True, timeout=300
    )
    directory = json.loads((out_dir / "compile_directory.json").read_text())
    return {k.strip("[]") for k in directory} - {"-/-"}


def span_compile_ids(roots: list[dict[str, Any]]) -> set[str]:
    """Our root spans' ids in tlparse's form: each restart attempt N adds ``<id>_N``."""
    ids: set[str] = set()
    for r in roots:
        if r["attrs"]["torch.compile.kind"] == "backward":
            continue  # tlparse files the lazy backward under its forward's id
        cid, attempt = r["attrs"]["torch.compile.id"], int(r["attrs"]["torch.compile.attempt"])
        ids.add(cid)
        ids.update(f"{cid}_{a}" for a in range(1, attempt + 1))
    return ids


def frame_roots(received: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The frame-compile root spans a receiver got (see ``servers.parse_rotel_debug``), by compile id."""
    return {s["attrs"]["torch.compile.id"]: s for s in received["spans"] if s["attrs"].get("torch.compile.kind") == "frame"}


def torch_release() -> tuple[int, int]:
    """The installed torch's (major, minor)."""
    import torch

    major, minor = str(torch.__version__).split(".")[:2]
    return int(major), int(minor)


def recompile_limit_fail_type() -> str:
    """torch's ``fail_type`` for a frame that hits the recompile limit: 2.10 raises ``RecompileLimitExceeded``;
    2.11 and later report ``Unsupported`` ("Dynamo recompile limit exceeded")."""
    return "RecompileLimitExceeded" if torch_release() < (2, 11) else "Unsupported"


def bridge_lines(stderr: str) -> list[str]:
    """The bridge's own lines in a process's stderr, less the one line a tested release that lacks a documented
    record or hook is meant to print (torch_otel._sources rows whose ``releases`` leave this release out)."""
    import torch

    from torch_otel._sources import SOURCES, _in_releases

    lacking = [s.name for s in SOURCES if not _in_releases(str(torch.__version__), s.releases)]
    out = []
    for line in stderr.splitlines():
        if "torch-otel" not in line:
            continue
        if lacking and "lacks what torch-otel attaches to for:" in line and all(f"({n})" in line for n in lacking):
            continue
        out.append(line)
    return out
