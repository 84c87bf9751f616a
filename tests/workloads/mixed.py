"""A workload with a graph break, recompiles, a failure, a recompile-limit hit, compiled autograd and inductor.

Run by the tests in a subprocess, with or without the bridge (``WITH_BRIDGE=1``
imports ``torch_otel.auto``) and with or without ``TORCH_TRACE``. Compiled
autograd (``COMPILED_AUTOGRAD=1``) and an inductor compile (``INDUCTOR=1``) are opt-in.
"""

import os

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch

torch._dynamo.config.automatic_dynamic_shapes = False


def f(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


cf = torch.compile(f, backend="aot_eager")
cf(torch.randn(4, requires_grad=True)).sum().backward()
cf(torch.randn(8))
cf(torch.randn(8, dtype=torch.float64))


def bad(x):
    return x + torch.randn(3, 3) @ torch.randn(4, 4)


try:
    torch.compile(bad, backend="eager")(torch.randn(3))
except Exception as exc:  # noqa: BLE001
    print("expected failure:", type(exc).__name__)

torch._dynamo.config.recompile_limit = 2


def shift(x):
    return x + 1


cs = torch.compile(shift, backend="eager")
for n in range(1, 5):
    cs(torch.randn(n))

if os.environ.get("COMPILED_AUTOGRAD") == "1":
    model = torch.nn.Linear(4, 4)
    cm = torch.compile(model, backend="aot_eager")
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="aot_eager")):
        cm(torch.randn(2, 4)).sum().backward()
        cm(torch.randn(3, 4)).sum().backward()
if os.environ.get("INDUCTOR") == "1":  # the same function as test_inductor.py: a warm shared cache

    def g(x):
        return torch.nn.functional.gelu(x) * 2

    torch.compile(g, backend="inductor")(torch.randn(16))
print("done")
