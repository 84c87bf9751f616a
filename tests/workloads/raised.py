"""Failed compiles that raise into the caller, beside one that leaves its frame in eager (the bridge on).

``python raised.py``: three frames, each compiled with ``backend="eager"`` unless told:

- ``broken_backend``: a backend that raises: torch raises ``BackendCompilerFailed`` into the caller (no
  ``suppress_errors``), and the next call compiles again;
- ``whole``: ``fullgraph=True`` around a graph break: torch raises ``Unsupported`` into the caller;
- ``strict``: a graph break under ``torch._dynamo.error_on_graph_break(True)``: torch raises ``Unsupported``;
- ``looped``: a graph break inside a loop: torch suppresses its ``Unsupported`` and runs the frame uncompiled;
- ``constrained``: a size ``mark_dynamic`` made dynamic, which its code specialises: its backend compiled a graph,
  then torch raised ``ConstraintViolationError`` into the caller and installed none; a call with another size compiles
  again, and that graph runs;
- ``limited`` and ``limited_whole``: a frame recompiled for each new size up to ``recompile_limit`` (2), under
  ``fail_on_recompile_limit_hit`` and under ``fullgraph=True``: at the limit torch raises ``FailOnRecompileLimitHit``
  into the caller (each call past it compiles, and fails, again); nothing runs in eager.

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


def strict(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


with torch._dynamo.error_on_graph_break(True):
    try:
        torch.compile(strict, backend="eager")(torch.ones(3))
    except Exception as exc:  # noqa: BLE001
        print("raised", strict.__name__, type(exc).__name__, flush=True)
assert torch.equal(torch.compile(looped, backend="eager")(torch.zeros(3)), torch.ones(3))


def constrained(x):
    if x.shape[0] == 4:
        return x * 2
    return x + 1


marked = torch.ones(4, 3)
torch._dynamo.mark_dynamic(marked, 0)
try:
    torch.compile(constrained, backend="eager")(marked)
except Exception as exc:  # noqa: BLE001
    print("raised", constrained.__name__, type(exc).__name__, flush=True)
assert torch.equal(torch.compile(constrained, backend="eager")(torch.ones(5, 3)), torch.full((5, 3), 2.0))


def limited(x):
    return x * 3


def limited_whole(x):
    return x * 4


for fn, kw, flag in ((limited, {}, True), (limited_whole, {"fullgraph": True}, False)):
    compiled = torch.compile(fn, backend="eager", dynamic=False, **kw)
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=flag):
        for n in range(1, 5):  # sizes 1 and 2 compile; 3 and 4 each hit the limit
            try:
                compiled(torch.ones(n))
            except Exception as exc:  # noqa: BLE001
                print("raised", fn.__name__, type(exc).__name__, flush=True)

import torch_otel  # noqa: E402

torch_otel.force_flush()
