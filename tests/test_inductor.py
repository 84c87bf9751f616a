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
    names = {s.name for s in cap.spans() if s.context.trace_id == first.context.trace_id}
    assert {"backend_compile", "create_aot_dispatcher_function"} <= names
    assert names & {"compile_fx.<locals>.fw_compiler_base", "inductor_compile", "compile_fx_inner"}
    a = second.attributes
    assert a.get("torch.compile.cache.fx_graph.local.hits", 0) + a.get("torch.compile.cache.aot_autograd.local.hits", 0) >= 1
    hits = [
        cap.sample("torch_compile_cache_requests_total", rank="0", cache=c, location="local", result="hit")
        for c in ("fx_graph", "aot_autograd")
    ]
    assert sum(h or 0 for h in hits) >= 1
    phases = [
        p
        for p in ("inductor", "aot_autograd", "dynamo_tracing")
        if cap.sample("torch_compile_phase_duration_seconds_count", rank="0", phase=p)
    ]
    assert phases == ["inductor", "aot_autograd", "dynamo_tracing"]
