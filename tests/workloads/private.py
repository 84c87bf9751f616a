"""A job whose source holds text that must never leave the process (see test_security.py).

A graph break, a shape recompile, a failing compile and a value guard, each
with distinctive source text, constants and locals.
"""

import os

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch

torch._dynamo.config.automatic_dynamic_shapes = False
PRIVATE_CONSTANT = 31.4159265


def secret_sauce(x, scale):
    hidden_local_value = x * PRIVATE_CONSTANT + scale  # ZQX-COMMENT-MARKER
    torch._dynamo.graph_break()
    return hidden_local_value.cos() + 2.7182818


f = torch.compile(secret_sauce, backend="aot_eager")
f(torch.randn(4, requires_grad=True), 0.123456789).sum().backward()
f(torch.randn(5), 0.123456789)
f(torch.randn(5), 0.987654321)  # a value guard on ``scale``


def broken_recipe(x):
    return x + torch.ones(3, 3) @ torch.ones(4, 4) * 42.424242  # ZQX-FAILING-LINE


try:
    torch.compile(broken_recipe, backend="eager")(torch.randn(3))
except Exception as exc:  # noqa: BLE001
    print("expected failure:", type(exc).__name__)
print("done")
