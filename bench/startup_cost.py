"""What the start-up recorder costs: a share of the start-up it measures, and nothing once it ended.

    python bench/startup_cost.py [--rounds N] [--steps N] [--json PATH]    # everything below, one command
    python bench/startup_cost.py child WHAT ...                            # one measuring process (run by the above)

1. **Import hooks compared**, each in fresh processes, rounds alternating: none, the recorder's (importlib's
   ``_find_and_load``), a ``sys.meta_path`` finder that wraps the loader it finds, and a ``builtins.__import__``
   wrapper. Each process imports torch and transformers, then reads ``transformers.LlamaConfig`` (a lazy import,
   outside any import statement), stamping the whole with ``time.perf_counter``. Reported: each hook's import time
   against the stamps (accuracy), the hook's calls, and the wall time against no hook (cost, the median of the
   rounds' paired differences, with the spread of no hook against itself).
2. **The recorder in a real start-up**: the Hugging Face training workload of tests/workloads/startup_train.py with the
   recorder on. Its hooks' calls are counted (module loads, timed calls, outermost forwards), each kind of call is
   timed against the same call unhooked (in-process, 20 000 calls), and the product is the recorder's cost as a share of
   the time to the first step. The install and the attribution (at the report, after the start-up) are timed too.
3. **The steps after the first**: an eager MLP trained on a DataLoader, ``--steps`` steps; the median step from the
   third on, with the recorder on (ended at the first step, second step timed) and off, in paired processes,
   alternating. Also checked in the process: every function the recorder hooked has torch's code again.

Nothing here asserts a time. Results: ``bench/startup_cost_results.json`` and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = ROOT / "tests" / "workloads"
PY = sys.executable
HOOKS = ("none", "find_and_load", "meta_path", "import")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(extra or {})})
    return env


def _child(*args: str, extra: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    res = subprocess.run([PY, __file__, "child", *args], env=_env(extra), capture_output=True, text=True, timeout=1800, cwd=cwd)
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


# -- children ----------------------------------------------------------------------------------------------------------


def child_imports(hook: str) -> dict[str, Any]:
    """Import torch and transformers under one hook; what it measured, its calls, the stamps."""
    import builtins
    import importlib.abc

    clock = time.perf_counter_ns
    measured, calls, depth = [0], [0], [0]

    def timed(run: Any, *args: Any) -> Any:
        calls[0] += 1
        depth[0] += 1
        t0 = clock()
        try:
            return run(*args)
        finally:
            depth[0] -= 1
            if not depth[0]:
                measured[0] += clock() - t0

    if hook == "find_and_load":
        from torch_otel._features.startup import recorder as startup_hooks

        rec = startup_hooks.install(activation="run")
    elif hook == "meta_path":

        class Loader:
            def __init__(self, inner: Any, start: int) -> None:
                self.inner, self.start = inner, start

            def create_module(self, spec: Any) -> Any:
                return self.inner.create_module(spec)

            def exec_module(self, module: Any) -> None:
                depth[0] += 1  # loads nest inside a load's exec; a find_spec alone (importlib.util.find_spec) loads nothing
                try:
                    self.inner.exec_module(module)
                finally:
                    depth[0] -= 1
                    if not depth[0]:
                        measured[0] += clock() - self.start

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
                calls[0] += 1
                start = clock()
                for finder in sys.meta_path:
                    if finder is self:
                        continue
                    spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
                    if spec is not None:
                        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                            spec.loader = Loader(spec.loader, start)
                        return spec
                return None

        sys.meta_path.insert(0, Finder())
    elif hook == "import":
        real = builtins.__import__

        def hooked(*args: Any, **kwargs: Any) -> Any:
            return timed(lambda: real(*args, **kwargs))

        builtins.__import__ = hooked
    t0 = clock()
    import torch  # noqa: F401
    import transformers

    _ = transformers.LlamaConfig  # a lazy import: outside any import statement
    t1 = clock()
    if hook == "find_and_load":
        startup_hooks.ready()  # the end: the imports until now
        st = rec.startup()  # type: ignore[union-attr]
        measured[0] = round(st.phases["imports"] * 1e9)
        calls[0] = rec.loads  # type: ignore[union-attr]
    return {
        "hook": hook,
        "stamps_s": (t1 - t0) / 1e9,
        "measured_s": measured[0] / 1e9,
        "calls": calls[0],
        "modules": len(sys.modules),
    }


def child_calls() -> dict[str, Any]:
    """Each kind of hooked call against the same call unhooked, the one hook put in and out between batches (a busy
    machine's drift falls on both): nanoseconds more per call, the median of the batches' paired differences."""
    import torch

    from torch_otel._features.startup import recorder as startup_hooks

    def plain(x: int) -> int:
        return x

    lin = torch.nn.Linear(2, 2)
    x = torch.ones(2)
    tmp = Path(tempfile.mkdtemp())
    batches, per = 20, 30
    for i in range(batches * per):
        (tmp / f"m{i}.py").write_text("X = 1\n")
    sys.path.insert(0, str(tmp))
    rec = startup_hooks.install(activation="run", env={"TORCH_OTEL_STARTUP_END": "step"})
    assert rec is not None
    rec.swap(plain, "weights", "plain")
    (call_swap,) = rec.hooks["call"]
    plain_swap = rec.hooks["code"][-1]
    bootstrap: Any = sys.modules["_frozen_importlib"]
    finds = {True: startup_hooks._FIND_AND_LOAD, False: startup_hooks._ORIG_FIND_AND_LOAD}
    loaded = iter(range(batches * per))

    def each(fn: Any, n: int) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times)

    def load() -> None:
        __import__(f"m{next(loaded)}")

    kinds = {
        "timed_call_ns": (lambda on: plain_swap.put(on), lambda: plain(1), 2000),
        "outermost_forward_ns": (lambda on: call_swap.put(on), lambda: lin(x), 500),
        "module_load_ns": (lambda on: setattr(bootstrap, "_find_and_load", finds[on]), load, per // 2),
    }
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name, (put, fn, n) in kinds.items():
            diffs, plains = [], []
            for b in range(batches):
                row = {}
                for on in (True, False) if b % 2 else (False, True):
                    put(on)
                    row[on] = each(fn, n)
                diffs.append(row[True] - row[False])
                plains.append(row[False])
            put(False)
            out[name] = statistics.median(diffs)
            out[f"plain_{name}"] = statistics.median(plains)
    rec.finish("off")
    t0 = time.perf_counter_ns()
    startup_hooks.Recorder("auto", "run", None, None, {})
    out["recorder_init_ns"] = time.perf_counter_ns() - t0
    return out


def child_steps(on: str, steps: int) -> dict[str, Any]:
    """An eager MLP trained on a DataLoader: each step's time; the recorder on or off."""
    rec = None
    if on == "on":
        from torch_otel._features.startup import recorder as startup_hooks

        rec = startup_hooks.install(activation="run")
    import torch
    import torch.utils.data

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 64), torch.randn(steps * 8, 1))
    times = []
    t = time.perf_counter_ns()
    for x, y in torch.utils.data.DataLoader(data, batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        now = time.perf_counter_ns()
        times.append(now - t)
        t = now
    torch_again = True
    if rec is not None:
        torch_again = rec.state == "done" and all(not h.on for group in rec.hooks.values() for h in group)
        torch_again &= torch.nn.Module.__call__.__code__.co_filename.endswith("module.py")
    return {
        "on": on,
        "median_step_ns": statistics.median(times[2:]),
        "state": rec.state if rec else None,
        "torch_again": torch_again,
    }


# -- the parent ---------------------------------------------------------------------------------------------------------


def imports_compared(rounds: int) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {h: [] for h in HOOKS}
    aa: list[float] = []
    for r in range(rounds):
        order = HOOKS if r % 2 == 0 else tuple(reversed(HOOKS))
        got = {h: _child("imports", h) for h in order}
        for h in HOOKS:
            rows[h].append(got[h])
        aa.append(_child("imports", "none")["stamps_s"] - got["none"]["stamps_s"])
    out: dict[str, Any] = {"rounds": rounds, "none_vs_none_spread_s": [round(min(aa), 3), round(max(aa), 3)]}
    for h in HOOKS:
        diffs = [row["stamps_s"] - base["stamps_s"] for row, base in zip(rows[h], rows["none"], strict=True)]
        out[h] = {
            "stamps_s": round(statistics.median(r["stamps_s"] for r in rows[h]), 3),
            "measured_s": round(statistics.median(r["measured_s"] for r in rows[h]), 3),
            "missed_s": round(statistics.median(r["stamps_s"] - r["measured_s"] for r in rows[h]), 3),
            "calls": rows[h][0]["calls"],
            "modules": rows[h][0]["modules"],
            "cost_vs_none_s": round(statistics.median(diffs), 3),
        }
    return out


def real_startup() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp())
    model = tmp / "model"
    subprocess.run(
        [PY, str(WORKLOADS / "startup_train.py"), "save", str(model), "-"],
        env=_env(),
        cwd=WORKLOADS,
        check=True,
        capture_output=True,
        timeout=900,
    )
    out = tmp / "startup-{rank}.json"
    subprocess.run(  # under `torch-otel run`, as a user's job: the recorder starts with the interpreter
        [PY, "-m", "torch_otel", "run", "--", PY, str(WORKLOADS / "startup_train.py"), "train", str(model), str(tmp / "o.json")],
        env=_env({"STARTUP_OUT": str(out), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}),
        cwd=WORKLOADS,
        check=True,
        capture_output=True,
        timeout=900,
    )
    d = json.loads((tmp / "startup-0.json").read_text())
    costs = _child("calls")
    st = d["startup"]
    counts = d["counts"]
    spent_ns = (
        counts["module_loads"] * costs["module_load_ns"]
        + counts["timed_calls"] * costs["timed_call_ns"]
        + counts["outermost_forwards"] * costs["outermost_forward_ns"]
        + costs["recorder_init_ns"]
    )
    install = sum(s["self_s"] for s in d["spans"] if s["phase"] == "bridge" and s["label"] == "install")
    return {
        "first_step_s": round(st["first_step_s"], 3),
        "phases_s": {k: round(v, 3) for k, v in st["phases"].items() if v},
        "unattributed_s": round(st["unattributed_s"], 3),
        "counts": counts,
        "per_call_ns": {k: round(v) for k, v in costs.items()},
        "hooks_cost_ms": round(spent_ns / 1e6, 2),
        "hooks_share_of_start_up_pct": round(100 * spent_ns / 1e9 / st["first_step_s"], 4),
        "install_ms": round(install * 1e3, 2),
        "attribution_ms_at_report": d["attribution_ms"],
    }


def steps_after_the_first(rounds: int, steps: int) -> dict[str, Any]:
    on, off, aa = [], [], []
    for r in range(rounds):
        pair = ("on", "off") if r % 2 == 0 else ("off", "on")
        got = {p: _child("steps", p, str(steps)) for p in pair}
        on.append(got["on"])
        off.append(got["off"])
        aa.append(_child("steps", "off", str(steps))["median_step_ns"] - got["off"]["median_step_ns"])
    diffs = [a["median_step_ns"] - b["median_step_ns"] for a, b in zip(on, off, strict=True)]
    return {
        "rounds": rounds,
        "steps": steps,
        "median_step_us_off": round(statistics.median(r["median_step_ns"] for r in off) / 1e3, 1),
        "median_step_us_on": round(statistics.median(r["median_step_ns"] for r in on) / 1e3, 1),
        "paired_difference_us": round(statistics.median(diffs) / 1e3, 2),
        "off_vs_off_spread_us": [round(min(aa) / 1e3, 2), round(max(aa) / 1e3, 2)],
        "ended": sorted({r["state"] for r in on}),
        "torch_code_back": all(r["torch_again"] for r in on),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        what = sys.argv[2]
        result = {
            "imports": lambda: child_imports(sys.argv[3]),
            "calls": child_calls,
            "steps": lambda: child_steps(sys.argv[3], int(sys.argv[4])),
        }[what]()
        print(json.dumps(result))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--json", default=str(HERE / "startup_cost_results.json"))
    a = p.parse_args()
    t0 = time.time()
    results = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "import_hooks": imports_compared(a.rounds),
        "real_start_up": real_startup(),
        "steps_after_the_first": steps_after_the_first(a.rounds, a.steps),
    }
    results["wall_s"] = round(time.time() - t0)
    Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
