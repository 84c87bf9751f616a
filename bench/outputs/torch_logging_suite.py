"""PyTorch's own logging tests without the bridge and with it: every test's outcome, compared.

torch's logging tests count records per handler on torch's loggers, check those loggers' handlers,
levels and ``propagate``, and compare what torch prints: they see anything the bridge changes in
torch's logging. This runs the test files you give (from a pytorch checkout at the tag of the
installed torch: they are not in the wheel) once per mode, each in a fresh process with a cold
inductor cache, and compares each test's outcome and failure message with the run without the bridge:

    none      no bridge
    default   ``torch-otel run``, TORCH_OTEL_CAPTURE=default (spans to a file, no network)
    full      the same, TORCH_OTEL_CAPTURE=full
    logs      default capture with OTEL_LOGS_EXPORTER=console (torch's warnings become log records)
    logs-full full capture with OTEL_LOGS_EXPORTER=console

``torch-otel run`` puts the bridge in every Python process the tests start as well. Each run checks
that the bridge was on (and at which level, with log records or not) in the pytest process.

    git clone --depth 1 -b v2.13.0 https://github.com/pytorch/pytorch /tmp/pytorch   # the installed release
    pip install numpy expecttest                       # torch.testing._internal needs them
    python -m bench.outputs.torch_logging_suite /tmp/pytorch/test/dynamo/test_logging.py \\
        /tmp/pytorch/test/dynamo/test_recompile_ux.py [--modes none,logs] [--json out.json] [-- pytest args]

pytest runs with ``-p no:logging``: pytest 9's log capture adds its handlers to torch's non-propagating
loggers, which torch's helper counts (torch's suite fails on it with or without the bridge). Exit
status 1 when a test's outcome or failure message differs from the run without the bridge.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN = "torch_logging_suite"  # this module, as a pytest plugin in each run: it reports whether the bridge was on
PROBE_ENV = "TORCH_LOGGING_SUITE_PROBE"
BRIDGE = {"TORCH_OTEL_CAPTURE": "default", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
MODES: dict[str, dict[str, str] | None] = {
    "none": None,
    "default": BRIDGE,
    "full": {**BRIDGE, "TORCH_OTEL_CAPTURE": "full"},
    "logs": {**BRIDGE, "OTEL_LOGS_EXPORTER": "console"},
    "logs-full": {**BRIDGE, "TORCH_OTEL_CAPTURE": "full", "OTEL_LOGS_EXPORTER": "console"},
}


# -- the pytest plugin (imported in each run's pytest process) -------------------------------------
def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    path = os.environ.get(PROBE_ENV)
    if not path:
        return
    out: dict[str, object] = {"bridge": False}
    if "torch_otel" in sys.modules:  # never imported here without the bridge
        import torch_otel
        from torch_otel._pipeline.bridge import current

        b = current()
        if b is not None:
            cap = b.capture
            hook = getattr(cap, "_warning_hook", None)
            out = {
                "bridge": True,
                "level": cap.level,
                "log_records": bool(cap.warnings),
                "warning_hook": bool(getattr(hook, "hooked", False)),
                "internal_errors": torch_otel.internal_error_count(),
            }
    Path(path).write_text(json.dumps(out))


# -- the runner ------------------------------------------------------------------------------------
def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_LOGS", "TORCH_TRACE"))}
    try:  # the bridge this runner's Python imports is the one each run loads, installed or not
        import torch_otel

        package_root = str(Path(torch_otel.__file__).resolve().parent.parent)
    except ImportError:  # not installed here: this checkout's
        package_root = str(HERE.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _message(el: ET.Element) -> str:
    """A failure's first line, without what changes from run to run (addresses, temporary paths)."""
    line = (el.get("message") or el.text or "").strip().splitlines()[:1]
    text = line[0] if line else ""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    return re.sub(r"/tmp/[^\s'\"]+", "/tmp/?", text)[:300]


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                msg = _message(el) if tag != "skipped" else ""
                break
        out[tid] = (outcome, msg)
    return out


def run_one(test_file: Path, mode: str, work: Path, pytest_args: list[str], timeout: float) -> dict:
    extra = MODES[mode]
    tag = f"{test_file.stem}-{mode}"
    env = _clean_env()
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / f"{tag}-inductor")  # each run starts as cold as the others
    env[PROBE_ENV] = str(work / f"{tag}.probe.json")
    junit = work / f"{tag}.xml"
    cmd = [sys.executable, "-m", "pytest", test_file.name, "-p", "no:cacheprovider", "-p", "no:logging"]
    cmd += ["-p", PLUGIN, f"--junitxml={junit}", "-q", *pytest_args]
    if extra is not None:
        env.update(extra)
        env["TORCH_OTEL_TRACES_FILE"] = str(work / f"{tag}.spans.jsonl")
        cmd = [sys.executable, "-m", "torch_otel", "run", "--", *cmd]
    t0 = time.monotonic()
    with open(work / f"{tag}.log", "w") as log:
        try:
            rc = subprocess.run(
                cmd, cwd=test_file.parent, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    seconds = time.monotonic() - t0
    probe_path = work / f"{tag}.probe.json"
    probe = json.loads(probe_path.read_text()) if probe_path.exists() else {}
    spans = work / f"{tag}.spans.jsonl"
    outcomes = _outcomes(junit)
    counts = {k: sum(1 for o, _ in outcomes.values() if o == k) for k in ("passed", "failed", "error", "skipped")}
    return {
        "file": test_file.name,
        "mode": mode,
        "rc": rc,
        "seconds": round(seconds, 1),
        "counts": counts,
        "probe": probe,
        "span_lines": sum(1 for _ in spans.open()) if spans.exists() else 0,
        "outcomes": outcomes,
        "log": str(work / f"{tag}.log"),
    }


def _bridge_problem(res: dict) -> str | None:
    """Why this run does not show the mode it was meant to (the bridge off where it should be on, ...)."""
    want, probe = MODES[res["mode"]], res["probe"]
    if not probe:
        return "no probe report (pytest did not finish)"
    if want is None:
        return "the bridge was on" if probe.get("bridge") else None
    if not probe.get("bridge"):
        return "the bridge was off"
    if probe.get("level") != want["TORCH_OTEL_CAPTURE"]:
        return f"capture level {probe.get('level')}"
    logs = "OTEL_LOGS_EXPORTER" in want
    if probe.get("log_records") != logs or probe.get("warning_hook") != logs:
        return f"log records {probe.get('log_records')}, warning hook {probe.get('warning_hook')}"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, pytest_args = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path, help="pytorch test files (test/dynamo/test_logging.py, ...)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, 'none' first (default: {','.join(MODES)})")
    ap.add_argument("--json", type=Path, help="write every run's outcomes here")
    ap.add_argument("--keep", type=Path, help="keep each run's output, junit XML and spans in this directory")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run (default 3600)")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes or modes[0] != "none":
        ap.error(f"modes: 'none' first, then any of {', '.join(MODES)} (got {args.modes})")
    work = args.keep or Path(tempfile.mkdtemp(prefix="torch-logging-suite-"))
    work.mkdir(parents=True, exist_ok=True)
    import torch

    print(f"torch {torch.__version__} ({torch.version.git_version[:12]}), python {sys.version.split()[0]}; output in {work}")
    print(f"{'file':<28} {'mode':<10} {'passed':>6} {'failed':>6} {'error':>5} {'skipped':>7} {'seconds':>8}  bridge")
    results, bad = [], 0
    for f in args.files:
        f = f.resolve()
        base: dict | None = None
        for mode in modes:
            res = run_one(f, mode, work, pytest_args, args.timeout)
            results.append(res)
            c, probe = res["counts"], res["probe"]
            problem = _bridge_problem(res)
            state = "off" if not probe.get("bridge") else f"{probe['level']}{'+logs' if probe.get('log_records') else ''}"
            state += f", {res['span_lines']} span lines" if MODES[mode] else ""
            print(
                f"{f.name:<28} {mode:<10} {c['passed']:>6} {c['failed']:>6} {c['error']:>5} {c['skipped']:>7} "
                f"{res['seconds']:>8}  {state}{'  PROBLEM: ' + problem if problem else ''}"
            )
            bad += problem is not None
            if not res["outcomes"] or c["passed"] + c["failed"] + c["skipped"] == 0:
                print(f"  no test ran (a collection error?); see {res['log']}")
                bad += 1
                continue
            if base is None:
                base = res
                continue
            for tid in sorted(set(base["outcomes"]) | set(res["outcomes"])):
                was, now = base["outcomes"].get(tid, ("absent", "")), res["outcomes"].get(tid, ("absent", ""))
                if was != now:
                    bad += 1
                    what = f"{was[0]} -> {now[0]}" if was[0] != now[0] else f"{now[0]}, another message"
                    print(f"  DIFFERS {tid}: {what}\n    none: {was[1]!r}\n    {mode}: {now[1]!r}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if not args.keep:
        for p in work.glob("*-inductor"):
            shutil.rmtree(p, ignore_errors=True)
    print("identical outcomes in every mode" if not bad else f"{bad} difference(s) or problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
