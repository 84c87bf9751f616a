"""A server's start-up on a CUDA GPU: CUDA's initialisation, a CUDA graph captured by hand and by inductor, then ready.

``python startup_gpu.py``, ``STARTUP_OUT`` and ``TORCH_OTEL_STARTUP_END=ready`` set (tests/workloads/startup_probe.py).
Stamps: ``imports0/1``; ``cuda0/1`` around the first CUDA call (``torch.cuda.init()``: CUDA's lazy initialisation);
``graph0/1`` around a ``torch.cuda.graph`` capture written by hand; ``warm0/1`` around three calls of a model compiled
with ``mode="reduce-overhead"`` (inductor's cudagraph trees record it at one of them); ``ready`` just before
``ready()`` ends the start-up.
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code

startup_probe.stamp("imports0")
import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401

startup_probe.stamp("imports1")
startup_probe.stamp("cuda0")
torch.cuda.init()
startup_probe.stamp("cuda1")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
static = torch.randn(16, 64, device="cuda")
with torch.no_grad():
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(static)  # warm-up outside the capture, as torch's documentation asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    startup_probe.stamp("graph0")
    with torch.cuda.graph(graph):
        out = model(static)
    startup_probe.stamp("graph1")
    graph.replay()
    torch.cuda.synchronize()
    compiled = torch.compile(model, mode="reduce-overhead")
    startup_probe.stamp("warm0")
    for _ in range(3):
        compiled(torch.randn(16, 64, device="cuda"))
    torch.cuda.synchronize()
    startup_probe.stamp("warm1")
startup_probe.stamp("ready")
startup_probe.ready()
