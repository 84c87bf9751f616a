"""Which fields of torch's ``CompilationMetrics`` record the bridge reads, and what each becomes.

torch writes one ``CompilationMetrics`` record per compile (a frame's, a lazy backward's, a runtime record), about a
hundred fields in torch 2.10 to 2.15. Every field is either read (:data:`READ`, here, with where it goes) or named in
docs/span-model.md ("CompilationMetrics fields left out") with why it is left out. tests/fast/test_compilation_metrics.py
checks both against each release's fields (tests/data/compilation-metrics), and that every field said to be read is
named by the code that reads it.

The record reaches the bridge as a dict (``CompileRecord.metrics``), live through torch's ``log_compilation_event``
and on replay from the ``compilation_metrics`` lines of a ``TORCH_TRACE`` log: the same fields either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["READ", "compile_on_one_rank", "kernel_sources", "user_contexts"]

# field -> what the bridge makes of it
READ: dict[str, str] = {
    "compile_id": "the record's compile, on replay (the record's own ids lead)",
    "co_name": "the compiled frame: code.function.name",
    "co_filename": "the compiled frame: code.file.path",
    "co_firstlineno": "the compiled frame: code.line.number",
    "cache_size": "torch.compile.cache_size; the recompile limit's count",
    "accumulated_cache_size": "torch.compile.accumulated_cache_size",
    "guard_count": "torch.compile.guard_count; the guards histogram",
    "shape_env_guard_count": "torch.compile.shape_env_guard_count",
    "graph_op_count": "torch.compile.graph.op_count; whether a compile made a graph (rank divergence)",
    "graph_node_count": "torch.compile.graph.node_count",
    "graph_input_count": "torch.compile.graph.input_count",
    "start_time": "the compile's start, where no event has it",
    "start_time_us": "the compile's start, where no event has it",
    "duration_us": "the compile's time: torch.compile.duration_s, the metrics and the summary",
    "entire_frame_compile_time_s": "torch.compile.entire_frame_compile_time_s; the compile's time, where duration_us lacks",
    "backend_compile_time_s": "torch.compile.backend_compile_time_s",
    "inductor_compile_time_s": "torch.compile.inductor_compile_time_s",
    "code_gen_time_s": "torch.compile.code_gen_time_s",
    "dynamo_time_before_restart_s": "torch.compile.dynamo_time_before_restart_s",
    "structured_logging_overhead_s": "torch.compile.structured_logging_overhead_s",
    "fail_type": "error.type and the status of a failed compile",
    "fail_reason": "the exception event's message",
    "fail_user_frame_filename": "torch.compile.fail.file.path; where a frame left in eager broke",
    "fail_user_frame_lineno": "torch.compile.fail.line.number",
    "restart_reasons": "torch.compile.restart_count and restart events",
    "has_guarded_code": "torch.compile.has_guarded_code; a frame left in eager",
    "recompile_reason": "torch.compile.recompile_reason, its category, the summary's recompiles",
    "recompile_user_contexts": "torch.compile.recompile_user_contexts; the summary's recompiles",
    "num_graph_breaks": "torch.compile.process.graph_breaks_so_far",
    "remote_cache_time_saved_s": "torch.compile.cache.time_saved_s; the summary's saved by hits; a metric",
    "inductor_fx_local_cache_hit_count": "torch.compile.cache.fx_graph.local.hits; torch_compile_cache_requests_total",
    "inductor_fx_local_cache_miss_count": "torch.compile.cache.fx_graph.local.misses; the same",
    "inductor_fx_remote_cache_hit_count": "torch.compile.cache.fx_graph.remote.hits; the same",
    "inductor_fx_remote_cache_miss_count": "torch.compile.cache.fx_graph.remote.misses; the same",
    "aotautograd_local_cache_hit_count": "torch.compile.cache.aot_autograd.local.hits; the same",
    "aotautograd_local_cache_miss_count": "torch.compile.cache.aot_autograd.local.misses; the same",
    "aotautograd_remote_cache_hit_count": "torch.compile.cache.aot_autograd.remote.hits; the same",
    "aotautograd_remote_cache_miss_count": "torch.compile.cache.aot_autograd.remote.misses; the same",
    "dynamo_config": "automatic dynamic shapes on or off, for the recompile hints",
    "compiler_config": "torch.compile.compile_on_one_rank (torch 2.14's torch.compiler.config.compile_on_one_rank)",
    "functorch_config": "a hash of it, kept with AOTAutograd keys: whether it changed, for a miss whose FX graphs hit",
    "is_forward": "a lazy backward's record from its forward's",
    "is_runtime": "a runtime record (cudagraph set-up, autotuning), not a compile",
    "cudagraph_skip_reason": "torch.compile.cudagraph_skip_reason",
    "triton_kernel_compile_times_us": "torch.compile.triton.kernels_listed and kernel_build_s",
    "inductor_provenance": "torch.compile.inductor.kernel_sources: each kernel's user line (no source text)",
    "param_count": "torch.compile.param_count",
    "param_numel": "torch.compile.param_numel",
    "param_bytes": "torch.compile.param_bytes",
    "guard_latency_us": "torch.compile.guard_latency_us",
    "ir_count": "torch.compile.ir_count",
    "pytorch_version": "the compile's torch release: cache keys compared across releases, replay's torch.version",
}

MAX_CONTEXTS = 16  # user contexts kept per compile
MAX_KERNELS = 64  # kernels whose source line is kept per compile


def compile_on_one_rank(metrics: Mapping[str, Any] | None) -> bool:
    """Whether the compile ran with ``torch.compiler.config.compile_on_one_rank`` (torch 2.14 and later), as its
    ``compiler_config`` says: its graphs hold no device or process group of their own rank."""
    text = (metrics or {}).get("compiler_config")
    return isinstance(text, str) and '"compile_on_one_rank": true' in text


def user_contexts(metrics: Mapping[str, Any] | None) -> list[str]:
    """What the user's hooks said at the compile (``torch._dynamo.utils.register_hook_for_recompile_user_context``:
    the training step, the data shard...), torch's ``recompile_user_contexts``; sorted, at most 16."""
    v = (metrics or {}).get("recompile_user_contexts")
    if not isinstance(v, (list, set, tuple)):
        return []
    return sorted(str(x)[:256] for x in v if isinstance(x, str) and x)[:MAX_CONTEXTS]


def kernel_sources(metrics: Mapping[str, Any] | None) -> list[tuple[str, str, int | None, str | None]]:
    """Each kernel inductor generated, with the user's line its code came from: ``(kernel, file, line, function)``,
    from torch's ``inductor_provenance`` (recorded with ``torch._inductor.config.trace.provenance_tracking_level``).
    The innermost frame of each kernel's stack; never the source text torch also keeps."""
    v = (metrics or {}).get("inductor_provenance")
    out: list[tuple[str, str, int | None, str | None]] = []
    for text in sorted(v) if isinstance(v, (list, set, tuple)) else []:
        try:
            mapping = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            continue
        if not isinstance(mapping, dict):
            continue
        for kernel, stacks in mapping.items():
            where = _innermost(stacks)
            if where is not None and len(out) < MAX_KERNELS:
                out.append((str(kernel), *where))
    return out


def _innermost(stacks: Any) -> tuple[str, int | None, str | None] | None:
    """The last ``File "...", line N, in fn`` of a kernel's stacks."""
    found = None
    for stack in stacks if isinstance(stacks, list) else []:
        for line in str(stack).splitlines():
            line = line.strip()
            if not line.startswith('File "'):
                continue
            path, _, rest = line[len('File "') :].partition('"')
            parts = [p.strip() for p in rest.split(",")]
            num = next((p[len("line ") :] for p in parts if p.startswith("line ")), None)
            fn = next((p[len("in ") :] for p in parts if p.startswith("in ")), None)
            found = (path, int(num) if num and num.isdigit() else None, fn)
    return found
