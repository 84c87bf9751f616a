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
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(args.traces_file, args.metrics_port, args.serve, args.backend)
    return 2


if __name__ == "__main__":
    sys.exit(main())
