"""No optimizer and no forward: the start-up ends at the process's exit. It forks a child first.

``python startup_exit.py CHILD_OUT``, ``STARTUP_OUT`` set (tests/workloads/startup_probe.py). Stamps: ``imports0/1``
around ``import torch``, ``fork`` when the child is forked, ``exit`` just before the script returns. The child (forked
before any first step, as a DataLoader worker is) writes to ``CHILD_OUT`` what its recorder says and whether torch's
functions are torch's own again there, and leaves with ``os._exit``.
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code

startup_probe.stamp("imports0")
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

startup_probe.stamp("imports1")
x = torch.ones(4) * 2  # work, but no module is called and nothing steps
time.sleep(0.3)
startup_probe.stamp("fork")
pid = os.fork()
if pid == 0:
    import _frozen_importlib

    from torch_otel._features.startup import recorder as startup_hooks

    rec = startup_hooks.current()
    code = torch.nn.Module.__call__.__code__
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(
            {
                "state": rec.state if rec else None,
                "module_call_is_torchs": code.co_filename.endswith(os.path.join("nn", "modules", "module.py")),
                "find_and_load_is_pythons": not getattr(_frozen_importlib._find_and_load, "__torch_otel_startup__", False),
                "torch_load_is_torchs": torch.load.__module__ == "torch.serialization" and not hasattr(torch.load, "__wrapped__"),
            },
            f,
        )
    os._exit(0)
os.waitpid(pid, 0)
startup_probe.stamp("exit")
