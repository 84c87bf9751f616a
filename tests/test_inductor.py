"""The one inductor test: phases and cache outcomes, on the run's shared TORCHINDUCTOR_CACHE_DIR."""

from __future__ import annotations

import torch


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
