"""Every way torch compiles besides torch.compile: torch.export (non-strict first, strict, failing, draft),
an AOT precompile, and (``AOTI=1``) AOTInductor. Run by the tests in a subprocess.

``WITH_BRIDGE=1`` imports ``torch_otel.auto`` first. The first thing that compiles is a non-strict
export: ``torch.export._trace`` imports ``torch._dynamo`` itself, so the bridge arms inside that import.
draft_export comes last: it takes torch's TORCH_TRACE handler away for the rest of the process.
"""

import os
import sys

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch


class M(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on a tensor's value: export cannot trace it
            return x
        return -x


m, x = M(), torch.randn(3, 8)
torch.export.export(m, (x,), strict=False)
ep = torch.export.export(m, (x,), strict=True)
try:
    torch.export.export(DataDependent(), (x,), strict=False)
except Exception as exc:  # noqa: BLE001
    print("export failed:", type(exc).__name__, file=sys.stderr)
compiled = torch.compile(lambda t: torch.relu(t) * 2, fullgraph=True, backend="eager")
compiled.aot_compile(((x,), {}))
if os.environ.get("AOTI") == "1":
    torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(os.environ["OUT_DIR"], "m.pt2"))
torch.export.draft_export(m, (x,))
print("done")
