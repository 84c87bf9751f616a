"""The fields of torch's ``CompilationMetrics`` dataclass in a release, read from its ``torch/_dynamo/utils.py``.

    python extract.py path/to/torch/_dynamo/utils.py > fields-2.15.0.txt

How the committed lists were made (once per release, no torch imported): ``pip download --no-deps torch==X`` (the
registry's wheel of each release), ``unzip -p torch-X-*.whl torch/_dynamo/utils.py``, then this script. The lists are
what tests/fast/test_compilation_metrics.py checks the package against.
"""

from __future__ import annotations

import ast
import sys


def fields(source: str) -> list[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "CompilationMetrics":
            return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    raise SystemExit("no CompilationMetrics class in it")


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        print("\n".join(fields(fh.read())))
