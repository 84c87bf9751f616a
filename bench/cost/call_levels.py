"""What a graph-call counter costs a call in Python alone, counted in instructions: the counter torch-otel puts in front
of each compiled graph (``torch_otel._features.graph_calls.counters._counting``), zero, one and two deep, in front of
three kinds of callee torch installs (a Python function, an object with ``__call__``, a boxed function taking the
argument list), each called from a bytecode loop as dynamo's generated code calls its graph.

    .venv/bin/python -m bench.cost.call_levels          # writes bench/results/instructions_call_levels.json

Each count is a fresh process under ``valgrind --tool=callgrind`` (the whole process, ``PYTHONHASHSEED=0``); a level's
cost per call is its count less the same callee's count with no counter, over the calls. It answers whether the
first counter in front of a graph costs more than a further one (the steady step's counts, docs/benchmarks.md, "The
steady step, counted", put the first at 4,538 instructions a call and each further one at 1,792): in Python alone,
each level costs the same whichever it is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "instructions_call_levels.json"
CALLS = 100_000
KINDS = ("function", "callable_object", "boxed")
LEVELS = (0, 1, 2)


def child(kind: str, levels: int, calls: int) -> None:
    """``calls`` calls of a callee of ``kind`` behind ``levels`` counters, from a compiled loop (after a warm-up of
    1,000, which lets the interpreter specialise the call as it would in a long run)."""
    from torch_otel._features.graph_calls.counters import _counting

    def function(a: object, b: object, c: object) -> object:
        return a

    class Graph:
        def __call__(self, a: object, b: object, c: object) -> object:
            return a

    def boxed(args: list[object]) -> object:
        return args[0]

    fn = {"function": function, "callable_object": Graph(), "boxed": boxed}[kind]
    for _ in range(levels):
        fn = _counting(fn)
    call = "F([1, 2, 3])" if kind == "boxed" else "F(1, 2, 3)"
    scope: dict[str, object] = {"F": fn}
    exec(compile(f"def loop(n):\n    for _ in range(n):\n        {call}\n", "generated", "exec"), scope)  # noqa: S102
    loop = scope["loop"]
    loop(1_000)  # type: ignore[operator]
    loop(calls)  # type: ignore[operator]


def count(kind: str, levels: int, calls: int) -> int:
    from bench.cost.instructions import python_binary

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                python_binary(),
                "-m",
                "bench.cost.call_levels",
                "--child",
                kind,
                str(levels),
                str(calls),
            ],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            cwd=Path(__file__).resolve().parents[2],
            check=True,
            capture_output=True,
        )
        for line in out.read_text().splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no totals for {kind} {levels}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=CALLS)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--child", nargs=3, metavar=("KIND", "LEVELS", "CALLS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]))
        return
    from bench.cost.instructions import valgrind_version

    if valgrind_version() is None:
        sys.exit("valgrind is not installed (apt-get install valgrind): it counts the instructions")
    rows = {}
    for kind in KINDS:
        counts = {lv: count(kind, lv, a.calls) for lv in LEVELS}
        rows[kind] = {
            "counts": counts,
            "first_counter_per_call": (counts[1] - counts[0]) / a.calls,
            "second_counter_per_call": (counts[2] - counts[1]) / a.calls,
        }
        print(
            f"{kind:16} first counter {rows[kind]['first_counter_per_call']:7.0f}  "
            f"second {rows[kind]['second_counter_per_call']:7.0f} instructions a call"
        )
    results = {
        "command": "python -m bench.cost.call_levels",
        "calls": a.calls,
        "valgrind": valgrind_version(),
        "python": sys.version.split()[0],
        "kinds": rows,
    }
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
