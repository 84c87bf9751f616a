"""Compiled autograd over a compiled model, three batch sizes (the tests run it with TORCH_LOGS=compiled_autograd_verbose)."""

import torch

import torch_otel.auto  # noqa: F401

model = torch.nn.Linear(4, 4)
compiled = torch.compile(model, backend="eager")
with torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager")):
    for n in (2, 3, 3):
        compiled(torch.randn(n, 4)).sum().backward()
print("done")
