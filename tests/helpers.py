"""Shared helpers for subprocess tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
_GLOG = re.compile(r"^([VIWEC])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
# A line torch-otel itself writes on stderr (docs/guarantees.md, "The bridge's own lines"): "torch-otel: ...", or a
# command's own "torch-otel replay: ...". Told apart by this prefix at the start of the line, never by the text
# "torch-otel" anywhere in it: a clone's folder, a user's name or a temporary path can hold that text, and torch's own
# tracebacks and warnings print paths.
OWN_LINE = re.compile(r"^torch-otel(?: (?:demo|replay|diff|doctor|run))?: ")


def clean_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any OTEL_/TORCH_OTEL_/TORCH_TRACE/TORCH_LOGS setting, plus ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
    full.update(env or {})
    return full


def cli_argv(*args: str, script: bool = False, python: str | None = None) -> list[str]:
    """``torch-otel ARGS`` as a command line: ``python -m torch_otel ARGS``, or with ``script`` the console script
    the package installs (what a user types); ``python``: another environment's interpreter (default: this one)."""
    python = python or sys.executable
    return [str(Path(python).parent / "torch-otel"), *args] if script else [python, "-m", "torch_otel", *args]


def run(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The suite's one runner of the bridge's commands in a subprocess (the CLI, a Python workload, ``torch-otel run --
    torchrun ...``): in the test's environment without any OTEL_/TORCH_OTEL_ setting plus ``env`` (:func:`clean_env`),
    its input closed, its output kept as text. Other programs (tlparse, promtool, a collector, a browser) are run where
    they are used."""
    return subprocess.run(
        argv, env=clean_env(env), cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    script: bool = False,
    python: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``torch-otel ARGS`` (:func:`cli_argv`), run by :func:`run`."""
    return run(cli_argv(*args, script=script, python=python), env=env, cwd=cwd, timeout=timeout)


def stop_processes(procs: Iterable[subprocess.Popen[Any]], wait: float = 60) -> None:
    """A test's teardown of the processes it started: each may take ``wait`` seconds to exit, then it is killed."""
    for p in procs:
        if p.poll() is not None:
            continue
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


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
    """``python SCRIPT ARGS`` (a workload), run by :func:`run`."""
    return run([sys.executable, str(script), *(args or [])], env=env, cwd=cwd, timeout=timeout)


def live_and_replayed(workload: Path, tmp: Path, mode: str) -> dict[str, Any]:
    """``python WORKLOAD TMP MODE`` with the bridge's summary and torch's ``TORCH_TRACE`` on (no exporter), then its log
    replayed: torch's own record (the workload's ``TMP/torch.json``), the live and the replayed summaries, the
    workload's stderr, the log and ``tmp``."""
    env = {
        "TORCH_TRACE": str(tmp / "trace"),
        "TORCH_OTEL_SUMMARY": str(tmp / "live.json"),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    res = run_python(workload, env, args=[str(tmp), mode])
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = (tmp / "trace").glob("*.log")
    rep = run_cli("replay", str(log), "--json", str(tmp / "replay.json"), "-o", str(tmp / "replay.jsonl"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    return {
        "torch": json.loads((tmp / "torch.json").read_text()),
        "live": json.loads((tmp / "live.json").read_text()),
        "replay": json.loads((tmp / "replay.json").read_text()),
        "stderr": res.stderr,
        "log": log,
        "tmp": tmp,
    }


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


def otlp_value(v: dict[str, Any]) -> Any:
    """An OTLP/JSON attribute's value (an array's as a list)."""
    if "arrayValue" in v:
        return [otlp_value(x) for x in v["arrayValue"].get("values", [])]
    return next(iter(v.values())) if v else None


def cache_lookups(spans: list[dict[str, Any]], ranks: bool = False) -> list[dict[str, Any]]:
    """Every cache lookup event on the compile roots of :func:`read_otlp_json_spans`'s spans, its attributes with the
    prefix cut, with its compile's id (and with ``ranks`` its rank)."""
    out = []
    for s in spans:
        if "torch.compile.kind" not in s["attrs"]:
            continue
        for e in s.get("events", []):
            if e["name"] == "torch.compile.cache_lookup":
                attrs = {a["key"].removeprefix("torch.compile.cache."): otlp_value(a["value"]) for a in e.get("attributes", [])}
                out.append(attrs | {"id": s["attrs"]["torch.compile.id"]})
                if ranks:
                    out[-1]["rank"] = int(s["attrs"]["torch.distributed.rank"])
    return out


def run_tlparse(log: Path, out_dir: Path) -> dict[str, Any]:
    """tlparse, the reference reader (a test dependency), on a log: its pages in ``out_dir``, and its compile directory
    (``compile_directory.json``: each compile id's artifacts)."""
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    subprocess.run(
        [tlparse, str(log), "-o", str(out_dir), "--no-browser", "--overwrite"], check=True, capture_output=True, timeout=300
    )
    return json.loads((out_dir / "compile_directory.json").read_text())  # type: ignore[no-any-return]


def tlparse_compile_ids(log: Path, out_dir: Path) -> set[str]:
    """The compile ids the reference reader, tlparse (a test dependency), lists for a log."""
    return {k.strip("[]") for k in run_tlparse(log, out_dir)} - {"-/-"}


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


def own_lines(stderr: str) -> list[str]:
    """The lines of a process's stderr that torch-otel wrote (:data:`OWN_LINE`), in order."""
    return [line for line in stderr.splitlines() if OWN_LINE.match(line)]


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][^\s\"'\\/:,()]+)+[\\/]?")


def without_paths(text: str) -> str:
    """``text`` with every file path in it (``/home/u/torch-otel/train.py``, ``C:\\x\\y``) as ``<path>``: a word looked
    for in a process's output is then never found in the name of a folder, a user or a temporary directory."""
    return _PATH.sub("<path>", text)


def bridge_lines(stderr: str) -> list[str]:
    """The bridge's own lines in a process's stderr, less the one line a tested release that lacks a documented
    record or hook is meant to print (torch_otel._capture.attach_table rows whose ``releases`` leave this release out), and less
    the line a frame near the recompile limit gets (about the user's program: tests/workloads/mixed.py does it on
    purpose)."""
    import torch

    from torch_otel._attach.releases import in_releases as _in_releases
    from torch_otel._capture.attach_table import rows
    from torch_otel._sinks.near_limit import NEAR_LIMIT_WORDS

    # (a variant row, one release range's way to what another row reaches on the others, is never said to be lacking)
    lacking = [s.name for s in rows() if not s.variant and not _in_releases(str(torch.__version__), s.releases)]
    out = []
    for line in own_lines(stderr):
        if NEAR_LIMIT_WORDS in line:
            continue
        if lacking and "lacks what torch-otel attaches to for:" in line and all(f"({n})" in line for n in lacking):
            continue
        out.append(line)
    return out


# the span live capture writes at exit, per compile, with how often its graph ran (torch_otel/_features/graph_calls/trace.py)
GRAPH_CALLS_SPAN = "torch.compile.graph_calls"


def _ns(span: dict[str, Any]) -> int:
    return int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])


def compile_ns(root: dict[str, Any]) -> int:
    """A compile root span's duration as the compile's: its ``torch.compile.duration_s`` (torch's ``duration_us`` for a
    frame or a lazy backward, whose span, torch's outer event, is a few ms longer; else the span's own)."""
    return round(float(root["attrs"]["torch.compile.duration_s"]) * 1e9)


def assert_summary_is_the_spans(summary: dict[str, Any], spans: list[dict[str, Any]]) -> None:
    """Every total of a run summary (``RunSummary.to_dict()``) equals the same total over the spans it summarises.

    Recomputed here from the exported OTLP-JSON spans alone, not from the summary's code: compiles by kind,
    compile time, each phase's count, total and self time, recompiles by category, graph breaks by code,
    failures by type, recompile-limit hits, the slowest compile, the frames and the picture's totals. A compile's
    time is its root's ``torch.compile.duration_s`` (:func:`compile_ns`), as the metrics count it. A compile's
    ``torch.compile.graph_calls`` span (written at exit: how often its graph ran after it) is no phase of it.
    """
    spans = [s for s in spans if s["name"] != GRAPH_CALLS_SPAN]
    by_id = {s["spanId"]: s for s in spans}
    kids: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        if s.get("parentSpanId"):
            kids.setdefault(s["parentSpanId"], []).append(s)

    def trace_root(s: dict[str, Any]) -> dict[str, Any]:
        while s.get("parentSpanId") and s["parentSpanId"] in by_id:
            s = by_id[s["parentSpanId"]]
        return s

    roots = [s for s in spans if "torch.compile.kind" in s["attrs"] and not s.get("parentSpanId")]
    runtime = [r for r in roots if r["attrs"]["torch.compile.kind"] == "runtime"]
    compiles = [r for r in roots if r["attrs"]["torch.compile.kind"] != "runtime"]
    assert summary["compiles"] == len(compiles)
    kinds: dict[str, int] = {}
    for r in compiles:
        kinds[r["attrs"]["torch.compile.kind"]] = kinds.get(r["attrs"]["torch.compile.kind"], 0) + 1
    assert summary["by_kind"] == kinds
    compile_roots = {id(r) for r in compiles}
    wall = sum(compile_ns(r) for r in compiles) / 1e9
    assert abs(summary["wall_s"] - wall) < 1e-5, (summary["wall_s"], wall)
    assert summary["runtime"]["records"] == len(runtime)
    # phases: every span of a compile's trace, by name (the root by its own name)
    total: dict[str, int] = {}
    own: dict[str, int] = {}
    count: dict[str, int] = {}
    for s in spans:
        if trace_root(s)["attrs"].get("torch.compile.kind") in (None, "runtime"):
            continue
        took = compile_ns(s) if id(s) in compile_roots else _ns(s)  # a compile's root: the compile's time
        total[s["name"]] = total.get(s["name"], 0) + took
        # less its children on its own thread: a compile worker's build (torch.compile.attributed) ran beside it
        worker = "torch.compile.attributed" in s["attrs"]
        mine = [c for c in kids.get(s["spanId"], []) if ("torch.compile.attributed" in c["attrs"]) == worker]
        own[s["name"]] = own.get(s["name"], 0) + max(0, took - sum(_ns(c) for c in mine))
        count[s["name"]] = count.get(s["name"], 0) + 1
    phases = {p["name"]: p for p in summary["phases"]}
    assert set(phases) == set(total), set(phases) ^ set(total)
    for name, p in phases.items():
        assert p["count"] == count[name], name
        assert abs(p["total_s"] - total[name] / 1e9) < 1e-5 * max(1, count[name]), (name, p, total[name])
        assert abs(p["self_s"] - own[name] / 1e9) < 1e-5 * max(1, count[name]), (name, p, own[name])
    # recompiles, by the category on each root
    cats: dict[str, int] = {}
    for r in compiles:
        a = r["attrs"]
        cat = a.get("torch.compile.recompile_reason.category")
        if cat is None and a.get("torch.compile.recompile_reasons.categories"):
            cat = a["torch.compile.recompile_reasons.categories"]["values"][0]["stringValue"]
        if cat is not None:
            cats[cat] = cats.get(cat, 0) + 1
    assert summary["recompiles"]["by_category"] == cats
    assert summary["recompiles"]["total"] == sum(cats.values())
    codes: dict[str, int] = {}
    ends_frame = 0  # graph breaks torch could not resume after: not in its counters["graph_break"], counted apart
    for r in compiles:
        for e in r.get("events", []):
            if e["name"] == "torch.compile.graph_break":
                if any(kv["key"] == "torch.compile.graph_break.ends_frame" for kv in e["attributes"]):
                    ends_frame += 1
                    continue
                code = next(kv["value"]["stringValue"] for kv in e["attributes"] if kv["key"] == "torch.compile.graph_break.code")
                codes[code] = codes.get(code, 0) + 1
    got_codes: dict[str, int] = {}
    for g in summary["graph_breaks"]["by_code"]:
        got_codes[g["code"]] = got_codes.get(g["code"], 0) + g["count"]
    assert got_codes == codes and summary["graph_breaks"]["total"] == sum(codes.values())
    assert summary["graph_breaks"].get("ends_frame", 0) == ends_frame
    fails: dict[str, int] = {}
    for r in compiles:
        if "error.type" in r["attrs"]:
            fails[r["attrs"]["error.type"]] = fails.get(r["attrs"]["error.type"], 0) + 1
    assert summary["failures"]["by_type"] == fails
    assert summary["recompile_limit_hits"] == sum(1 for r in compiles if r["attrs"].get("torch.compile.recompile_limit_exceeded"))
    assert summary["eager_fallbacks"] == sum(1 for r in compiles if r["attrs"].get("torch.compile.eager_fallback"))
    # caches: the hits and misses on each root
    hits: dict[tuple[str, str, str], int] = {}
    for r in compiles:
        for key, v in r["attrs"].items():
            parts = key.split(".")
            if parts[:3] == ["torch", "compile", "cache"] and len(parts) == 6 and parts[4] in ("local", "remote"):
                k = (parts[3], parts[4], "miss" if parts[5] == "misses" else "hit")
                if int(v):
                    hits[k] = hits.get(k, 0) + int(v)
    got_cache = {(c["cache"], c["location"], c["result"]): c["count"] for c in summary["cache"] if c["result"] != "bypass"}
    assert got_cache == hits, (got_cache, hits)
    if compiles:
        slowest = max(compile_ns(r) for r in compiles) / 1e9
        assert abs(summary["slowest"][0]["duration_s"] - slowest) < 1e-5
        assert abs(sum(f["total_s"] for f in summary["frames"]) - wall) < 1e-5 * len(compiles) or len(summary["frames"]) == 50
        tree = summary["tree"]
        assert abs(tree["total_s"] - wall) < 1e-5 * len(compiles)
        assert abs(sum(f["total_s"] for f in tree["children"]) - wall) < 1e-5 * len(compiles)


def summary_screen(stdout: str) -> str:
    """The run summary's text in ``torch-otel replay``'s output (what follows it, the replay's own counts, left out)."""
    start = stdout.index("torch.compile run summary")
    end = stdout.find("\nphase events unmatched:", start)
    return stdout[start : end if end >= 0 else len(stdout)].strip("\n") + "\n"


def assert_the_screen_keeps_the_recompiling_frames(text: str, summary: dict[str, Any]) -> None:
    """A run summary's text (``text``) of ``summary`` (its JSON) at its line limit (issue 52): one screen, the frames
    that keep recompiling there with at least the costliest one and its fix, and each block that shows fewer rows
    than the JSON has says how many more there are."""
    from torch_otel._sinks.summary_text import MAX_LINES

    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    keeps = [f for f in summary["recompiling_frames"] if f["keeps_recompiling"]]
    assert keeps, "the run has frames that keep recompiling"
    start = lines.index(f"frames that keep recompiling: {len(keeps)} (the costliest first)")
    block = lines[start + 1 :]
    shown = [ln for ln in block if re.match(r"^  \S.*: \d+ recompiles", ln)]
    assert shown and any(ln.lstrip().startswith(("fix", "no hint")) for ln in block), block
    if len(shown) < len(keeps):
        assert block[-1] == f"  ({len(keeps) - len(shown)} more: --json or the HTML page lists them)", block
    for title, rows, what in (
        ("frames that cost most", summary["frames"], "frames"),
        ("slowest compiles", summary["slowest"], "compiles"),
    ):
        i = next(k for k, ln in enumerate(lines) if ln.startswith(title))
        n = next((k for k, ln in enumerate(lines[i + 1 :]) if not ln.startswith("  ") or ln.startswith("  (")), None)
        listed = lines[i + 1 : i + 1 + (n if n is not None else 0)]
        if len(listed) < min(5, len(rows)):  # cut below its usual rows: says how many more, and where
            assert lines[i + 1 + len(listed)] == f"  ({len(rows) - len(listed)} more {what}: --json or the HTML page lists them)"
