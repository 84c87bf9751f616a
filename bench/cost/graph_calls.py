"""What counting each compiled graph's calls costs (issue 44): per call, per training step, and per compile.

Per call, each block is the least CPU time (``thread_time``) of five runs of the same calls: on this shared machine a
run another process preempted or whose caches it evicted only ever comes out slower.

    python -m bench.cost.graph_calls                 # all three, about 6 minutes here; writes bench/results/graph_calls_results.json
    python -m bench.cost.graph_calls percall|steady|loop [--reps N]

1. ``percall``: the nanoseconds a counter adds to one call. (a) The wrapper alone, in front of a function that does
   nothing: the counting wrapper and the timing one (a CPU graph's), against the bare call, in alternating blocks.
   (b) A real compiled graph (``backend="eager"``, ``x + 1`` on 4 floats) called through dynamo: the graph torch
   installed swapped between torch's own callable and the counter in alternating blocks, in one process.
2. ``steady``: the step time of a small transformer training loop on CPU (a 2-layer ``TransformerEncoder``, d=64, batch
   8 x 32 tokens, ``aot_eager``: a forward graph and its lazy backward; one intra-op thread), the bridge on at default
   capture with ``TORCH_OTEL_GRAPH_CALLS=on``, in rounds of four blocks in one process, each state in every place of a
   round equally often: torch's own callables put back (off), the counters in front of both graphs (on), each graph
   behind 20 counters (stacked: what one more counter costs in place, read as the slope), and torch's callables again
   (off_again: the A/A control). The step's CPU time on its thread (what a counter adds) and its wall time; the
   median of the rounds' differences, with a 95% bootstrap interval.
3. ``loop``: the compile-heavy loop of ``bench/cost/zero_cost.py`` (24 ``aot_eager`` recompiles of an MLP, forward and
   backward, exporting to a real rotel over OTLP/gRPC), with ``TORCH_OTEL_GRAPH_CALLS`` on and off, each a fresh
   process, ABBA: CPU by thread (the bridge's hooks on torch's path, its worker thread, the SDK's export thread).

Nothing here asserts a time. Public tools only, and the package's own counters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import RESULTS as _RESULTS

HERE = Path(__file__).resolve().parent
PY = sys.executable
RESULTS = _RESULTS / "graph_calls_results.json"


def _spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


# -- 1. per call ---------------------------------------------------------------------------------------------------


def _block(fn: Any, args: tuple[Any, ...], n: int, repeat: int = 5) -> float:
    """CPU ns per call of ``fn(*args)`` on this thread: the least of ``repeat`` runs of ``n`` calls (the machine is
    shared: a run that another process preempted or whose caches it evicted is slower, never faster)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time_ns()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.thread_time_ns() - t) / n)
    return best


def percall(rounds: int = 41, n: int = 50_000) -> dict[str, Any]:
    import torch

    from torch_otel._features.graph_calls.counters import GraphCalls

    def target(*args: Any) -> None:
        return None

    table = GraphCalls()
    _, counted = table.wrap(target, None, 0, "forward", False)
    _, timed = table.wrap(target, None, 0, "forward", True)
    a, b, c = 1, 2, 3
    blocks: dict[str, list[float]] = {"bare": [], "counted": [], "timed": []}
    fns = {"bare": target, "counted": counted, "timed": timed}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for name in order:
            blocks[name].append(_block(fns[name], (a, b, c), n))
    wrapper = {
        "bare_ns": statistics.median(blocks["bare"]),
        "counted_added_ns": [x - y for x, y in zip(blocks["counted"], blocks["bare"], strict=True)],
        "timed_added_ns": [x - y for x, y in zip(blocks["timed"], blocks["bare"], strict=True)],
    }

    # (b) a real compiled graph, through dynamo: the global torch installed, swapped in place
    import torch._dynamo.output_graph as og
    from torch._dynamo.eval_frame import skip_code

    from torch_otel._features.graph_calls.counters import wrapper_codes

    for code in wrapper_codes():
        skip_code(code)
    installed: dict[str, Any] = {}
    torch_install = og.OutputGraph.install_global_unsafe

    def install(self: Any, name: str, value: Any) -> Any:
        if name.startswith("__compiled_fn"):
            installed.update(scope=self.global_scope, name=name, raw=value)
        return torch_install(self, name, value)

    og.OutputGraph.install_global_unsafe = install  # type: ignore[method-assign]
    try:

        def f(x: Any) -> Any:
            return x + 1

        cf = torch.compile(f, backend="eager")
        x = torch.ones(4)
        cf(x)
    finally:
        og.OutputGraph.install_global_unsafe = torch_install  # type: ignore[method-assign]
    scope, name, raw = installed["scope"], installed["name"], installed["raw"]
    _, wrapped = table.wrap(raw, None, 0, "forward", True)
    real: dict[str, list[float]] = {"torch": [], "counted": []}
    m = n // 20
    for r in range(rounds):
        for state in ("torch", "counted") if r % 2 == 0 else ("counted", "torch"):
            scope[name] = raw if state == "torch" else wrapped
            real[state].append(_block(cf, (x,), m))
    scope[name] = raw
    return {
        "wrapper": wrapper,
        "compiled_call": {
            "torch_ns": statistics.median(real["torch"]),
            "added_ns": [x - y for x, y in zip(real["counted"], real["torch"], strict=True)],
        },
        "rounds": rounds,
    }


def _median_ci(values: list[float], draws: int = 2000) -> list[float]:
    """A 95% bootstrap interval of the median of ``values`` (the pairs' differences: what the noise allows)."""
    import random

    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return [meds[int(draws * 0.025)], meds[int(draws * 0.975) - 1]]


# -- 2. steady-state training steps ----------------------------------------------------------------------------------


STACK = 20  # the in-place check: each graph behind this many counters, one inside the other


def _places(graphs: list[Any]) -> list[tuple[dict[str, Any], Any]]:
    """Each counted graph's callables (torch's, behind its counter, behind STACK counters) and where it is installed
    (held here: taken out, a counter would be freed)."""
    from torch_otel._features.graph_calls.counters import _counting, _counting_timed

    out = []
    for g in graphs:
        wrapper = g._wrapper() if g._wrapper is not None else None
        if wrapper is not None and g._restore is not None:
            raw = wrapper.__wrapped__
            stacked = raw
            for _ in range(STACK):
                stacked = (_counting_timed if g.timed else _counting)(stacked)
                if getattr(raw, "_boxed_call", False):
                    stacked._boxed_call = True
            out.append(({"off": raw, "off_again": raw, "on": wrapper, "stacked": stacked}, g._restore))
    return out


def _swap(places: list[tuple[dict[str, Any], Any]], state: str) -> None:
    """Each counted graph's place holds torch's own callable (off), its counter (on), or STACK counters (stacked)."""
    for values, where in places:
        value = values[state]
        if where[0] == "global":
            where[1][where[2]] = value
        else:
            holder = where[1]()
            if holder is not None:
                setattr(holder, where[2], value)


def transformer_step() -> Any:
    """The steady workload's training step, a small transformer (2 layers, d_model 64), seeded: compiled with
    ``aot_eager`` on its first calls. ``bench/cost/instructions.py`` counts the same step."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cm = torch.compile(model, backend="aot_eager")
    x = torch.randn(8, 32, 64)

    def step() -> None:
        opt.zero_grad()
        cm(x).pow(2).mean().backward()
        opt.step()

    return step


def steady(pairs: int = 600, steps: int = 10) -> dict[str, Any]:
    import torch
    from opentelemetry.sdk.trace import TracerProvider

    import torch_otel
    from torch_otel._pipeline import bridge

    torch.set_num_threads(1)  # the step on this thread alone: its CPU time is the step's (the machine is shared)
    os.environ["TORCH_OTEL_GRAPH_CALLS"] = "on"
    torch_otel.instrument(TracerProvider(), registry=None)  # default capture, graphs counted
    step = transformer_step()
    for _ in range(20):
        step()  # compiled (forward and its lazy backward), warm
    torch_otel.force_flush()
    graphs = list(bridge.current().pipeline.state("graph_calls").graphs.graphs)  # the bridge's counters
    places = _places(graphs)
    calls_before = sum(g.calls for g in graphs)
    blocks: list[tuple[str, float]] = []
    fastest: list[tuple[str, float]] = []
    walls: list[tuple[str, float]] = []
    clock = time.thread_time_ns
    # each round runs the four states once, each in every place equally often: off_again (torch's callable again) is
    # the A/A control, what the noise alone gives between two blocks of one round
    states = ("off", "on", "stacked", "off_again")
    orders = [states[i:] + states[:i] for i in range(4)]
    orders += [o[::-1] for o in orders]
    for i in range(pairs):
        for state in orders[i % len(orders)]:
            _swap(places, state)
            each = []
            w = time.perf_counter()
            for _ in range(steps):
                t = clock()
                step()
                each.append(clock() - t)
            walls.append((state, (time.perf_counter() - w) / steps))
            blocks.append((state, sum(each) / steps / 1e9))
            fastest.append((state, min(each) / 1e9))
    _swap(places, "on")
    counted_steps = pairs * steps  # the "on" blocks' steps
    calls_per_step = (sum(g.calls for g in graphs) - calls_before) / counted_steps
    torch_otel.uninstrument()

    def paired(values: list[tuple[str, float]], ratio: bool = False, on: str = "on", off: str = "off") -> list[float]:
        out = []
        for i in range(0, len(values), 4):
            d = dict(values[i : i + 4])
            out.append(round(d[on] / d[off], 6) if ratio else round((d[on] - d[off]) * 1e6, 3))
        return out

    per_counter_us = [round(x / (STACK - 1), 4) for x in paired(blocks, on="stacked", off="on")]

    diffs_us, fastest_us = paired(blocks), paired(fastest)
    aa_us = paired(blocks, on="off_again")
    return {
        "added_us_ci95": _median_ci(diffs_us),
        "fastest_added_us_ci95": _median_ci(fastest_us),
        "step_s": {st: statistics.median(v for s, v in blocks if s == st) for st in states},
        "fastest_step_s": {st: statistics.median(v for s, v in fastest if s == st) for st in ("off", "on")},
        "step_wall_s": {st: statistics.median(v for s, v in walls if s == st) for st in ("off", "on")},
        "wall_ratio": paired(walls, ratio=True),
        "ratio": paired(blocks, ratio=True),
        "added_us_per_step": diffs_us,
        "fastest_added_us": fastest_us,
        "aa_us": aa_us,
        "aa_us_ci95": _median_ci(aa_us),
        "stack": STACK,
        "per_counter_us": per_counter_us,
        "per_counter_us_ci95": _median_ci(per_counter_us),
        "graphs": len(graphs),
        "calls_per_step": calls_per_step,
        "pairs": pairs,
        "steps_per_block": steps,
    }


# -- 3. the compile loop, by thread -----------------------------------------------------------------------------------


def loop(reps: int = 6) -> dict[str, Any]:
    from bench.cost.measure import child
    from tests.servers import Rotel

    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with Rotel(debug=False) as rotel:
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_SERVICE_NAME": "bench"}
        for rep in range(reps):
            for state in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                env = dict(otlp, TORCH_OTEL_CAPTURE="default", TORCH_OTEL_GRAPH_CALLS=state)
                _, _, _, out = child([PY, "-m", "bench.cost.zero_cost", "loop", "default"], env)
                runs[state].append(json.loads(out.strip().splitlines()[-1]))
            print(f"compile loop: repetition {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    return runs


def _bridge_s(run: dict[str, Any]) -> float:
    t = run["threads"]
    return sum(
        t.get(k, 0.0)
        for k in (
            "the bridge's hooks (inside the main thread's figure)",
            "the bridge's worker thread",
            "the SDK's span batch thread (OTLP export)",
            "gRPC's native threads",
        )
    )


def report(r: dict[str, Any]) -> str:
    lines = []
    if "percall" in r:
        p = r["percall"]
        w, c = p["wrapper"], p["compiled_call"]
        lines += [
            "| per call | median [min, max] |",
            "|---|---|",
            f"| a call of a function that does nothing (bare) | {w['bare_ns']:.0f} ns |",
            f"| added by the counter | {_spread(w['counted_added_ns'])} ns |",
            f"| added by the timing counter (a CPU graph: one call in 16 timed) | {_spread(w['timed_added_ns'])} ns |",
            f"| a real compiled graph's call through dynamo (`x + 1`, eager backend) | {c['torch_ns']:.0f} ns |",
            f"| added by its (timing) counter | {_spread(c['added_ns'])} ns |",
            "",
        ]
    if "steady" in r:
        s = r["steady"]
        lines += [
            "| steady state (ABBA blocks, one process; median [min, max]) | off | on | on/off | added per step |",
            "|---|---|---|---|---|",
            f"| transformer training step, CPU time ({s['calls_per_step']:.0f} graph calls per step) | "
            f"{s['step_s']['off'] * 1e3:.3f} ms | {s['step_s']['on'] * 1e3:.3f} ms | {_spread(s['ratio'], '{:.4f}')} | "
            f"{_spread(s['added_us_per_step'], '{:+.1f}')} us |",
            f"| the same steps, wall time | {s['step_wall_s']['off'] * 1e3:.3f} ms | {s['step_wall_s']['on'] * 1e3:.3f} ms | "
            f"{_spread(s['wall_ratio'], '{:.4f}')} | |",
            "",
        ]
        off_us = s["step_s"]["off"] * 1e6
        lo, hi = s["added_us_ci95"]
        med = statistics.median(s["added_us_per_step"])
        lines.append(
            f"Added per step (CPU), the median of {s['pairs']} pairs: {med:+.2f} us, 95% interval [{lo:+.2f}, {hi:+.2f}] us, "
            f"that is [{lo / off_us:+.3%}, {hi / off_us:+.3%}] of the {off_us / 1e3:.3f} ms step."
        )
        if "fastest_added_us" in s:
            lo, hi = s["fastest_added_us_ci95"]
            med = statistics.median(s["fastest_added_us"])
            fast_us = s["fastest_step_s"]["off"] * 1e6
            lines.append(
                f"The same with each block's fastest step ({fast_us / 1e3:.3f} ms off, "
                f"{s['fastest_step_s']['on'] * 1e3:.3f} ms on): {med:+.2f} us, 95% interval [{lo:+.2f}, {hi:+.2f}] us, "
                f"[{lo / fast_us:+.3%}, {hi / fast_us:+.3%}] of the step."
            )
        if "aa_us" in s:
            lo, hi = s["aa_us_ci95"]
            med = statistics.median(s["aa_us"])
            lines.append(
                f"A/A, torch's callable in both blocks: {med:+.2f} us, 95% interval [{lo:+.2f}, {hi:+.2f}] us, "
                f"[{lo / off_us:+.3%}, {hi / off_us:+.3%}] of the step."
            )
        if "per_counter_us" in s:
            lo, hi = s["per_counter_us_ci95"]
            med = statistics.median(s["per_counter_us"])
            lines.append(
                f"In place, each graph behind {s['stack']} counters against behind one: one more counter on every graph adds "
                f"{med:+.3f} us per step, 95% interval [{lo:+.3f}, {hi:+.3f}] us, [{lo / off_us:+.4%}, {hi / off_us:+.4%}] of the step."
            )
        if "percall" in r:
            per = statistics.median(r["percall"]["compiled_call"]["added_ns"])
            lines.append(
                f"From the per-call figure: {s['calls_per_step']:.0f} calls x {per:.0f} ns = {s['calls_per_step'] * per / 1e3:.2f} us "
                f"per step, {s['calls_per_step'] * per / 1e3 / off_us:.4%} of the step."
            )
        lines.append("")
    if "loop" in r:
        runs = r["loop"]
        lines += ["| compile loop, by thread (median s) | graph calls on | off |", "|---|---|---|"]
        keys = sorted({k for v in runs.values() for run in v for k in run["threads"]})
        for k in keys:
            on = statistics.median(run["threads"].get(k, 0.0) for run in runs["on"])
            off = statistics.median(run["threads"].get(k, 0.0) for run in runs["off"])
            lines.append(f"| {k} | {on:.3f} | {off:.3f} |")
        on_b = [_bridge_s(x) for x in runs["on"]]
        off_b = [_bridge_s(x) for x in runs["off"]]
        lines.append(f"| the bridge in all (hooks, worker, export) | {_spread(on_b, '{:.3f}')} | {_spread(off_b, '{:.3f}')} |")
        lines.append(
            f"| CPU of the whole window | {_spread([x['cpu_s'] for x in runs['on']], '{:.2f}')} | "
            f"{_spread([x['cpu_s'] for x in runs['off']], '{:.2f}')} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", choices=("percall", "steady", "loop", "all", "report"), default="all")
    ap.add_argument("--reps", type=int, default=6, help="compile-loop processes per state")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:  # one measurement in this process
        out = {"percall": percall, "steady": steady}[a.what]()
        print(json.dumps(out), flush=True)
        return 0
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() and a.what != "all" else {}
    if a.what == "report":
        print(report(results))
        return 0
    from bench.cost.measure import child

    for what in ("percall", "steady") if a.what == "all" else (a.what,) if a.what != "loop" else ():
        _, _, _, out = child([PY, "-m", "bench.cost.graph_calls", what, "--child"])
        results[what] = json.loads(out.strip().splitlines()[-1])
        print(f"{what} done", file=sys.stderr, flush=True)
    if a.what in ("all", "loop"):
        results["loop"] = loop(a.reps)
    import torch

    results["torch"] = str(torch.__version__)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
