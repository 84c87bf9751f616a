"""What the bridge costs, counted in instructions: valgrind's callgrind, which a loaded machine cannot blur.

    .venv/bin/python -m bench.cost.instructions                    # every mode, each counted twice; writes bench/results/instructions.json
    .venv/bin/python -m bench.cost.instructions --only loop --modes none,default --reps 1 --compiles 4   # what the CI guard runs
    .venv/bin/python -m bench.cost.instructions --only startup --reps 2   # a start-up to its first step, with and without
    .venv/bin/python -m bench.cost.instructions --table-from bench/results/instructions.json
    .venv/bin/python -m bench.cost.instructions profile loop default   # where one mode's instructions go (functions, threads)
    .venv/bin/python -m bench.cost.instructions opcodes loop default   # the same region's Python, by function (no valgrind)

Each count is one fresh process, ``valgrind --tool=callgrind --instr-atstart=no`` running the venv's own Python
(``PYTHONHASHSEED`` the layout's, one intra-op thread), with instrumentation switched on and off from inside the process
(``callgrind_control -i on|off PID``) around the measured region only: the process's start-up, ``import torch`` and the
warm-up run uncounted (the start-up's count alone runs from the process's first instruction). The count is the ``totals:`` line of callgrind's file, one per thread
(``--separate-threads=yes``), summed over the threads. Each mode is counted ``--reps`` times (2 by default), in a
rotated order, each count in a memory layout of its own, the same for every mode: a count moves with where the
process's objects lie (by up to 0.2% between layouts: docs/benchmarks.md), and the layout with the process's
environment, so a child is given a few of the runner's variables only (``KEPT_VARIABLES``: not the shell's, pytest's
or CI's others). Rep ``r`` is counted in layout ``r``: a variable of ``61 r`` characters (``TORCH_OTEL_BENCH_LAYOUT``:
where the stack starts), ``2053 r`` small objects and a block of ``12,289 r`` bytes put on the heap before anything
else (where every later object lies, as a checkout's path moves it), and ``PYTHONHASHSEED=r`` (a user's processes each
draw a seed). Counts of one mode in one layout agree to 0.03%; the counts of a mode's reps give the spread between
layouts, and their mean is what a ratio is taken of.

1. **The compile loop** (``loop``): fresh ``aot_eager`` recompiles of the small MLP of ``bench/cost/zero_cost.py`` (a new
   batch size each, automatic dynamic shapes off), forward and backward. The region is the recompiles and, with the
   bridge on, ``torch_otel.force_flush()``: every compile's spans built and exported over OTLP/gRPC to a real rotel on
   loopback, inside the region. Modes: ``none`` (no bridge); ``default`` and ``full`` capture, ``calls`` and
   ``nocalls`` (default capture with ``TORCH_OTEL_GRAPH_CALLS=on``, ``off``), each turned on by
   ``import torch_otel.auto`` as a user would; ``trace`` (torch's own ``TORCH_TRACE`` alone, no bridge).
2. **The steady step** (``steady``): a small transformer training loop (a 2-layer ``TransformerEncoder``, d=64,
   batch 8 x 32 tokens, ``aot_eager``; SGD), compiled and warm; the region is ``--steps`` steps. Modes: ``none``,
   ``nocalls`` and ``calls`` (default capture, graph calls off and on), and ``stacked`` (each graph behind 20
   counters: what one more counter costs). Read on the main thread, where the step runs: instructions per step, what
   the bridge adds per step, per graph call and per further counter.
3. **Start-up** (``startup``): a whole process, counted from its first instruction to its first training step's
   return (``--instr-atstart=yes``; instrumentation off right after the step): ``import torch``, a small MLP and its
   SGD optimizer, a DataLoader over a tensor dataset, compiled with ``aot_eager``, one step. Modes: ``none`` and
   ``default`` (``import torch_otel.auto`` as the first line, as ``torch-otel run`` has it: the start-up recorder's
   hooks, the bridge's arming, its exporters' set-up and the first compile's capture). The share the bridge adds to a
   start-up, on the thread that runs it and in all. The region ends at the step, so the bridge's work after it (the
   start-up's attribution, the summary, the export at exit) is not in it: it runs once, off the program's thread.

Timers become counts under valgrind: a program runs about 50 times slower there, so anything that wakes on a clock
would run 50 times as often per unit of work as it does outside, and a deadline would pass 50 times sooner. What wakes
on a clock costs per second of wall time, not per compile or step, so the children put it out of the region: the
OpenTelemetry SDK's span and metric export intervals, and the bridge's reading of graph counts (every 10 s with graph
calls on), once a day (inside the region, spans leave at the flush, or when a batch of 512 fills, as they do outside
valgrind, where the loop is shorter than the SDK's 5 s schedule: docs/benchmarks.md); the OTLP export deadline 10
minutes (past its 10 s, the SDK would encode and send the whole batch again); tqdm's monitor thread off (torch.fx
starts it; it wakes every 10 s). Python's garbage collector is run before the region, the same starting state in
every mode. What still runs on a clock: gRPC's native threads, which poll while the channel is open (a few million
instructions over a region that takes minutes under valgrind: the by-thread table shows them), and the bridge's worker,
which wakes 0.5 s after a compile ends (which compiles share a batch: the two counts' spread shows it).

Nothing here asserts anything: ``tests/test_instructions.py`` is the guard that does.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RESULTS as RESULTS_DIR
from bench import ROOT

RESULTS = RESULTS_DIR / "instructions.json"
PY = sys.executable

LOOP_MODES = ("none", "default", "full", "calls", "nocalls", "trace")
STEADY_MODES = ("none", "nocalls", "calls", "stacked")
STARTUP_MODES = ("none", "default")
MODES = {"loop": LOOP_MODES, "steady": STEADY_MODES, "startup": STARTUP_MODES}
BRIDGE = ("default", "full", "calls", "nocalls", "stacked")  # the modes that import torch_otel.auto
# TORCH_OTEL_GRAPH_CALLS per mode (default and full: as the bridge's default has it)
GRAPH_CALLS = {"calls": "on", "stacked": "on", "nocalls": "off"}
COMPILES = 6  # the compile loop's recompiles inside the region
STEPS = 30  # the steady region's training steps
DAY_MS = "86400000"  # the harness's timers, once a day: see the module's docstring


# -- inside the measured process --------------------------------------------------------------------------------------


def _callgrind(state: str) -> None:
    """Switch callgrind's instrumentation ``on`` or ``off`` for this process (nothing outside valgrind; outside it,
    ``TORCH_OTEL_BENCH_OPCODES=FILE`` counts the bridge's Python bytecodes instead: see :class:`_Opcodes`)."""
    if os.environ.get("TORCH_OTEL_BENCH_OPCODES"):
        _Opcodes.switch(state)
        return
    if os.environ.get("TORCH_OTEL_BENCH_CALLGRIND") != "1":
        return
    subprocess.run(
        ["callgrind_control", "-i", state, str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


class _Opcodes:
    """Python-level attribution, outside valgrind: the bytecodes each function of the bridge's side runs, by thread.

    Over the same region, every Python frame is seen as it starts (``sys.settrace``, ``threading.settrace``); a frame
    of the bridge, the OpenTelemetry SDK, gRPC or protobuf, or any frame they call, has its bytecodes counted
    (``f_trace_opcodes``), by thread and function: its own (self) and with what it calls (inclusive). torch's own
    functions, and what they call, are left out (a hook that calls the function of torch's it wraps). A count of
    bytecodes, not instructions: it ranks the Python that callgrind sees as the interpreter loop. What the process
    runs outside those frames is not traced.
    """

    OURS = (f"{os.sep}torch_otel{os.sep}", f"{os.sep}opentelemetry{os.sep}", f"{os.sep}grpc{os.sep}", f"{os.sep}protobuf{os.sep}")
    TORCH = f"site-packages{os.sep}torch{os.sep}"
    self_: dict[tuple[str, str], int] = {}
    incl: dict[tuple[str, str], int] = {}
    calls: dict[tuple[str, str], int] = {}
    chains: dict[int, tuple[tuple[str, str], ...]] = {}  # id(frame) -> the bridge's side's functions on its stack
    active = False

    @staticmethod
    def _name(code: Any) -> str:
        f = code.co_filename
        for marker in ("site-packages" + os.sep, "torch_otel" + os.sep, "lib" + os.sep + "python3"):
            i = f.rfind(marker)
            if i >= 0:
                f = f[i + len(marker) :] if marker != "torch_otel" + os.sep else f[i:]
                break
        return f"{f}:{code.co_firstlineno}:{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}"

    @classmethod
    def _trace(cls, frame: Any, event: str, arg: Any) -> Any:
        if event != "call" or not cls.active:
            return None
        back = frame.f_back
        chain = cls.chains.get(id(back)) if back is not None else None
        file = frame.f_code.co_filename
        if cls.TORCH in file:
            return None  # torch's own work, as when the bridge calls torch's function it wraps: not the bridge's
        if chain is None and not any(m in file for m in cls.OURS):
            return None
        import threading

        key = (threading.current_thread().name, cls._name(frame.f_code))
        chain = (chain or ()) if key in (chain or ()) else (*(chain or ()), key)
        cls.chains[id(frame)] = chain
        cls.calls[key] = cls.calls.get(key, 0) + 1
        frame.f_trace_opcodes = True
        self_, incl = cls.self_, cls.incl

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                self_[key] = self_.get(key, 0) + 1
                for k in chain:
                    incl[k] = incl.get(k, 0) + 1
            elif event == "return":
                cls.chains.pop(id(frame), None)
            return local

        return local

    @classmethod
    def install(cls) -> None:
        """Seen from the start, inactive until the region (a thread started before it is traced too)."""
        import threading

        threading.settrace(cls._trace)
        sys.settrace(cls._trace)

    @classmethod
    def switch(cls, state: str) -> None:
        cls.active = state == "on"
        if cls.active:
            return
        out = {
            view: sorted(([t, f, n] for (t, f), n in counts.items()), key=lambda x: -x[2])
            for view, counts in (("self", cls.self_), ("inclusive", cls.incl))
        }
        out["calls"] = {f"{t}|{f}": n for (t, f), n in cls.calls.items()}
        Path(os.environ["TORCH_OTEL_BENCH_OPCODES"]).write_text(json.dumps(out))


def _gc_stats(before: list[list[int]] | None = None) -> list[list[int]]:
    """Python's garbage collections so far (or since ``before``), by generation: [collections, collected]."""
    import gc

    now = [[g["collections"], g["collected"]] for g in gc.get_stats()]
    return now if before is None else [[a - c, b - d] for (a, b), (c, d) in zip(now, before, strict=True)]


def child_loop(mode: str, compiles: int) -> dict[str, Any]:
    if mode in BRIDGE:
        import torch_otel.auto  # noqa: F401  - armed when torch.compile imports torch._dynamo
    import torch

    from bench.cost.zero_cost import compiled_mlp

    torch.set_num_threads(1)  # no intra-op pool spinning: its spin loops count instructions by the clock
    cm = compiled_mlp()
    cm(torch.randn(1, 64)).sum().backward()  # the warm-up compile: its processing and export before the region
    # a second warm call: the process's start-up ends (its first forward after its compiles, then the second timed),
    # and is written by the flush below: a once-per-process cost, counted by bench/startup_cost.py, not per compile
    cm(torch.randn(1, 64)).sum().backward()
    flush = None
    if mode in BRIDGE:
        import torch_otel

        flush = torch_otel.force_flush
        flush(600_000)
    import gc

    # The collector's state, the same in every mode: whether a full collection (about 140 M instructions over torch's
    # heap) falls inside a short region would otherwise turn on how many objects each mode allocated before it.
    gc.collect()
    objects = len(gc.get_objects())
    gc0 = _gc_stats()
    _callgrind("on")
    for n in range(2, 2 + compiles):
        cm(torch.randn(n, 64)).sum().backward()
    if flush is not None:
        flush(600_000)  # every compile's spans built and exported: inside the region
    _callgrind("off")
    import torch._dynamo.utils as du

    # the region's frame and backward compiles; the collections of Python's garbage collector in it (by generation);
    # and the objects the region left alive (what brings the next full collection nearer)
    gc1 = _gc_stats(gc0)
    gc.collect()
    return {"compile_metrics": len(du.get_compilation_metrics()) - 1, "gc": gc1, "objects_kept": len(gc.get_objects()) - objects}


def transformer_step() -> Any:
    """The steady workload's step: bench/cost/graph_calls.py's transformer, compiled on its first calls."""
    from bench.cost.graph_calls import transformer_step as step

    return step()


def child_steady(mode: str, steps: int) -> dict[str, Any]:
    if mode in BRIDGE:
        import torch_otel.auto  # noqa: F401
    import torch

    torch.set_num_threads(1)
    step = transformer_step()
    for _ in range(3):
        step()  # compiled (its forward on the first, its lazy backward on the first backward), warm
    calls = None
    if mode in BRIDGE:
        import torch_otel
        from torch_otel._pipeline import bridge

        torch_otel.force_flush(600_000)
        assert bridge._bridge is not None
        graphs = bridge._bridge.pipeline.states["graph_calls"].graphs  # the graph calls' state: its counters

        def calls() -> int:
            return sum(g.calls for g in graphs.graphs)

        if mode == "stacked":  # each graph behind STACK counters in place of one: what one more counter costs
            from bench.cost.graph_calls import _places, _swap

            _swap(_places(list(graphs.graphs)), "stacked")

    before = calls() if calls else 0
    import gc

    gc.collect()  # the collector's state, the same in every mode (see child_loop)
    gc0 = _gc_stats()
    _callgrind("on")
    for _ in range(steps):
        step()
    _callgrind("off")
    return {"steps": steps, "graph_calls": (calls() - before) if calls else None, "gc": _gc_stats(gc0)}


def child_startup(mode: str) -> dict[str, Any]:
    """The whole process to its first step (see the module): counted from its start, switched off after the step."""
    if mode in BRIDGE:
        import torch_otel.auto  # noqa: F401  - the first line, as torch-otel run puts it
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(64, 64), torch.randn(64, 1)), batch_size=16)
    compiled = torch.compile(model, backend="aot_eager")
    x, y = next(iter(data))
    loss = torch.nn.functional.mse_loss(compiled(x), y)
    loss.backward()
    opt.step()
    _callgrind("off")
    return {"steps": 1}


# What a layout puts on the heap before anything else: small objects (pymalloc's pools) and a block (malloc's heap),
# kept for the process's life, so that every object after them lies elsewhere. A checkout's path, its venv's, moves
# the heap in the same way; sampling layouts averages over where they put it.
_HEAP_PAD: list[Any] = []


def _pad_heap(layout: int) -> None:
    _HEAP_PAD.extend(bytes(48 + layout % 5 * 16) for _ in range(layout * 2053))
    _HEAP_PAD.append(bytearray(layout * 12_289))


def child(what: str, mode: str, n: int) -> int:
    _pad_heap(int(os.environ.get("TORCH_OTEL_BENCH_LAYOUT_N", "0")))
    if os.environ.get("TORCH_OTEL_BENCH_OPCODES"):
        _Opcodes.install()
    if mode in BRIDGE:  # with graph calls counted, the bridge's worker collects their counts every 10 s of wall time
        state = importlib.import_module("torch_otel._features.graph_calls.state").GraphCallsState
        state.collect_every_s = float(DAY_MS) / 1000
    try:  # torch.fx's progress bar starts tqdm's monitor thread, which wakes every 10 s of wall time: not here
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass
    if what == "startup":
        out = child_startup(mode)
    else:
        out = child_loop(mode, n) if what == "loop" else child_steady(mode, n)
    print(json.dumps(out), flush=True)
    return 0


# -- the parent: one process per count ----------------------------------------------------------------------------------


def python_binary() -> str:
    """The venv's own interpreter (a shim script would be what valgrind runs, and counts nothing of Python)."""
    path = Path(PY)
    with open(path.resolve(), "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            sys.exit(f"{PY} is a script, not Python itself: run the venv's bin/python (a shim hides it from valgrind)")
    return str(path)


def valgrind_version() -> str | None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return None
    return subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def _thread_kind(text: str, tid: int) -> str:
    """What runs on a thread, read from the functions callgrind saw on it (its names are not in the file)."""
    if tid == 1:
        return "main"
    python = "_PyEval_EvalFrameDefault" in text
    if python and ("upb_" in text or "grpc_call" in text or "grpc_core" in text):
        return "export"  # the SDK's export, or force_flush's thread: OTLP encoding (upb) and gRPC's call
    if python:
        return "python"  # the bridge's worker thread; the SDK's threads waking
    if "grpc" in text:
        return "grpc"
    return "native"


def read_counts(out: Path) -> dict[str, Any]:
    """Each thread's ``totals:`` (``F-01``, ``F-02``, ...), and their sum."""
    threads = []
    for f in sorted(out.parent.glob(out.name + "-*")):
        text = f.read_text(errors="replace")
        totals = [int(line.split()[1]) for line in text.splitlines() if line.startswith("totals:")]
        tid = int(f.name.rsplit("-", 1)[1])
        if totals and totals[0]:
            threads.append({"thread": tid, "kind": _thread_kind(text, tid), "ir": totals[0]})
    by_kind: dict[str, int] = {}
    for t in threads:
        by_kind[t["kind"]] = by_kind.get(t["kind"], 0) + t["ir"]
    return {"ir": sum(t["ir"] for t in threads), "by_kind": by_kind, "threads": threads}


# The runner's variables a child is given: no others. A count moves with the process's memory layout, and the layout
# with its environment (its size shifts where the interpreter's objects lie), so a count is made in an environment of
# its own, not the runner's (a shell's, pytest's, CI's, whose variables differ from one to the next).
KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER", "LOGNAME", "PYTHONPATH")
LAYOUT_STEP = 61  # characters of TORCH_OTEL_BENCH_LAYOUT per layout: each rep of a mode is counted in a layout of its own


def child_env(mode: str, endpoint: str | None, trace_dir: str, layout: int = 0) -> dict[str, str]:
    """The child's environment: a few of the runner's variables, the count's settings, and ``layout``'s padding (the same
    for every mode, so that rep ``r`` of each mode is counted in the same layout)."""
    env = {k: os.environ[k] for k in KEPT_VARIABLES if k in os.environ}
    env["TORCH_OTEL_BENCH_LAYOUT"] = "x" * (LAYOUT_STEP * layout)
    env["TORCH_OTEL_BENCH_LAYOUT_N"] = str(layout)
    env.update(
        PYTHONHASHSEED=str(layout),
        OMP_NUM_THREADS="1",
        TORCH_OTEL_BENCH_CALLGRIND="1",
        # timers would fire 50 times as often per unit of work under valgrind: spans leave at the flush
        OTEL_BSP_SCHEDULE_DELAY=DAY_MS,
        OTEL_METRIC_EXPORT_INTERVAL=DAY_MS,
        # and an export slowed 50 times may pass its 10 s deadline: the SDK would encode and send it again
        OTEL_EXPORTER_OTLP_TIMEOUT="600",
        OTEL_SERVICE_NAME="bench",
    )
    if mode in BRIDGE:  # metrics as a user gets them: over OTLP, and on /metrics (a free port: 9464 may be taken)
        from torch_otel._core.ports import free_port

        env["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(free_port())
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if mode in BRIDGE:
        env["TORCH_OTEL_CAPTURE"] = "full" if mode == "full" else "default"
        if mode in GRAPH_CALLS:
            env["TORCH_OTEL_GRAPH_CALLS"] = GRAPH_CALLS[mode]
    if mode == "trace":
        env["TORCH_TRACE"] = trace_dir
    return env


def count(
    what: str,
    mode: str,
    n: int,
    endpoint: str | None,
    keep: Path | None = None,
    extra: list[str] | None = None,
    layout: int = 0,
) -> dict[str, Any]:
    """One fresh process under callgrind: its counts and what it said."""
    with tempfile.TemporaryDirectory(prefix="torch-otel-instructions-") as d:
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        out = Path(keep or d) / f"{what}-{mode}.cg"
        argv = [
            "valgrind",
            "--tool=callgrind",
            f"--instr-atstart={'yes' if what == 'startup' else 'no'}",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            *(extra or []),
            python_binary(),
            "-m",
            "bench.cost.instructions",
            "child",
            what,
            mode,
            str(n),
        ]
        t = time.perf_counter()
        env = child_env(mode, endpoint, d, layout)
        p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise RuntimeError(f"{what} {mode} exited {p.returncode}:\n{p.stderr[-3000:]}")
        said = json.loads(p.stdout.strip().splitlines()[-1])
        return {**read_counts(out), **said, "wall_s": round(wall, 1)}


def measure(
    what: str, modes: tuple[str, ...], n: int, reps: int, endpoint: str | None, keep: Path | None = None, jobs: int = 1
) -> dict[str, list[dict[str, Any]]]:
    """Each mode ``reps`` times, in a rotated order, ``jobs`` processes at a time (a count does not depend on what
    else runs)."""
    from concurrent.futures import ThreadPoolExecutor

    order = [(rep, mode) for rep in range(reps) for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]]

    def one(task: tuple[int, str]) -> dict[str, Any]:
        rep, mode = task
        r = count(what, mode, n, endpoint, keep / str(rep + 1) if keep else None, layout=rep)
        print(f"{what} {mode} #{rep + 1}: {r['ir']:,} instructions ({r['wall_s']:.0f} s)", file=sys.stderr, flush=True)
        return r

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        done = list(pool.map(one, order))
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for (_, mode), r in sorted(zip(order, done, strict=True), key=lambda x: x[0][0]):
        runs[mode].append(r)
    return runs


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        "valgrind": valgrind_version() or "absent",
        "torch": version("torch"),
        "python": sys.version.split()[0],
        "opentelemetry-sdk": version("opentelemetry-sdk"),
    }


# -- the table --------------------------------------------------------------------------------------------------------


def _spread(runs: list[dict[str, Any]], key: str = "ir") -> float:
    """The method's own spread: (max - min) / mean of a mode's counts."""
    v = [r[key] for r in runs]
    return (max(v) - min(v)) / statistics.fmean(v) if len(v) > 1 else 0.0


def _mean(runs: list[dict[str, Any]], key: str = "ir") -> float:
    return statistics.fmean(r[key] for r in runs)


def _main_ir(r: dict[str, Any]) -> int:
    return int(r["by_kind"].get("main", 0))


def loop_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    none = _mean(runs["none"]) if "none" in runs else None
    trace_added = _mean(runs["trace"]) - none if none is not None and "trace" in runs else None
    out: dict[str, Any] = {}
    for mode, rs in runs.items():
        m = _mean(rs)
        row: dict[str, Any] = {"ir": m, "spread": _spread(rs)}
        if none is not None:
            row["vs_none"] = m / none
            row["added"] = m - none
            if trace_added and mode in BRIDGE:
                row["of_trace_added"] = (m - none) / trace_added
        out[mode] = row
    return out


def steady_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per mode, the main thread's instructions per step; what graph calls add per step, per call, and per counter."""
    out: dict[str, Any] = {}
    per_step = {m: statistics.fmean(_main_ir(r) / r["steps"] for r in rs) for m, rs in runs.items()}
    for mode, rs in runs.items():
        main = [_main_ir(r) for r in rs]
        row: dict[str, Any] = {
            "main_per_step": per_step[mode],
            "spread": (max(main) - min(main)) / statistics.fmean(main) if len(rs) > 1 else 0.0,
            "other_threads": statistics.fmean(r["ir"] - _main_ir(r) for r in rs),
        }
        if "none" in per_step:
            row["added_per_step"] = per_step[mode] - per_step["none"]
            row["of_step"] = row["added_per_step"] / per_step["none"]
        calls = [r["graph_calls"] / r["steps"] for r in rs if r.get("graph_calls")]
        if calls:
            row["calls_per_step"] = statistics.fmean(calls)
        out[mode] = row
    calls_per_step = out.get("calls", {}).get("calls_per_step")
    base = per_step.get("none", per_step.get("nocalls"))
    if calls_per_step and "nocalls" in per_step and base:
        c = out["calls"]
        c["per_call"] = (per_step["calls"] - per_step["nocalls"]) / calls_per_step
        c["of_step_over_default"] = (per_step["calls"] - per_step["nocalls"]) / base
    if calls_per_step and "stacked" in per_step:
        from bench.cost.graph_calls import STACK

        # each graph behind STACK counters against behind one: one more counter, per graph call
        out["stacked"]["per_further_counter_per_call"] = (per_step["stacked"] - per_step["calls"]) / (STACK - 1) / calls_per_step
        out["stacked"]["stack"] = STACK
    return out


def startup_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per mode, the whole start-up's instructions and its main thread's; what the bridge adds, of each."""
    out: dict[str, Any] = {}
    for mode, rs in runs.items():
        row: dict[str, Any] = {"ir": _mean(rs), "main": statistics.fmean(_main_ir(r) for r in rs), "spread": _spread(rs)}
        if "none" in runs and mode != "none":
            base, base_main = _mean(runs["none"]), statistics.fmean(_main_ir(r) for r in runs["none"])
            row["added"], row["of_startup"] = row["ir"] - base, (row["ir"] - base) / base
            row["added_main"], row["of_main"] = row["main"] - base_main, (row["main"] - base_main) / base_main
        out[mode] = row
    return out


def table(results: dict[str, Any]) -> str:
    v = results["versions"]
    lines = [
        f"Counted with `{results['command']}` ({v['valgrind']}, torch {v['torch']}, Python {v['python']}, "
        f"opentelemetry-sdk {v['opentelemetry-sdk']}); {results.get('wall_minutes', 0):.0f} minutes.",
        "",
    ]
    if "loop" in results:
        loop = results["loop"]
        s = loop_summary(loop["runs"])
        lines += [
            f"**The compile loop**: {loop['compiles']} fresh `aot_eager` recompiles of a small MLP, forward and backward, "
            "spans exported over OTLP/gRPC to rotel and flushed inside the region. Each mode counted "
            f"{len(next(iter(loop['runs'].values())))} times, each in its own process.",
            "",
            "| mode | instructions | spread of its counts | vs none | added | added, of TORCH_TRACE's |",
            "|---|---|---|---|---|---|",
        ]
        names = {
            "none": "no bridge",
            "default": "default capture",
            "full": "full capture",
            "calls": "default, graph calls on",
            "nocalls": "default, graph calls off",
            "trace": "`TORCH_TRACE` alone",
        }
        for mode, row in s.items():
            added = f"{row['added'] / 1e6:+,.1f} M" if "added" in row and mode != "none" else ""
            of_trace = f"{row['of_trace_added']:.2f}" if "of_trace_added" in row else ""
            vs = f"{row['vs_none']:.4f}" if "vs_none" in row else ""
            lines.append(
                f"| {names.get(mode, mode)} | {row['ir'] / 1e9:,.3f} G | {row['spread']:.3%} | {vs} | {added} | {of_trace} |"
            )
        kinds = sorted({k for rs in loop["runs"].values() for r in rs for k in r["by_kind"]})
        lines += ["", "By thread (mean, M instructions):", "", "| thread | " + " | ".join(s) + " |", "|---|" + "---|" * len(s)]
        for k in kinds:
            cells = [f"{statistics.fmean(r['by_kind'].get(k, 0) for r in loop['runs'][m]) / 1e6:,.1f}" for m in s]
            lines.append(f"| {THREAD_NAMES.get(k, k)} | " + " | ".join(cells) + " |")
        lines.append("")
    if "steady" in results:
        st = results["steady"]
        s = steady_summary(st["runs"])
        lines += [
            f"**The steady step**: a small compiled transformer's training step, {st['steps']} steps counted on the main "
            "thread (where the step runs).",
            "",
            "| mode | per step | spread | added per step | of the step | graph calls per step | per graph call |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode, row in s.items():
            added = f"{row['added_per_step']:+,.0f}" if "added_per_step" in row and mode != "none" else ""
            of = f"{row['of_step']:+.4%}" if "of_step" in row and mode != "none" else ""
            cps = f"{row['calls_per_step']:.0f}" if "calls_per_step" in row else ""
            per = f"{row['per_call']:,.0f}" if "per_call" in row else ""
            if "per_further_counter_per_call" in row:
                per = f"{row['per_further_counter_per_call']:,.0f} (each further counter)"
            lines.append(
                f"| {STEADY_NAMES.get(mode, mode)} | {row['main_per_step']:,.0f} | {row['spread']:.3%} | {added} | {of} | {cps} | {per} |"
            )
        calls = s.get("calls", {})
        if "of_step_over_default" in calls:
            lines += [
                "",
                f"Graph calls on, against off: {calls['per_call']:,.0f} instructions per graph call, "
                f"{calls['of_step_over_default']:+.4%} of the step.",
            ]
        lines.append("")
    if "startup" in results:
        s = startup_summary(results["startup"]["runs"])
        lines += [
            "**The start-up**: a process from its first instruction to its first training step's return (an MLP, SGD, a "
            "DataLoader, `aot_eager`), the bridge turned on by its first line.",
            "",
            "| mode | instructions | spread | main thread | added | of the start-up | added on the main thread | of its main thread |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode, row in s.items():
            cells = ["", "", "", ""]
            if "added" in row:
                cells = [
                    f"{row['added'] / 1e6:+,.1f} M",
                    f"{row['of_startup']:+.2%}",
                    f"{row['added_main'] / 1e6:+,.1f} M",
                    f"{row['of_main']:+.2%}",
                ]
            name = "no bridge" if mode == "none" else "default capture"
            lines.append(
                f"| {name} | {row['ir'] / 1e9:,.3f} G | {row['spread']:.3%} | {row['main'] / 1e9:,.3f} G | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


STEADY_NAMES = {
    "none": "no bridge",
    "default": "default capture",
    "nocalls": "default capture, graph calls off",
    "calls": "default capture, graph calls on",
    "stacked": "graph calls on, each graph behind 20 counters",
}
THREAD_NAMES = {
    "main": "main (torch, and the bridge's hooks)",
    "python": "other Python threads (the bridge's worker)",
    "export": "OTLP export (the SDK's batch thread, force_flush's)",
    "grpc": "gRPC's native threads",
    "native": "other native threads",
}


# -- where the instructions go ------------------------------------------------------------------------------------------


def profile(what: str, mode: str, n: int, top: int) -> int:
    """One count of one mode, kept, and callgrind_annotate's function view of each thread."""
    from tests.servers import Rotel

    keep = Path(tempfile.mkdtemp(prefix=f"torch-otel-profile-{what}-{mode}-"))
    with Rotel(debug=False) as rotel:
        r = count(what, mode, n, rotel.grpc_endpoint, keep=keep)
    print(json.dumps({k: r[k] for k in ("ir", "by_kind")}), flush=True)
    for t in r["threads"]:
        f = keep / f"{what}-{mode}.cg-{t['thread']:02d}"
        print(f"\n=== thread {t['thread']} ({THREAD_NAMES.get(t['kind'], t['kind'])}): {t['ir']:,} instructions; {f}")
        ann = subprocess.run(
            ["callgrind_annotate", "--inclusive=no", "--threshold=99", str(f)], capture_output=True, text=True, check=False
        ).stdout
        body = [line for line in ann.splitlines() if line.strip()]
        start = next((i for i, line in enumerate(body) if "file:function" in line), 0)
        print("\n".join(body[start : start + top + 1]))
    print(f"\nthe files stay in {keep} (callgrind_annotate --inclusive=yes FILE for the inclusive view)")
    return 0


def opcodes(what: str, mode: str, n: int, top: int) -> int:
    """The same region outside valgrind, the bridge's side's Python bytecodes counted by thread and function."""
    from tests.servers import Rotel

    with tempfile.TemporaryDirectory(prefix="torch-otel-opcodes-") as d, Rotel(debug=False) as rotel:
        env = child_env(mode, rotel.grpc_endpoint, d)
        env.pop("TORCH_OTEL_BENCH_CALLGRIND")
        env["TORCH_OTEL_BENCH_OPCODES"] = out = os.path.join(d, "opcodes.json")
        p = subprocess.run(
            [PY, "-m", "bench.cost.instructions", "child", what, mode, str(n)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            sys.exit(f"{what} {mode} exited {p.returncode}:\n{p.stderr[-3000:]}")
        found = json.loads(Path(out).read_text())
    by_thread: dict[str, int] = {}
    for t, _, c in found["self"]:
        by_thread[t] = by_thread.get(t, 0) + c
    print(f"bytecodes on the bridge's side, by thread: {json.dumps(by_thread)}")
    calls_by_thread: dict[str, int] = {}
    for key, c in found.get("calls", {}).items():
        calls_by_thread[key.split("|")[0]] = calls_by_thread.get(key.split("|")[0], 0) + c
    print(f"Python calls on the bridge's side, by thread: {json.dumps(calls_by_thread)}")
    by_package: dict[str, dict[str, int]] = {}
    for t, f, c in found["self"]:
        first = f.split(":")[0].split(os.sep)[0] if os.sep in f.split(":")[0] else ""
        package = first if first in ("torch_otel", "opentelemetry", "prometheus_client", "grpc", "google") else "other"
        by_package.setdefault(t, {})[package] = by_package.setdefault(t, {}).get(package, 0) + c
    for t, counts in by_package.items():
        total = sum(counts.values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(counts.items(), key=lambda x: -x[1]))
        print(f"  {t}: {total:,} bytecodes: {shares}")
    for view, title in (("inclusive", "by function, with what it calls (inclusive)"), ("self", "by function (self)")):
        print(f"\n{title}:")
        for t, f, c in found[view][:top]:
            calls = found.get("calls", {}).get(f"{t}|{f}", 0)
            print(f"{c:>12,} {calls:>7,} calls {c // max(calls, 1):>7,}/call  {t:<22} {f}")
    return 0


# -- main ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        return child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", help="profile loop|steady MODE: where one mode's instructions go")
    ap.add_argument("--only", choices=tuple(MODES), help="one part alone")
    ap.add_argument("--modes", help="comma-separated modes of that part (default: all)")
    ap.add_argument("--reps", type=int, default=2, help="counts of each mode (2: the method's spread)")
    ap.add_argument("--compiles", type=int, default=COMPILES, help="recompiles in the compile loop's region")
    ap.add_argument("--steps", type=int, default=STEPS, help="training steps in the steady region")
    ap.add_argument("--out", default=str(RESULTS), help="the JSON file written")
    ap.add_argument("--jobs", type=int, default=2, help="counts run at once (each its own process; 2 cores here)")
    ap.add_argument("--keep", metavar="DIR", help="keep callgrind's files there (REP/PART-MODE.cg-THREAD)")
    ap.add_argument("--top", type=int, default=25, help="profile: functions listed per thread")
    ap.add_argument("--table-from", metavar="JSON", help="print the table of an earlier run")
    a = ap.parse_args()
    if a.table_from:
        print(table(json.loads(Path(a.table_from).read_text())))
        return 0
    if valgrind_version() is None and a.what[:1] != ["opcodes"]:
        sys.exit("valgrind is not installed (apt-get install valgrind): it counts the instructions")
    if a.what:
        if len(a.what) != 3 or a.what[0] not in ("profile", "opcodes") or a.what[1] not in ("loop", "steady"):
            sys.exit("usage: python -m bench.cost.instructions profile|opcodes loop|steady MODE")
        n = a.compiles if a.what[1] == "loop" else a.steps
        return (profile if a.what[0] == "profile" else opcodes)(a.what[1], a.what[2], n, a.top)
    from tests.servers import Rotel

    t0 = time.monotonic()
    results: dict[str, Any] = {"command": " ".join(["python -m bench.cost.instructions", *sys.argv[1:]]), "versions": versions()}
    parts = (a.only,) if a.only else tuple(MODES)
    with Rotel(debug=False) as rotel:
        for part in parts:
            every = MODES[part]
            modes = tuple(a.modes.split(",")) if a.modes else every
            bad = [m for m in modes if m not in every]
            if bad:
                sys.exit(f"unknown {part} mode(s) {bad}: choose among {', '.join(every)}")
            n = a.compiles if part == "loop" else a.steps
            runs = measure(part, modes, n, a.reps, rotel.grpc_endpoint, Path(a.keep) if a.keep else None, a.jobs)
            results[part] = {"runs": runs} if part == "startup" else {"compiles" if part == "loop" else "steps": n, "runs": runs}
            summary = {"loop": loop_summary, "steady": steady_summary, "startup": startup_summary}[part]
            results[part]["summary"] = summary(runs)
    results["wall_minutes"] = (time.monotonic() - t0) / 60
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
