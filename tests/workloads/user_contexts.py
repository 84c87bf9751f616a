"""A training loop that tells torch where it is: a recompile user-context hook (torch's
``torch._dynamo.utils.register_hook_for_recompile_user_context``) that says the step, and a function that recompiles
on the batch size at steps 1 and 2.

    python user_contexts.py OUT_DIR

It writes ``OUT_DIR/torch-metrics.json``: torch's own record of each compile (``get_compilation_metrics()``): its
compile id and ``recompile_user_contexts``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import get_compilation_metrics, register_hook_for_recompile_user_context

import torch_otel  # noqa: F401
import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

out = Path(sys.argv[1])
where = {"step": 0}
register_hook_for_recompile_user_context(lambda: f"step {where['step']}")


@torch.compile(backend="eager", dynamic=False)
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


for step, batch in enumerate((4, 8, 16)):
    where["step"] = step
    scale(torch.randn(batch))

torch_otel.force_flush()
out.mkdir(parents=True, exist_ok=True)
(out / "torch-metrics.json").write_text(
    json.dumps(
        [{"id": str(m.compile_id), "contexts": sorted(m.recompile_user_contexts or [])} for m in get_compilation_metrics()]
    )
)
