"""A free function reached through a library's wrapper that also wraps a model's ``forward``: one frame of torch's.

``python wrapper_free_function.py OUT MODE``, with the bridge on (``torch_otel.auto``), under ``TORCH_TRACE``; backend
``eager``. A decorator in an installed package (``wrapped_func(*args, **kwargs)`` over the function it wraps, through
``functools.wraps``) is put on ``Net.forward`` and on a free function, ``make_mask(x=None)``, called with keywords only
(as transformers' ``deprecate_kwarg`` is put on a model's ``forward`` and on ``create_causal_mask``). Both run through
the wrapper's one code object: torch compiles ``Net`` (``0/0``, its guard on ``args[0]``, a ``Net``), then
``make_mask`` as a recompile of the same frame (``0/1``: ``len(args) == 2`` failed, no positional argument), then again
at another size (``0/2``). The two last compiles have guards of their own, none on an object of a class.

- ``plain``: the decorator is the workload's own, written to ``OUT/site-packages/wraplib.py`` (a library's file by its
  path, as a wheel installs it);
- ``transformers``: transformers' own ``deprecate_kwarg``.

Writes ``OUT/torch.json``: torch's own record (each ``CompilationMetrics``: id, code, ``guard_count``, ``cache_size``,
recompile reason) and ``OUT/live.jsonl``: the live run's spans.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
os.environ["TORCH_OTEL_TRACES_FILE"] = str(out / "live.jsonl")  # (the bridge reads it when it starts, below)

import torch  # noqa: E402

import torch_otel.auto  # noqa: E402,F401  (the bridge, as torch-otel run turns it on)

WRAPLIB = """import functools


def keep_kwarg(func):
    @functools.wraps(func)
    def wrapped_func(*args, **kwargs):
        kwargs.pop("old", None)
        return func(*args, **kwargs)

    return wrapped_func
"""

if mode == "plain":
    lib = out / "site-packages"
    lib.mkdir(exist_ok=True)
    (lib / "wraplib.py").write_text(WRAPLIB)
    sys.path.insert(0, str(lib))
    from wraplib import keep_kwarg  # type: ignore[import-not-found]
elif mode == "transformers":
    from transformers.utils.deprecation import deprecate_kwarg

    keep_kwarg = deprecate_kwarg("old", "99.0", new_name="x")
else:
    raise SystemExit(f"unknown mode {mode!r}")


@keep_kwarg
def make_mask(x: torch.Tensor | None = None) -> torch.Tensor:
    assert x is not None
    return (x > 0).float()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @keep_kwarg
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


net, mask = torch.compile(Net(), backend="eager"), torch.compile(make_mask, backend="eager")
x = torch.randn(4, 8)
net(x)  # call: Net
mask(x=x)  # call: make_mask
mask(x=torch.randn(5, 8))  # call: make_mask again

from torch_record import write  # noqa: E402  (tests/workloads: this script's folder)

write(out, ("co_name", "co_filename", "fail_type", "guard_count", "cache_size", "recompile_reason"))
