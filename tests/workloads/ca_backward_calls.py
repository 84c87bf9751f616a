"""A small MLP (``aot_eager``, CPU) trained with compiled autograd on or off: the calls of its AOT backwards.

``python ca_backward_calls.py OUT MODE``, with the bridge on (``torch_otel.auto``):

- ``noca``: batches 4, 4, 8, 8, 3, each with a backward: ``0/0`` (batch 4) runs twice with its lazily compiled
  backward, ``0/1`` (a dynamic batch: its backward saves a size, so AOTAutograd compiles it with its forward) three
  times;
- ``ca``: the same under ``torch._dynamo.compiled_autograd._enable``: compiled autograd traces each AOT backward into
  its own graphs (``!N/...``), so no AOT backward runs as its own graph (``0/0``'s never compiles, ``0/1``'s was
  compiled with its forward and never runs). Then, with compiled autograd off, batches 8 and 3: ``0/1``'s backward
  runs twice as its own graph;
- ``config``: the steps of ``ca`` under compiled autograd, with ``torch._dynamo.config.compiled_autograd`` and the
  step (forward, loss and backward) compiled: compiled autograd is on while the compiled step runs (not in the tests,
  to keep them short: the same checks hold).

Writes ``OUT/torch.json``: torch's own counts (``counters["stats"]``, ``counters["compiled_autograd"]``), the calls made,
and the bridge's graph calls as they stand after the steps under compiled autograd (or all of ``noca``'s): the run
summary's part, and the live state as its metrics read it (calls per frame and pass, dead compile seconds). The run
summary at exit (``TORCH_OTEL_SUMMARY``) has every step's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters

import torch_otel
import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)
from torch_otel._pipeline import bridge

out, mode = Path(sys.argv[1]), sys.argv[2]
if mode not in ("noca", "ca", "config"):
    raise SystemExit(f"unknown mode {mode!r}")

BATCHES = (4, 4, 8, 8, 3)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
compiled = torch.compile(model, backend="aot_eager")


def step(n: int) -> None:
    compiled(torch.randn(n, 16)).sum().backward()


if mode == "config":
    torch._dynamo.config.compiled_autograd = True

    @torch.compile(backend="aot_eager")
    def train_step(x: torch.Tensor) -> None:
        model(x).sum().backward()

    for n in BATCHES:
        train_step(torch.randn(n, 16))
elif mode == "ca":
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="aot_eager")):
        for n in BATCHES:
            step(n)
else:
    for n in BATCHES:
        step(n)

torch_otel.force_flush()
live = bridge.current()
state = live.pipeline.state("graph_calls")
state.graphs.sample()
(out / "torch.json").write_text(
    json.dumps(
        {
            "mode": mode,
            "steps": len(BATCHES),
            "stats": dict(counters["stats"]),
            "compiled_autograd": dict(counters["compiled_autograd"]),
            "graph_calls": json.loads(json.dumps(live.summary.to_dict()["graph_calls"])),
            "frames": [[frame, pass_, n] for (frame, pass_), n in sorted(state.frames(32).items())],
            "dead_compile_s": state.dead_compile_s(),
        }
    )
)
if mode == "ca":  # compiled autograd off: 0/1's backward, compiled with it on, runs as its own graph
    for n in (8, 3):
        step(n)
assert torch_otel.internal_error_count() == 0
print("done", flush=True)
