"""A small model compiled with inductor, forward and backward, trained two steps on ``TORCHINDUCTOR_CACHE_DIR``.

``python startup_inductor.py``, ``STARTUP_OUT`` set (tests/workloads/startup_probe.py): run on a fresh cache
directory (cold: inductor compiles) and again on the same one (warm: the FX graph cache serves both graphs).
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code

startup_probe.stamp("imports0")
import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401

startup_probe.stamp("imports1")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    if not step:
        startup_probe.stamp("step0")
    loss = compiled(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    startup_probe.stamp(("step1", "step2")[step])
