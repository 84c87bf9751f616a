"""The ``torch-otel`` command.

``torch-otel run`` prefixes every job's command, so its path imports nothing
beyond ``os`` and ``sys`` before it execs the command (argparse, typing and
dataclasses alone cost a start-up several milliseconds and megabytes).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing is not imported on `torch-otel run`'s path
if TYPE_CHECKING:
    import argparse
    from typing import Any, NoReturn


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"] and argv[1:2] not in (["-h"], ["--help"]):
        return _run(argv[1:])
    return _parse_and_dispatch(argv)


def _parse_and_dispatch(argv: list[str]) -> int:
    import argparse

    class Version(argparse.Action):
        """``--version``: looks the versions up only when asked (importlib.metadata is slow to import)."""

        def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
            super().__init__(option_strings, dest, nargs=0, **kwargs)

        def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
            print(version_line())
            parser.exit()

    class Parser(argparse.ArgumentParser):
        """A bad argument is one line naming it, and exit 2 (argparse alone prints its whole usage first)."""

        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{self.prog}: {message}; see {self.prog} --help\n")

    parser = Parser(prog="torch-otel", description="OpenTelemetry for torch.compile")
    parser.add_argument("--version", action=Version, help="print torch-otel's and torch's versions, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    defaults = argparse.ArgumentDefaultsHelpFormatter
    demo = sub.add_parser(
        "demo",
        help="compile a small workload and show its traces and metrics locally",
        description="Compiles a small workload with the bridge on (no collector needed): prints each compile's trace, "
        "writes the spans to a file and serves the metrics on 127.0.0.1. Output paths (--traces-file, --html, --json) "
        "are checked before the workload runs (exit 2 if one cannot be written); their missing parent directories "
        "are created.",
        formatter_class=defaults,
    )
    demo.add_argument("--traces-file", default="torch-otel-demo.jsonl", help="OTLP-JSON file for the spans")
    demo.add_argument("--metrics-port", type=_port, default=9464, help="local /metrics port (0: any free port)")
    demo.add_argument("--serve", type=_seconds, default=0.0, help="keep /metrics up this many seconds after the run")
    demo.add_argument("--backend", default="aot_eager", help="torch.compile backend (aot_eager, eager, inductor)")
    demo.add_argument("--all-phases", action="store_true", help="show every phase in the trees, those under 1 ms too")
    demo.add_argument("--html", metavar="PATH", help="also write the run's compile-time page (icicle chart and tables)")
    demo.add_argument("--json", metavar="PATH", help="also write the run summary as JSON")
    doc = sub.add_parser(
        "doctor",
        help="say how the installed torch stands: tested or not, and which of torch's hooks the bridge finds",
        description="Lists each point where torch-otel attaches to torch, and whether the installed torch has it.",
    )
    doc.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH (the release matrix's report)")
    rep = sub.add_parser(
        "replay",
        help="replay TORCH_TRACE logs into traces (and metrics)",
        description="Turns TORCH_TRACE logs (tlparse's input) into the same spans and metrics as live capture, "
        "exported per the OTEL_* settings or written to a file; prints a summary. Every path, argument and OTLP setting "
        "is checked before the replay starts. Exit: 0 done, 1 nothing parsed, 2 a missing path or an argument or "
        "setting it cannot use, 3 spans not exported to a collector you named.",
    )
    rep.add_argument("paths", nargs="+", metavar="PATH", help="a TORCH_TRACE log, a .gz of one, or a TORCH_TRACE directory")
    rep.add_argument("--output", "-o", help="write spans as OTLP-JSON lines to this file instead of exporting per OTEL_*")
    rep.add_argument(
        "--capture",
        choices=("default", "full"),
        default="default",
        help="full: also artifact events (names, sizes, hashes), as live full capture",
    )
    rep.add_argument("--payloads", action="store_true", help="attach payload contents (code, graphs) to spans: opt-in")
    rep.add_argument(
        "--pushgateway",
        metavar="URL",
        default=os.environ.get("TORCH_OTEL_PUSHGATEWAY_URL"),
        help="push the run's metrics to this Prometheus Pushgateway (default: $TORCH_OTEL_PUSHGATEWAY_URL)",
    )
    rep.add_argument(
        "--json",
        metavar="PATH",
        help="also write the run summary, with the cross-rank divergence report, as JSON to PATH (for CI); "
        "- writes it to stdout, and the text to stderr",
    )
    rep.add_argument(
        "--html",
        metavar="PATH",
        help="write one self-contained page to PATH: where the compile time went, as an icicle chart and tables",
    )
    rep.add_argument("--run", help="the run the log came from: the `run` label of pushed metrics (default: the path's name)")
    rep.add_argument(
        "--baseline",
        metavar="PATH",
        help="explain cache misses against this earlier run: its TORCH_TRACE log or directory, or a cache key index "
        "(keys-rank<R>.json, or the directory of them)",
    )
    dif = sub.add_parser(
        "diff",
        help="what changed between two runs' compiles; with --fail-on, a CI gate",
        description="Compares two runs on one screen: compile time in total, per frame (matched by function and "
        "file:line) and per phase; graph breaks, recompile categories, failures and recompile-limit hits new or gone; "
        "cache hit rates and the cause of each new miss; each rank of a job; and the frames that keep recompiling, "
        "with the fix. Each side is a TORCH_TRACE log or directory, a run summary's JSON, or an OTLP-JSON traces file "
        "(docs/diff.md). --json and --html are checked before either side is read. Exit: 0 done (the gate passed), "
        "1 a side could not be read, 2 a missing path, an output that cannot be written or a bad --fail-on, 4 the gate "
        "failed.",
    )
    dif.add_argument("base", metavar="BASE", help="the run to compare against (e.g. the main branch's)")
    dif.add_argument("new", metavar="NEW", help="the run to compare")
    dif.add_argument("--json", metavar="PATH", help="also write every fact as JSON to PATH; - writes it to stdout")
    dif.add_argument("--html", metavar="PATH", help="write a self-contained side-by-side page to PATH")
    dif.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="CONDITIONS",
        help="exit 4 when one of these changed (comma-separated; repeatable): time[:50%%][:4s] (the run's compile "
        "time grew past every threshold given; default 50%%:4s), frame-time[:100%%][:3s] (one frame's), "
        "graph-breaks (a new one), recompiles (a new category on a frame), failures (a new failure or recompile-limit "
        "hit), cache[:0%%] (a hit rate fell by more than these points), or all",
    )
    run = sub.add_parser(
        "run",
        help="run a command with the bridge on in every Python process it starts",
        description="Runs COMMAND with the bridge on in every Python process it starts (torchrun's ranks "
        "included), configured by the OTEL_* and TORCH_OTEL_* settings. Example: "
        "torch-otel run -- torchrun --nproc-per-node 2 train.py",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        print("\ntorch-otel: name a command; try: torch-otel demo", file=sys.stderr)
        return 2
    if args.command == "run":
        return _run(args.cmd)
    if args.command == "replay":
        return _replay(args)
    if args.command == "diff":
        from ._pipeline.diff_command import DiffOptions, run_diff

        return run_diff(DiffOptions(args.base, args.new, args.json, args.html, tuple(args.fail_on)))
    if args.command == "doctor":
        return _doctor(args.json)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(
            args.traces_file,
            args.metrics_port,
            args.serve,
            args.backend,
            all_phases=args.all_phases,
            html=args.html,
            json_path=args.json,
        )
    return 2


def _port(raw: str) -> int:
    """``--metrics-port``: a TCP port, 0 to 65535 (0: any free one)."""
    import argparse

    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port; use 0 to 65535 (0: any free port)")
    return port


def _seconds(raw: str) -> float:
    """``--serve``: a number of seconds, 0 or more."""
    import argparse
    import math

    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds; use 0 or more")
    return seconds


def version_line() -> str:
    """``torch-otel 0.2.0 (torch 2.13.0+cpu: a tested release; tested: torch >= 2.10, < 2.16)``, without importing torch."""
    from ._version import SUPPORTED_TORCH, __version__, torch_version

    installed = torch_version()
    if installed == "unknown":
        return f"torch-otel {__version__} (torch not installed; tested: {SUPPORTED_TORCH})"
    return f"torch-otel {__version__} (torch {installed}: {_STATUS[_tested_status(installed)]}; tested: {SUPPORTED_TORCH})"


_STATUS = {
    "tested": "a tested release",
    "newer": "newer than the tested releases, captured on a best-effort basis",
    "older": "older than the supported range, not supported",
    "unknown": "an unreadable version, captured on a best-effort basis",
}


def _tested_status(installed: str) -> str:
    from ._attach.releases import tested_status

    return tested_status(installed)


def _doctor(json_path: str | None) -> int:
    """Each attach point, and whether this torch has it; exit 1 when a row this torch should have is missing."""
    import json

    from ._core.paths import check_writable

    problem = check_writable(json_path, "--json") if json_path else None
    if problem:
        print(f"torch-otel doctor: {problem}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as exc:
        print(f"torch-otel doctor: torch cannot be imported ({exc}); install the torch you run", file=sys.stderr)
        return 2

    from ._attach.releases import release_line
    from ._capture.attach_table import doctor_rows
    from ._version import SUPPORTED_TORCH, __version__

    rows = doctor_rows(str(torch.__version__))
    status = _tested_status(str(torch.__version__))
    print(version_line())
    line = release_line(str(torch.__version__))
    if line:
        print(line)
    print("What torch-otel captures on this torch:")
    for r in rows:
        if r["status"] != "covered":  # another release's way to a row shown: nothing for this torch
            print(f"  {r['status']:<7}  {r['says']}")
    features = _features_of_your_own()
    if features:
        print("Features of your own (torch_otel.features: installed packages, TORCH_OTEL_FEATURES):")
        for feat in features:
            said = f"{feat['feature']} ({feat['module']})" if feat["feature"] else feat["module"]
            print(f"  {'yes' if feat['loaded'] else 'no':<7}  {said}" + (f": {feat['problem']}" if feat["problem"] else ""))
    if json_path:
        doc: dict[str, object] = {"torch": str(torch.__version__), "torch_otel": __version__, "status": status}
        doc.update(supported=SUPPORTED_TORCH, sources=rows, features=features)
        if os.path.dirname(json_path):
            os.makedirs(os.path.dirname(json_path), exist_ok=True)  # missing parents are created, as every writer does
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 1 if any(r["expected"] and not r["present"] for r in rows) or any(not feat["loaded"] for feat in features) else 0


def _features_of_your_own() -> list[dict[str, object]]:
    """Each feature from outside the package the bridge would load here: its module, its name, whether it loads, and
    why not (one line), as the bridge's registry judges it."""
    from ._features.registry import REGISTERED, Row, installed, outside, own

    out: list[dict[str, object]] = []
    taken = {f.name for f in own()}
    for row in (*(Row(m) for m in REGISTERED), *installed()):
        feature, problem, _ = outside(row, taken)
        if feature is not None:
            taken.add(feature.name)
        out.append({"module": row.module, "feature": feature and feature.name, "loaded": feature is not None,
                    "problem": problem})  # fmt: skip
    return out


def _run(cmd: list[str]) -> int:
    """Put the auto-start ``sitecustomize`` first on PYTHONPATH and exec the command (as opentelemetry-instrument does)."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("torch-otel run: no command given; use: torch-otel run -- python train.py", file=sys.stderr)
        return 2
    autostart = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autostart")
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != autostart]
    os.environ["PYTHONPATH"] = os.pathsep.join([autostart, *path])
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(cmd[0], cmd)  # searches PATH as a shell does; returns only on failure
    except FileNotFoundError:
        print(f"torch-otel run: command not found: {cmd[0]!r}", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"torch-otel run: cannot run {cmd[0]!r} ({exc.strerror}); check that it is an executable program", file=sys.stderr)
        return 126


def _replay(args: argparse.Namespace) -> int:
    from ._pipeline.replay import ReplayOptions, run_replay

    return run_replay(
        ReplayOptions(
            paths=args.paths,
            output=args.output,
            capture=args.capture,
            payloads=args.payloads,
            pushgateway=args.pushgateway,
            json_path=args.json,
            html=args.html,
            run=args.run,
            baseline=args.baseline,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
