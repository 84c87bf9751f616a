"""Frames whose recompile limit is not what a frame's name suggests, and a graph break torch's counters leave out.

``python limits.py OUT MODE``, with the bridge on (``torch_otel.auto``), under ``TORCH_TRACE``; backend ``eager``.

- ``modules``: nine ``torch.nn`` modules of nine classes, each compiled (``torch.compile(module)``). torch compiles a
  module whose ``forward`` is its own through one wrapper, ``inner``: one frame, one cache, one limit. Its guard on the
  module is by type, not identity, so every class's entry counts toward the recompile limit (8): the ninth module hits
  it and runs in eager;
- ``wrapper``: the same through a library's wrapper: nine module classes whose ``forward`` transformers'
  ``deprecate_kwarg`` wraps (``wrapped_func(*args, **kwargs)``, one code object; its guard on ``args[0]`` by type);
- ``blocks``: three instances of one block, each compiled (``block.compile()``, as ``for layer in model.layers``), at
  four batch sizes with ``dynamic=False``, under ``accumulated_recompile_limit`` 6: the code object's entries, all
  instances', reach it before ``recompile_limit`` (8);
- ``other_class`` and ``other_class_limit``: one function, ``shared_forward``, the ``forward`` of two classes (one code
  object): an ``A`` compiles, then a ``B`` reaches the frame, whose compile fails (a graph break under the user's
  context manager), or hits the recompile limit (2, after A's two). Neither compile has guards of its own to name it by;
  torch's record of it says the check that ``self`` is an ``A`` failed;
- ``unbacked``: a loop over a data-dependent number of rows (``nonzero()``, with
  ``capture_dynamic_output_shape_ops``), as Mixtral's eager experts loop over the experts hit. dynamo raises a
  ``UserError``, logs a graph break and resumes after the call; torch's ``counters["graph_break"]`` count only
  ``Unsupported`` breaks.

Writes ``OUT/torch.json``: torch's own record (each ``CompilationMetrics``: id, code, failure, ``cache_size``) and
counters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out, mode = Path(sys.argv[1]), sys.argv[2]

if mode == "modules":
    modules = [torch.nn.ReLU(), torch.nn.Tanh(), torch.nn.Sigmoid(), torch.nn.GELU(), torch.nn.SiLU(), torch.nn.Softplus()]
    modules += [torch.nn.ELU(), torch.nn.Mish(), torch.nn.Hardswish()]
    for m in modules:
        torch.compile(m, backend="eager")(torch.randn(4))
elif mode == "wrapper":
    from transformers.utils.deprecation import deprecate_kwarg

    def block(i: int) -> torch.nn.Module:
        class Block(torch.nn.Module):
            @deprecate_kwarg("old", new_name="x", version="99.0")
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * (i + 1)

        Block.__name__ = Block.__qualname__ = f"Block{i}"
        return Block()

    for i in range(9):
        torch.compile(block(i), backend="eager")(torch.ones(3))
elif mode == "blocks":
    torch._dynamo.config.accumulated_recompile_limit = 6

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x))

    blocks = [Block() for _ in range(3)]
    for b in blocks:
        b.compile(backend="eager", dynamic=False)
    for n in (2, 3, 4, 5):
        x = torch.randn(n, 8)
        for b in blocks:
            x = b(x)
elif mode == "unbacked":
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.capture_scalar_outputs = True

    def experts(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for i in (x > 0).nonzero():  # as many turns as rows hit: a size known only at run time
            out = out + i.sum()
        return out

    def f(x: torch.Tensor) -> torch.Tensor:
        return experts(x.sin()).cos()

    torch.compile(f, backend="eager")(torch.randn(8))
elif mode in ("other_class", "other_class_limit"):
    import contextlib

    @contextlib.contextmanager
    def region() -> object:
        yield

    def shared_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:  # one code object, two classes
        if mode == "other_class":
            with region():
                return self.body(x)  # type: ignore[operator]
        return self.body(x)  # type: ignore[operator]

    class A(torch.nn.Module):
        forward = shared_forward

        def body(self, x: torch.Tensor) -> torch.Tensor:
            return x.sin()

    class B(torch.nn.Module):
        forward = shared_forward

        def body(self, x: torch.Tensor) -> torch.Tensor:
            if mode == "other_class":
                print("B")  # a graph break under the user's context manager: torch cannot resume, the compile fails
            return x.cos()

    a, b = torch.compile(A(), backend="eager", dynamic=False), torch.compile(B(), backend="eager", dynamic=False)
    if mode == "other_class":
        a(torch.randn(3))
        b(torch.randn(3))  # call: B
    else:
        torch._dynamo.config.recompile_limit = 2
        a(torch.randn(2))
        a(torch.randn(3))
        b(torch.randn(3))  # call: B, the limit's: its input as A's last, so only the check of its class fails
else:
    raise SystemExit(f"unknown mode {mode!r}")

from torch._dynamo.utils import counters, get_compilation_metrics  # noqa: E402

import torch_otel  # noqa: E402

torch_otel.force_flush()
records = [
    {
        "id": m.compile_id,
        "co_name": m.co_name,
        "fail_type": m.fail_type,
        "cache_size": m.cache_size,
        "recompile_reason": m.recompile_reason,
    }
    for m in get_compilation_metrics()
]
(out / "torch.json").write_text(
    json.dumps(
        {
            "records": records,
            "counters": {k: dict(v) for k, v in counters.items() if k in ("graph_break", "unimplemented", "resumes")},
        }
    )
)
