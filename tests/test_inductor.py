"""The one inductor test: phases and cache outcomes, on the run's shared TORCHINDUCTOR_CACHE_DIR."""

from __future__ import annotations

import torch
from helpers import read_otlp_json_spans, run_python


def test_inductor_phases_and_fx_graph_cache_hit(cap):
    def f(x):
        return torch.nn.functional.gelu(x) * 2

    torch.compile(f, backend="inductor")(torch.randn(16))
    torch._dynamo.reset()  # compile again: now served by the FX graph cache
    torch.compile(f, backend="inductor")(torch.randn(16))
    first, second = cap.roots()
    names = {s.name for s in cap.spans() if s.context.trace_id in (first.context.trace_id, second.context.trace_id)}
    assert "backend_compile" in names
    # a cold cache runs inductor; a warm one (the shared cache dir) loads the compiled artifact
    assert names & {
        "compile_fx.<locals>.fw_compiler_base",
        "inductor_compile",
        "compile_fx_inner",
        "AOTAutogradCache.inductor_load",
    }
    a = second.attributes
    assert a.get("torch.compile.cache.fx_graph.local.hits", 0) + a.get("torch.compile.cache.aot_autograd.local.hits", 0) >= 1
    hits = [
        cap.sample("torch_compile_cache_requests_total", rank="0", cache=c, location="local", result="hit")
        for c in ("fx_graph", "aot_autograd")
    ]
    assert sum(h or 0 for h in hits) >= 1
    phases = {
        p
        for p in ("inductor", "cache_load", "dynamo_tracing", "backend_compile")
        if cap.sample("torch_compile_phase_duration_seconds_count", rank="0", phase=p)
    }
    assert {"dynamo_tracing", "backend_compile"} <= phases and phases & {"inductor", "cache_load"}


def test_compile_worker_phases_join_the_compile_they_served(tmp_path):
    """C++ kernel builds (``compile_file``) run on compile worker threads, whose events carry no compile id.

    Only a cold kernel cache builds kernels, so this one runs in its own process on an empty cache (about 30 s here).
    """
    spans_file = tmp_path / "spans.jsonl"
    script = (
        "import torch_otel.auto\nimport torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))\n"
        "torch.compile(m, backend='inductor')(torch.randn(4, 16)).sum().backward()\n"
    )
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold-cache"),
        "TORCH_OTEL_TRACES_FILE": str(spans_file),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    res = run_python("-c", env, args=[script], timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    spans = read_otlp_json_spans(spans_file)
    builds = [s for s in spans if s["name"] == "compile_file"]
    joined = [s for s in builds if s["attrs"].get("torch.compile.attributed") == "the only compile in flight"]
    assert joined, [(s["name"], s["attrs"]) for s in builds]
    roots = {s["traceId"] for s in spans if "torch.compile.kind" in s["attrs"]}
    assert all(s["traceId"] in roots for s in builds)  # every build sits in a compile's trace: none dropped
