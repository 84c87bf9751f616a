"""Compiles one frame, then starts a second compile whose backend never finishes: a job killed mid-compile.

Prints COMPILING when the second compile is under way. Run under ``torch-otel run``.
"""

import time

import torch


def slow_backend(gm, example_inputs):
    print("COMPILING", flush=True)
    time.sleep(120)
    return gm.forward


torch.compile(lambda x: x.cos() * 2, backend="eager")(torch.randn(3))
torch.compile(lambda x: x.sin() + 1, backend=slow_backend)(torch.randn(3))
print("not reached")
