"""The ``torch-otel`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch-otel", description="OpenTelemetry for torch.compile")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile a small workload and show its traces and metrics locally")
    demo.add_argument("--traces-file", default="torch-otel-demo.jsonl", help="OTLP-JSON file for the spans")
    demo.add_argument("--metrics-port", type=int, default=9464, help="local /metrics port (0: any free port)")
    demo.add_argument("--serve", type=float, default=0.0, help="keep /metrics up this many seconds after the run")
    demo.add_argument("--backend", default="aot_eager", help="torch.compile backend (aot_eager, eager, inductor)")
    rep = sub.add_parser("replay", help="replay TORCH_TRACE logs into traces (and metrics)")
    rep.add_argument("paths", nargs="+", metavar="PATH", help="a TORCH_TRACE log, a .gz of one, or a TORCH_TRACE directory")
    rep.add_argument("--output", "-o", help="write spans as OTLP-JSON lines to this file instead of exporting per OTEL_*")
    rep.add_argument(
        "--capture",
        choices=("default", "full"),
        default="default",
        help="full: also artifact events (names, sizes, hashes), as live full capture",
    )
    rep.add_argument("--payloads", action="store_true", help="attach payload contents (code, graphs) to spans: opt-in")
    run = sub.add_parser(
        "run",
        help="run a command with the bridge on in every Python process it starts",
        description="torch-otel run -- torchrun --nproc-per-node 2 train.py",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args.cmd)
    if args.command == "replay":
        return _replay(args)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(args.traces_file, args.metrics_port, args.serve, args.backend)
    return 2


def _run(cmd: list[str]) -> int:
    """Put the auto-start ``sitecustomize`` first on PYTHONPATH and exec the command (as opentelemetry-instrument does)."""
    import os
    import shutil
    from pathlib import Path

    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("torch-otel run: no command given; use: torch-otel run -- python train.py", file=sys.stderr)
        return 2
    program = shutil.which(cmd[0])
    if program is None:
        print(f"torch-otel run: command not found: {cmd[0]!r}", file=sys.stderr)
        return 127
    autostart = str(Path(__file__).parent / "_autostart")
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != autostart]
    os.environ["PYTHONPATH"] = os.pathsep.join([autostart, *path])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, cmd)
    return 0  # not reached


def _replay(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ._config import load_settings
    from ._file_exporter import OTLPJsonFileSpanExporter
    from ._ids import UrandomIdGenerator
    from ._replay import replay_paths
    from ._setup import build_tracer_provider, job_resource, sdk_disabled
    from ._spans import SpanMapper, SpanSink

    settings = load_settings()
    if args.payloads:
        settings = dataclasses.replace(settings, capture_payloads=True)
    provider = None
    if args.output:
        if os.path.exists(args.output):
            os.remove(args.output)
        provider = TracerProvider(resource=job_resource(), id_generator=UrandomIdGenerator())
        provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileSpanExporter(args.output), max_queue_size=65536))
    elif not sdk_disabled():
        provider = build_tracer_provider()
    sinks = []
    if provider is not None:
        sinks.append(SpanSink(SpanMapper(provider.get_tracer("torch_otel.replay"), settings, live=False)))
    code, _ = replay_paths(args.paths, sinks, keep_all_payloads=args.payloads, artifacts=args.capture == "full")
    if provider is not None:
        provider.shutdown()
    if args.output and code == 0:
        print(f"spans written to {args.output}")
    return code


if __name__ == "__main__":
    sys.exit(main())
