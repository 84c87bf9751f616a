"""A graph break inside a loop, compiled with the bridge on (``torch_otel.auto``): dynamo skips the whole frame.

``python loop_break.py OUT``: calls the compiled function for two sizes (the frame compiles once, fails and runs in
eager from then on), and writes torch's own counters to ``OUT/counters.json`` once the bridge processed the compile.
"""

import json
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)


def accumulate(x):
    for i in range(3):
        x = x + i
        torch._dynamo.graph_break()  # inside a loop: dynamo cannot resume here, and skips the whole frame
    return x


compiled = torch.compile(accumulate, backend="eager")
for n in (3, 4):
    assert torch.equal(compiled(torch.zeros(n)), torch.full((n,), 3.0))

import torch_otel  # noqa: E402

torch_otel.force_flush()
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / "counters.json").write_text(json.dumps({k: dict(v) for k, v in counters.items() if k in ("unimplemented", "graph_break")}))
