"""The ways a user compiles, run with the start-up recorder on (``STARTUP_OUT``) and off: the same compiles must come.

``python startup_compat.py OUT``: a model compiled with ``torch.compile(model)``, one with ``module.compile()``, a
compiled function that calls a module with a forward hook (dynamo traces ``Module.__call__`` there), a compiled
optimizer step, a compiled function whose eager part after a graph break calls a module, all in a training loop of four steps (the start-up ends at the first step), and a strict export of a
module with a forward hook before it. ``OUT`` gets the losses (exactly), torch's compile records (frame, recompile
reason), its graph-break count and the export's graph.
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code

startup_probe.stamp("imports0")
import contextlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

torch.manual_seed(0)
hooked = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
hooked[0].register_forward_hook(lambda mod, args, out: out * 2.0)
exported = torch.export.export(hooked, (torch.randn(2, 4),), strict=True)
m1 = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
m2 = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
m2[0].register_forward_hook(lambda mod, args, out: out * 1.0)
m3 = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
c1 = torch.compile(m1, backend="eager")
m3.compile(backend="eager")


@torch.compile(backend="eager")
def step_fn(x: torch.Tensor) -> torch.Tensor:
    return m2(x).sum() + m1(x).sum()


m4 = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())


@torch.compile(backend="eager")
def broken_fn(x: torch.Tensor) -> torch.Tensor:
    """A graph break, then a module call in the eager part that follows it: dynamo's frame callback sees that call's
    frames (with the recorder on, its hook's frame first, which dynamo must never compile)."""
    y = x.sin()
    torch._dynamo.graph_break()
    return m4(y).sum()


@contextlib.contextmanager
def timed() -> Iterator[None]:
    yield


@torch.compile(backend="eager")
def given_up_fn(x: torch.Tensor) -> torch.Tensor:
    """A graph break inside a user's context manager: dynamo cannot resume there and runs the whole frame in eager, its
    frame callback still on: it sees each frame the module call makes (a user's module forward it compiles anew)."""
    with timed():
        torch._dynamo.graph_break()
        return m4(x).sum()


opt = torch.optim.Adam([*m1.parameters(), *m2.parameters(), *m3.parameters(), *m4.parameters()], lr=0.01)


@torch.compile(backend="eager")
def opt_step() -> None:
    opt.step()


losses = []
for _ in range(4):
    x = torch.randn(2, 4)
    loss = c1(x).sum() + step_fn(x) + m3(x).sum() + broken_fn(x) + given_up_fn(x)
    loss.backward()
    opt_step()
    opt.zero_grad()
    losses.append(loss.item().hex())
records = torch._dynamo.utils.get_compilation_metrics()
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(
        {
            "losses": losses,
            "compiles": sorted([m.co_name or "", m.recompile_reason or "", str(m.fail_type)] for m in records),
            "graph_breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
            "unimplemented": sorted(torch._dynamo.utils.counters["unimplemented"].items()),
            "export": str(exported.graph),
            "export_out": exported.module()(torch.ones(2, 4)).sum().item().hex(),
        },
        f,
    )
