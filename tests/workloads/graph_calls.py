"""Workloads with known graph calls, under the bridge (``torch_otel.auto``; tests/test_graph_calls.py sets
``TORCH_OTEL_GRAPH_CALLS`` and ``TORCH_OTEL_SUMMARY``).

    python graph_calls.py train OUT       # a model with a graph break, 5 training steps (aot_eager); its outputs,
                                          # gradients, weights and torch's counters saved to OUT (torch.save)
    python graph_calls.py fork            # compile, call 3 times, fork two children (2 calls; 5 calls and a new
                                          # shape once), then 4 more calls: each process prints the graph calls of
                                          # its bridge's run summary (a forked child writes none at exit)
    python graph_calls.py shapes [dynamic]  # one function called for sizes 2, 3 and 4: 7, 1 and 3 times; a graph per
                                          # size, or with dynamic one graph for all
    python graph_calls.py many N          # N frames compiled and called twice each (GRAPH_CAP: the counters kept;
                                          # RESET_EVERY: frames between torch._dynamo.reset() calls, 500)

Each prints one JSON line last.
"""

import gc
import json
import os
import sys

if os.environ.get("WITH_BRIDGE", "1") == "1":
    import torch_otel
    import torch_otel.auto  # noqa: F401

import torch

WHAT = sys.argv[1]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


class Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(x).tanh()


if WHAT == "train":
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = Broken()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="aot_eager")
    outputs, grads = [], []
    for step in range(5):
        opt.zero_grad()
        y = compiled(torch.randn(4, 8, generator=torch.Generator().manual_seed(step)))
        y.pow(2).sum().backward()
        outputs.append(y.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    torch.save(
        {
            "outputs": outputs,
            "grads": grads,
            "weights": [p.detach().clone() for p in model.parameters()],
            "counters": {k: dict(v) for k, v in counters.items()},
        },
        sys.argv[2],
    )
    print(json.dumps({"steps": 5}), flush=True)

elif WHAT == "shapes":
    torch._dynamo.config.automatic_dynamic_shapes = False

    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    f = torch.compile(scale, backend="eager", dynamic=len(sys.argv) > 2 and sys.argv[2] == "dynamic")
    for n, times in ((2, 7), (3, 1), (4, 3)):
        for _ in range(times):
            f(torch.ones(n))
    print(json.dumps({"calls": 11}), flush=True)

elif WHAT == "fork":
    from torch_otel._pipeline import bridge as _live

    def own_calls() -> dict:
        """This process's bridge's run summary: its compiles' graph calls, as it would write them."""
        torch_otel.force_flush()
        return _live._bridge.summary.to_dict()["graph_calls"]

    torch._dynamo.config.automatic_dynamic_shapes = False
    f = torch.compile(lambda x: x * 3 - 1, backend="eager")
    for _ in range(3):
        f(torch.ones(2))
    # The parent's bridge turns a compile into its record up to 0.5 s after it ends; a child forked before that leaves
    # it to the parent (docs/metrics.md): have it done, as it is by the time a training loop forks its workers.
    torch_otel.force_flush()
    children = []
    for calls, new_shape in ((2, False), (5, True)):
        pid = os.fork()
        if pid == 0:  # the child: its calls, then a normal exit (the bridge writes its summary at exit)
            for _ in range(calls):
                f(torch.ones(2))
            if new_shape:
                f(torch.ones(5))
            print(json.dumps({"child": os.getpid(), "graph_calls": own_calls()}), flush=True)
            sys.exit(0)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    for _ in range(4):
        f(torch.ones(2))
    print(json.dumps({"parent": os.getpid(), "children": children, "graph_calls": own_calls()}), flush=True)

elif WHAT == "many":
    n = int(sys.argv[2])
    if "torch_otel" in sys.modules and os.environ.get("GRAPH_CAP"):
        import torch._dynamo  # noqa: F401 - arms the bridge (torch_otel.auto), whose pipeline holds the counters

        from torch_otel._pipeline import bridge

        bridge.current().pipeline.state("graph_calls").graphs.max_graphs = int(os.environ["GRAPH_CAP"])
    rss = {}
    every = int(os.environ.get("RESET_EVERY", "500"))
    for k in range(n):
        scope: dict = {}
        exec(f"def f{k}(x):\n    return x * {k} + 1\n", scope)
        f = torch.compile(scope[f"f{k}"], backend="eager")
        f(torch.ones(3))
        f(torch.ones(3))
        if (k + 1) % every == 0:
            torch._dynamo.reset()  # torch frees its graphs: what is left of them is the bridge's
        if k + 1 == min(500, n):
            gc.collect()
            rss["after_500"] = rss_mb()
    gc.collect()
    rss["end"] = rss_mb()
    report: dict = {"compiles": n, "rss_mb": rss}
    if "torch_otel" in sys.modules:
        import torch_otel
        from torch_otel._features.graph_calls.calls import CompileCalls
        from torch_otel._features.graph_calls.counters import Graph
        from torch_otel._pipeline import bridge

        torch_otel.force_flush()
        state = bridge.current().pipeline.state("graph_calls")  # the bridge's: its counters, the compiles it kept
        report.update(
            counters=len(state.graphs.graphs),
            not_counted=state.graphs.not_counted,
            compiles_kept=len(state.compiles),
            live_counters=sum(type(o) is Graph for o in gc.get_objects()),
            live_compile_calls=sum(type(o) is CompileCalls for o in gc.get_objects()),
            counted_calls=sorted({g.calls for g in state.graphs.graphs}),
            wrappers_alive=sum(1 for g in state.graphs.graphs if g._wrapper is not None and g._wrapper() is not None),
            internal_errors=torch_otel.internal_error_count(),
        )
    print(json.dumps(report), flush=True)
