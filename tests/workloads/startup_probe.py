"""The start-up workloads' own stamps, and what the recorder saw, for the tests to compare.

The start-up workloads import this module first. Run under ``torch-otel run`` (the recorder installed at the
interpreter's start, the bridge handing it each compile), with ``STARTUP_OUT`` set it writes at exit the process's
start-up as the recorder worked it out, the workload's own stamps, its start read apart from the recorder, and
torch's compile records, to ``STARTUP_OUT`` (``{rank}`` filled in). Without the bridge nothing of it loads: the same
workload runs with the bridge off.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

FIRST_NS = time.perf_counter_ns()  # the workload's first line
OUT = os.environ.get("STARTUP_OUT", "")
_stamps: dict[str, int] = {}


def proc_start() -> dict[str, int]:
    """The process's start, read here apart from the recorder: perf_counter and wall-clock nanoseconds."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    ticks = int(fields[19])
    perf, boot, wall = time.perf_counter_ns(), time.clock_gettime_ns(time.CLOCK_BOOTTIME), time.time_ns()
    age = boot - ticks * 10**9 // os.sysconf("SC_CLK_TCK")
    return {"perf_ns": perf - age, "unix_ns": wall - age}


def stamp(name: str) -> None:
    """A boundary of the workload's own, on ``time.perf_counter``."""
    _stamps[name] = time.perf_counter_ns()


HOOKED = (  # what the recorder hooks, by where a user reaches it
    "torch.nn.Module.__call__",
    "torch.nn.Module.load_state_dict",
    "torch.load",
    "torch.autograd.backward",
    "torch.optim.Optimizer._optimizer_step_code",
    "torch.utils.data.DataLoader._get_iterator",
    "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
    "torch.distributed.init_process_group",
    "torch.distributed.all_reduce",
    "torch.distributed._verify_params_across_processes",
    "torch.cuda._lazy_init",
    "torch.cuda.graphs.graph.__enter__",
    "torch._dynamo.reset",
    "safetensors.torch.load_file",
    "safetensors.safe_open.__enter__",
    "transformers.modeling_utils.PreTrainedModel.from_pretrained",
)


def fingerprint() -> dict[str, Any]:
    """What each hooked function is now (its code's file, line and name; a C function's repr, without its address),
    torch's global hook tables' sizes and dynamo's compile callbacks: the same with the bridge on, after its start-up
    ended, as with it off."""
    import _frozen_importlib
    import importlib
    import re
    import sys

    out: dict[str, Any] = {}
    for dotted in HOOKED:
        parts = dotted.split(".")
        obj: Any = None
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            break
        fn = getattr(obj, "__func__", obj)
        code = getattr(fn, "__code__", None)
        out[dotted] = (
            f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}:{'__torch_otel_startup_hook__' in fn.__globals__}"
            if code is not None
            else re.sub(r" at 0x[0-9a-f]+", "", repr(obj))
        )
    fl = _frozen_importlib._find_and_load
    out["_find_and_load"] = f"{fl.__code__.co_filename}:{fl.__code__.co_firstlineno}:{fl.__module__}"
    optim, mm = sys.modules["torch.optim.optimizer"], sys.modules["torch.nn.modules.module"]
    out["optimizer_hooks"] = [len(optim._global_optimizer_pre_hooks), len(optim._global_optimizer_post_hooks)]
    out["module_hooks"] = [len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks), len(mm._global_backward_hooks)]
    handler = sys.modules["torch._dynamo.callback"].callback_handler
    out["compile_callbacks"] = [len(handler.start_callbacks), len(handler.end_callbacks)]
    return out


def _dump() -> None:
    import sys

    from torch_otel._features.startup import recorder as startup_hooks

    recorder = startup_hooks.current()
    if recorder is None:
        raise SystemExit("startup_probe: no start-up recorder: run the workload under torch-otel run")
    if recorder.state == "forked":  # a forked child reports no start-up of its own
        return
    recorder.finish()  # the end is now (exit) if nothing ended it before
    t0 = time.perf_counter_ns()
    st = recorder.startup()
    attribution_ms = (time.perf_counter_ns() - t0) / 1e6
    untimed = ("imports", "interpreter", "bridge")
    counts = {
        "module_loads": recorder.loads,
        "timed_calls": sum(1 for i in recorder.intervals if i[2] not in untimed and i[3] != "forward"),
        "outermost_forwards": recorder.forwards,
        "intervals": len(recorder.intervals),
    }
    torch = sys.modules.get("torch")
    compiles = []
    if torch is not None and "torch._dynamo.utils" in sys.modules:
        for m in torch._dynamo.utils.get_compilation_metrics():
            if m.is_runtime or m.start_time_us is None or m.end_time_us is None:
                continue
            compiles.append({"start_unix_ns": m.start_time_us * 1000, "end_unix_ns": m.end_time_us * 1000})
    out = {
        "pid": os.getpid(),
        "rank": int(os.environ.get("RANK", "0")),
        "first_ns": FIRST_NS,
        "proc_start": proc_start(),
        "stamps": _stamps,
        "end_ns": recorder.end_ns,
        "startup": st.to_dict(),
        "spans": [vars(s) if hasattr(s, "__dict__") else {f: getattr(s, f) for f in s.__slots__} for s in st.spans],
        "torch_compiles": compiles,
        "state": recorder.state,
        "counts": counts,
        "attribution_ms": attribution_ms,
    }
    path = OUT.replace("{rank}", str(out["rank"])).replace("{pid}", str(out["pid"]))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f)


def ready() -> None:
    """The server is ready: ``torch_otel.ready()``, where the bridge is on."""
    if OUT:
        import torch_otel

        torch_otel.ready()


def dump_now() -> None:
    """Write the result now (a workload that ends before exit), instead of at exit."""
    if OUT:
        atexit.unregister(_dump)
        _dump()


if OUT:
    atexit.register(_dump)
