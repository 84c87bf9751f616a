"""The benchmarks (docs/benchmarks.md), by subject, run as modules from the repository's root:
``.venv/bin/python -m bench.cost.run``. Their results are kept apart from the code, in ``bench/results/``.

- ``cost``: what the bridge costs: a compile, a process's start-up, a training step, memory, the rank sampler, counting
  graph calls, divergence detection;
- ``diff``: ``torch-otel diff``'s own cost, and how compile time varies between identical runs (its gate's defaults);
- ``fleet``: a job of thousands of ranks against real metrics and traces pipelines;
- ``gpu``: live capture on a CUDA GPU, checked against torch's own record;
- ``outputs``: whether a change leaves what users see alone (``same_output``), and torch's own logging tests with the
  bridge on.

Shared with the tests: the real receivers and processes (``tests.servers``, ``tests.helpers``), imported as a package.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
RESULTS = ROOT / "bench" / "results"  # every benchmark's results (JSON, and results.md)
