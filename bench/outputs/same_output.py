"""Does a change of the package's insides leave what users see alone? Compare two versions' outputs.

Runs ``torch-otel replay`` (``--json``, ``--html``, ``-o`` spans, the printed summary) on every committed
``TORCH_TRACE`` log under ``tests/data`` (each file alone, each multi-rank directory whole, one against a cache
baseline, one with ``--capture full --payloads``), ``torch-otel diff`` on logs, summaries and traces files, and
``torch-otel demo``, once with the package as it is at ``--base`` (a git ref, read with ``git archive``) and once
with the working tree's, from the same interpreter and the same ``tests/data``. Then compares:

- replay's and diff's JSON and the printed text: byte for byte;
- replay's and diff's HTML pages: the data they embed and their markup outside the scripts byte for byte, and the
  page as a browser draws it (``chromium --headless --dump-dom``, after the scripts ran; the scripts' own text and
  the render time left out) equal. The scripts themselves may move (a feature's part of the page is its own script,
  inlined after the pages' kit): what they draw is what is compared. Without chromium (``CHROMIUM=/path``, or on
  ``PATH``) the drawn pages are not compared and the run says so;
- replay's spans: byte for byte once trace and span ids are left out (ids are random);
- the demo's spans: equal once ids and times are left out (the demo really compiles: its durations vary, and torch's
  own times in whole units, ``torch.compile.guard_latency_us``). The demo's text and summary are not compared: they
  list frames and phases by time, which the clock orders.

Usage::

    .venv/bin/python -m bench.outputs.same_output --base 768e743          # exit 0: every output the same
    .venv/bin/python -m bench.outputs.same_output --base main --keep /tmp/cmp   # keep both sides' outputs to look at

Takes about a minute on 2 cores (the demo compiles 13 times with aot_eager on each side).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import ROOT

DATA = ROOT / "tests" / "data"

# A span field, or a summary key, that holds an id or a time: left out of the demo's comparison.
_ID_KEYS = {"traceId", "spanId", "parentSpanId"}
_TIME_KEYS = {"startTimeUnixNano", "endTimeUnixNano", "timeUnixNano"}


def _cases() -> list[tuple[str, list[str], list[str]]]:
    """(name, argv after ``torch-otel``, outputs to compare) for every case, paths relative to the case's directory."""
    logs = sorted(p for p in DATA.rglob("*") if p.is_file() and p.name.endswith((".log.gz", ".txt.gz", ".log")))
    cases: list[tuple[str, list[str], list[str]]] = []
    replay_out = ["--json", "summary.json", "--html", "page.html", "-o", "spans.jsonl"]
    for log in logs:
        name = "replay-" + str(log.relative_to(DATA)).replace("/", "-")
        cases.append((name, ["replay", str(log), *replay_out], ["summary.json", "page.html", "spans.jsonl"]))
    for d in sorted({p.parent for p in logs if len([q for q in logs if q.parent == p.parent]) > 1}):
        if d.name == "tlparse-corpus":  # unrelated logs side by side, each replayed alone above; its two ranks below
            ranks = [str(p) for p in logs if p.parent == d and p.name.startswith("multi_rank_runtime_rank_")]
            cases.append(("replay-tlparse-multi-rank", ["replay", *ranks, *replay_out], ["summary.json", "spans.jsonl"]))
            continue
        cases.append((f"replay-dir-{d.name}", ["replay", str(d), *replay_out], ["summary.json", "page.html", "spans.jsonl"]))
    cold = DATA / "cold-cache-cpp-3-ranks"
    base = DATA / "cache-baseline-2.13"
    cases.append(
        ("replay-against-baseline", ["replay", str(base), "--baseline", str(base), *replay_out], ["summary.json", "spans.jsonl"])
    )
    full = DATA / "tlparse-corpus" / "cache_hit_miss.log.gz"
    cases.append(
        (
            "replay-full-payloads",
            ["replay", str(full), "--capture", "full", "--payloads", "--json", "summary.json", "-o", "spans.jsonl"],
            ["summary.json", "spans.jsonl"],
        )
    )
    rank0, rank2 = cold / "dedicated_log_torch_trace_rank_0.log.gz", cold / "dedicated_log_torch_trace_rank_2.log.gz"
    cases.append(("diff-logs", ["diff", str(rank0), str(rank2), "--json", "diff.json"], ["diff.json"]))
    cases.append(
        (
            "diff-directories",
            ["diff", str(base), str(cold), "--json", "diff.json", "--html", "diff.html"],
            ["diff.json", "diff.html"],
        )
    )
    # a run summary and an OTLP-JSON traces file as diff's sides (replay writes them; the second step reads them)
    steps = ["replay", str(rank0), "--json", "a.json", "-o", "a.jsonl", "&&", "replay", str(rank2), "--json", "b.json"]
    steps += ["-o", "b.jsonl", "&&", "diff", "a.json", "b.json", "--json", "summaries.json"]
    steps += [
        "&&",
        "diff",
        "a.jsonl",
        "b.jsonl",
        "--json",
        "traces.json",
        "&&",
        "diff",
        "a.json",
        "b.jsonl",
        "--json",
        "mixed.json",
    ]
    cases.append(("diff-summaries-and-traces", steps, ["summaries.json", "traces.json", "mixed.json"]))
    # two jobs' directories of per-rank summaries: each side's ranks merged into one run (and compared rank by rank)
    steps = ["@mkdir", "a", "&&", "@mkdir", "b"]
    for r in range(3):
        steps += [
            "&&",
            "replay",
            str(cold / f"dedicated_log_torch_trace_rank_{r}.log.gz"),
            "--json",
            f"a/summary-{r}.json",
            "-o",
            f"a{r}.jsonl",
        ]
    for r in (0, 5):
        steps += [
            "&&",
            "replay",
            str(DATA / "tlparse-corpus" / f"multi_rank_runtime_rank_{r}.log.gz"),
            "--json",
            f"b/summary-{r}.json",
            "-o",
            f"b{r}.jsonl",
        ]
    steps += ["&&", "diff", "a", "b", "--json", "ranks.json", "&&", "diff", "b", "a", "--json", "back.json"]
    cases.append(("diff-summary-directories", steps, ["ranks.json", "back.json"]))
    cases.append(("diff-gate", ["diff", str(rank0), str(rank2), "--fail-on", "all", "--json", "diff.json"], ["diff.json"]))
    return cases


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
    env["PYTHONPATH"] = str(tree)  # before site-packages' editable finder: this tree's torch_otel is the one imported
    env["OTEL_METRICS_EXPORTER"] = "none"
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run(tree: Path, out: Path, argv: list[str]) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    probe = "import sys, torch_otel; sys.exit(0 if torch_otel.__file__.startswith(sys.argv[1]) else 9)"
    if subprocess.run([sys.executable, "-c", probe, str(tree)], env=_env(tree), cwd=out).returncode != 0:
        raise SystemExit(f"same_output: {tree}'s torch_otel is not the one imported; is PYTHONPATH overridden?")
    steps: list[list[str]] = [[]]
    for a in argv:  # "&&" separates the commands of a case
        steps.append([]) if a == "&&" else steps[-1].append(a)
    got = {"exit": "", "stdout": "", "stderr": ""}
    for step in steps:
        if step[:1] == ["@mkdir"]:
            (out / step[1]).mkdir()
            continue
        res = subprocess.run(
            [sys.executable, "-m", "torch_otel", *step],
            env=_env(tree),
            cwd=out,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        got["exit"] += f"{res.returncode} "
        got["stdout"] += res.stdout
        got["stderr"] += res.stderr
    return got


def _spans(path: Path, drop: set[str]) -> list[Any]:
    """The spans of an OTLP-JSON lines file, in file order, without the keys in ``drop`` (at any depth)."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in drop}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    reqs = [strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    for req in reqs:
        for rs in req.get("resourceSpans", []):
            for attr in rs.get("resource", {}).get("attributes", []):
                if attr["key"] == "service.instance.id":  # a random id per process
                    attr["value"] = "<id>"
    return reqs


def _demo_spans(path: Path, tree: Path) -> list[Any]:
    """The demo's spans, flattened in file order (batches split where the exporter's timer says), without ids and
    times; the demo's own workload file is named by its place in the tree, not the tree's place on disk."""
    text = re.sub(re.escape(str(tree)) + r"/torch_otel/[\w/]*?demo\.py", "<the demo's workload>", path.read_text())
    tmp = path.with_suffix(".normalised")
    tmp.write_text(text)
    out = []
    for req in _spans(tmp, _ID_KEYS | _TIME_KEYS):
        for rs in req.get("resourceSpans", []):
            resource = [a for a in rs.get("resource", {}).get("attributes", []) if a["key"] not in ("process.pid", "host.name")]
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    for a in sp.get("attributes", []) + [a for ev in sp.get("events", []) for a in ev.get("attributes", [])]:
                        if "doubleValue" in a.get("value", {}) or a["key"].endswith(("_us", "_ns")):
                            a["value"] = "<time>"  # durations, shares of time, times in whole units: the clock's
                    out.append({"resource": resource, "scope": ss.get("scope"), **sp})
    return out


CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium")
_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S)


def _page(path: Path) -> dict[str, str]:
    """An HTML page as compared: the data it embeds (each ``application/json`` script), its markup with every script's
    text left out, and, with chromium, the page as drawn, scripts' text and the time it took to draw left out."""
    text = path.read_text()
    data = "\n".join(body for attrs, body in _SCRIPT.findall(text) if "application/json" in attrs)
    parts = {"embedded data": data, "markup": _SCRIPT.sub(r"<script\1></script>", text)}
    if CHROMIUM:
        with tempfile.TemporaryDirectory(prefix="profile-") as profile:
            cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
            cmd += ["--disable-extensions", "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND"]
            cmd += [f"--user-data-dir={profile}", "--window-size=1400,1000", "--virtual-time-budget=5000", "--dump-dom"]
            done = subprocess.run([*cmd, path.as_uri()], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        drawn = re.sub(r' data-render-ms="\d+"', "", _SCRIPT.sub(r"<script\1></script>", done.stdout))
        parts["as drawn"] = drawn if done.returncode == 0 and "<body" in drawn else f"chromium failed: {done.stderr[-500:]}"
    return parts


def _compare(name: str, a: Any, b: Any, report: list[str]) -> bool:
    if a == b:
        return True
    ta = a if isinstance(a, str) else json.dumps(a, indent=1, sort_keys=True)
    tb = b if isinstance(b, str) else json.dumps(b, indent=1, sort_keys=True)
    diff = list(difflib.unified_diff(ta.splitlines(), tb.splitlines(), "base", "new", lineterm="", n=2))
    report.append(f"--- {name}: differs\n" + "\n".join(diff[:60]))
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="main", help="the git ref whose torch_otel is the reference (default: main)")
    p.add_argument("--keep", type=Path, help="write both sides' outputs under this directory and keep them")
    p.add_argument("--no-demo", action="store_true", help="leave the demo out (it compiles: the slow part)")
    args = p.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="same-output-"))
    base_tree = work / "base-tree"
    if base_tree.exists():
        shutil.rmtree(base_tree)
    base_tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "torch_otel"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive.stdout, check=True)
    sides = {"base": base_tree, "new": ROOT}
    report: list[str] = []
    same = differ = 0
    for name, argv_, outputs in _cases():
        got: dict[str, dict[str, Any]] = {}
        for side, tree in sides.items():
            out = work / side / name
            if out.exists():
                shutil.rmtree(out)
            res = _run(tree, out, argv_)
            files: dict[str, Any] = {"exit": res["exit"], "stdout": res["stdout"], "stderr": res["stderr"]}
            for o in outputs:
                f = out / o
                if not f.exists():
                    files[o] = None
                elif o.endswith(".jsonl"):
                    files[o] = _spans(f, _ID_KEYS)
                elif o.endswith(".html"):
                    files.update({f"{o} ({k})": v for k, v in _page(f).items()})
                else:
                    files[o] = f.read_text()
            got[side] = files
        ok = all(_compare(f"{name} {k}", got["base"][k], got["new"][k], report) for k in got["base"])
        same, differ = same + ok, differ + (not ok)
        print(f"{'same   ' if ok else 'DIFFERS'}  {name}  (exit {got['new']['exit']})")
    if not args.no_demo:
        got = {}
        for side, tree in sides.items():
            out = work / side / "demo"
            if out.exists():
                shutil.rmtree(out)
            res = _run(tree, out, ["demo", "--metrics-port", "0", "--traces-file", "demo.jsonl"])
            got[side] = {"exit": res["exit"], "spans": _demo_spans(out / "demo.jsonl", tree)}
        ok = all(_compare(f"demo {k}", got["base"][k], got["new"][k], report) for k in got["base"])
        same, differ = same + ok, differ + (not ok)
        n = len(got["new"]["spans"])
        print(f"{'same   ' if ok else 'DIFFERS'}  demo  ({n} spans, ids and times left out)")
    print("\n".join(report))
    if not CHROMIUM:
        print("no chromium: the HTML pages' data and markup were compared, not the pages as drawn")
    print(f"{same} same, {differ} differ (base {args.base}, outputs under {work})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
