"""torch's portable cache ("mega-cache"): ``save`` compiles with inductor and writes
``torch.compiler.save_cache_artifacts()`` to ARTIFACTS; ``load`` (a fresh process, an empty
TORCHINDUCTOR_CACHE_DIR) loads them, compiles the same function, and prints its own /metrics
cache lines (``WITH_BRIDGE=1``, served on OTEL_EXPORTER_PROMETHEUS_PORT).
"""

import os
import sys
import urllib.request

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch


def fn(x):
    return torch.sin(x) * 3 + 1


path = os.environ["ARTIFACTS"]
if sys.argv[1] == "load":
    info = torch.compiler.load_cache_artifacts(open(path, "rb").read())
    print("loaded", {k: len(v) for k, v in info.artifacts.items()})
torch.compile(fn)(torch.randn(16))
if sys.argv[1] == "save":
    artifacts, info = torch.compiler.save_cache_artifacts()
    with open(path, "wb") as fh:
        fh.write(artifacts)
    print("saved", {k: len(v) for k, v in info.artifacts.items()})
elif os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel

    torch_otel.force_flush()
    port = os.environ["OTEL_EXPORTER_PROMETHEUS_PORT"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    print("\n".join(line for line in text.splitlines() if line.startswith("torch_compile_cache_requests_total")))
