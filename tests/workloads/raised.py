"""Failed compiles that raise into the caller, beside one that leaves its frame in eager (the bridge on).

``python raised.py``: three frames, each compiled with ``backend="eager"`` unless told:

- ``broken_backend``: a backend that raises: torch raises ``BackendCompilerFailed`` into the caller (no
  ``suppress_errors``), and the next call compiles again;
- ``whole``: ``fullgraph=True`` around a graph break: torch raises ``Unsupported`` into the caller;
- ``looped``: a graph break inside a loop: torch suppresses its ``Unsupported`` and runs the frame uncompiled.

It prints one line per call that raised, ``raised <function> <exception type>``.
"""

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)


def failing(gm, example_inputs):
    raise RuntimeError("this backend fails")


def broken_backend(x):
    return x * 2


def whole(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def looped(x):
    for i in range(2):
        x = x + i
        torch._dynamo.graph_break()
    return x


for fn, kw in ((broken_backend, {"backend": failing}), (whole, {"backend": "eager", "fullgraph": True})):
    compiled = torch.compile(fn, **kw)
    for _ in range(2):
        try:
            compiled(torch.ones(3))
        except Exception as exc:  # noqa: BLE001 - the failure raised into this caller, as torch raises it
            print("raised", fn.__name__, type(exc).__name__, flush=True)
assert torch.equal(torch.compile(looped, backend="eager")(torch.zeros(3)), torch.ones(3))

import torch_otel  # noqa: E402

torch_otel.force_flush()
