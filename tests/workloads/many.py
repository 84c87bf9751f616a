"""Compiles N new frames under the bridge, some failing, and reports memory and the bridge's leftover state.

``python many.py N`` (with the bridge unless ``WITH_BRIDGE=0``; ``SMALL_CAPS=K``: the bridge remembers K recent
compiles, not 4,096, so a short run goes past that bound): every 10th compile fails inside a phase (the backend
raises during ``backend_compile``), every 10th + 5 fails in Dynamo's tracing.
torch's own caches are reset every 500 compiles, so what grows after that is
not torch's per-frame state. Prints one JSON line: RSS (MB) after the first
500, 1,000 and 2,000 compiles and at the end, and what the bridge still holds.
"""

import gc
import json
import os
import sys

if os.environ.get("WITH_BRIDGE", "1") == "1":
    if os.environ.get("SMALL_CAPS"):  # run past the bridge's memory of recent compiles in fewer compiles
        import torch_otel._assemble.derive

        torch_otel._assemble.derive.RECENT = int(os.environ["SMALL_CAPS"])
    import torch_otel.auto  # noqa: F401

import torch

N = int(sys.argv[1])


def rss_mb():
    """RSS once the bridge's worker has caught up: on a loaded machine it may be a few compiles behind, and what it
    still holds then is its queue, not what it keeps."""
    if "torch_otel" in sys.modules:
        from torch_otel._pipeline import bridge as live

        if live._bridge is not None:
            live._bridge.capture.drain()
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def failing_backend(gm, example_inputs):
    raise RuntimeError("backend failure inside a phase")


rss = {}
failures = 0
for k in range(N):
    scope = {}
    if k % 10 == 5:
        exec(f"def f{k}(x):\n    return x + torch.ones(3, 3) @ torch.ones(4, 4) * {k}\n", {"torch": torch}, scope)
    else:
        exec(f"def f{k}(x):\n    return x * {k} + 1\n", scope)
    try:
        torch.compile(scope[f"f{k}"], backend=failing_backend if k % 10 == 0 else "eager")(torch.ones(3))
    except Exception:  # noqa: BLE001
        failures += 1
    if (k + 1) % 500 == 0:
        torch._dynamo.reset()
    if k + 1 in (min(500, N), min(1000, N), min(2000, N)):
        gc.collect()
        rss[f"after_{k + 1}"] = rss_mb()
gc.collect()
rss["end"] = rss_mb()

report = {"compiles": N, "failures": failures, "rss_mb": rss}
if "torch_otel" in sys.modules:
    import torch_otel
    from torch_otel._model.record import CompileRecord
    from torch_otel._pipeline import bridge as _bridge

    b = _bridge._bridge
    b.capture.drain()  # the compiles the worker has not processed yet (a loaded machine): every one must reach its end
    report.update(
        open_compiles=len(b.assembler._open),
        remembered=max(len(b.assembler.derive._forwards), len(b.assembler.derive._frame_code)),
        live_compile_records=sum(type(o) is CompileRecord for o in gc.get_objects()),
        stats=dict(b.assembler.stats),
        internal_errors=torch_otel.internal_error_count(),
    )
print(json.dumps(report), flush=True)
