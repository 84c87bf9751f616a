"""The span model's names, declared once: what the span mapper writes and what :func:`record_of_spans` reads back.

:class:`torch_otel._sinks.spans.SpanMapper` writes a compile's trace with these names, and ``torch-otel diff`` rebuilds
a compile record from a traces file (OTLP-JSON) with the same ones, to sum it with the same run
summary. The names of the record's own facts are here; a kind added to them declares its own beside it, with its
writer and its reader (torch_otel._features: ``SpanView``). docs/span-model.md is the contract users read;
tests/fast/test_span_model.py checks that every name is in it, and that records written as spans and read back sum to
the summary of the records themselves: a name changed on one side only fails there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.compile_id import parse_compile_id
from .._core.paths import in_installed_package
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._model.events import GraphBreakEvent
from .._model.record import CodeLocation, CompileRecord, PhaseNode

__all__ = [
    "METRIC_ATTRIBUTES",
    "Events",
    "Root",
    "late_span_names",
    "otlp_attributes",
    "own_root_readers",
    "read_late_span",
    "record_of_spans",
]

# CompilationMetrics fields copied as numeric attributes of the root span (field -> attribute), and read back.
METRIC_ATTRIBUTES = {
    "guard_count": "torch.compile.guard_count",
    "shape_env_guard_count": "torch.compile.shape_env_guard_count",
    "graph_op_count": "torch.compile.graph.op_count",
    "graph_node_count": "torch.compile.graph.node_count",
    "graph_input_count": "torch.compile.graph.input_count",
    "cache_size": "torch.compile.cache_size",
    "accumulated_cache_size": "torch.compile.accumulated_cache_size",
    # torch's process-wide running total (counters["graph_break"]), not this compile's: named so (graph_break_count is)
    "num_graph_breaks": "torch.compile.process.graph_breaks_so_far",
    "entire_frame_compile_time_s": "torch.compile.entire_frame_compile_time_s",
    "backend_compile_time_s": "torch.compile.backend_compile_time_s",
    "inductor_compile_time_s": "torch.compile.inductor_compile_time_s",
    "code_gen_time_s": "torch.compile.code_gen_time_s",
    "dynamo_time_before_restart_s": "torch.compile.dynamo_time_before_restart_s",
    # torch fills it from every FX graph cache hit, local ones too, despite its name
    "remote_cache_time_saved_s": "torch.compile.cache.time_saved_s",
    "structured_logging_overhead_s": "torch.compile.structured_logging_overhead_s",
    "inductor_fx_local_cache_hit_count": "torch.compile.cache.fx_graph.local.hits",
    "inductor_fx_local_cache_miss_count": "torch.compile.cache.fx_graph.local.misses",
    "inductor_fx_remote_cache_hit_count": "torch.compile.cache.fx_graph.remote.hits",
    "inductor_fx_remote_cache_miss_count": "torch.compile.cache.fx_graph.remote.misses",
    "aotautograd_local_cache_hit_count": "torch.compile.cache.aot_autograd.local.hits",
    "aotautograd_local_cache_miss_count": "torch.compile.cache.aot_autograd.local.misses",
    "aotautograd_remote_cache_hit_count": "torch.compile.cache.aot_autograd.remote.hits",
    "aotautograd_remote_cache_miss_count": "torch.compile.cache.aot_autograd.remote.misses",
    "param_count": "torch.compile.param_count",
    "param_numel": "torch.compile.param_numel",
    "param_bytes": "torch.compile.param_bytes",
    "guard_latency_us": "torch.compile.guard_latency_us",
    "ir_count": "torch.compile.ir_count",
}
_METRIC_FIELDS = {attr: name for name, attr in METRIC_ATTRIBUTES.items()}
PHASE_PREFIX = "torch.compile."  # a phase span's attributes: its torch args under this prefix


class Root:
    """The root span's attributes that a compile record is rebuilt from (docs/span-model.md)."""

    KIND = "torch.compile.kind"
    ID = "torch.compile.id"
    ATTEMPT = "torch.compile.attempt"
    DURATION = "torch.compile.duration_s"
    RANK = "torch.distributed.rank"  # also a replayed span's resource's
    # the compiled frame as the user wrote it (CompileRecord.code: docs/span-model.md, "Which frame")
    CODE_FUNCTION = "code.function.name"
    CODE_FILE = "code.file.path"
    CODE_LINE = "code.line.number"
    # torch's code object, where it is not that (a module compiled through torch's wrapper, a method named by its
    # class): ``<TORCH_CODE>.function.name`` (co_name), ``.file.path`` (co_filename), ``.line.number`` (co_firstlineno)
    TORCH_CODE = "torch.compile.code"
    TORCH_CODE_FUNCTION = "torch.compile.code.function.name"
    TORCH_CODE_FILE = "torch.compile.code.file.path"
    TORCH_CODE_LINE = "torch.compile.code.line.number"
    FRAME_CLASS = "torch.compile.frame.class"  # the class that names the frame, dotted (torch.nn.modules.container.Sequential)
    # the user's line that called the compiled code (CompileRecord.call_site; else the frame below the compiled one)
    CALLER_FUNCTION = "torch.compile.caller.function.name"
    CALLER_FILE = "torch.compile.caller.file.path"
    CALLER_LINE = "torch.compile.caller.line.number"
    RECOMPILE_REASON = "torch.compile.recompile_reason"
    RECOMPILE_REASONS = "torch.compile.recompile_reasons"
    RECOMPILE_LIMIT = "torch.compile.recompile_limit"
    RECOMPILE_LIMIT_EXCEEDED = "torch.compile.recompile_limit_exceeded"
    HAS_GUARDED_CODE = "torch.compile.has_guarded_code"
    EAGER_FALLBACK = "torch.compile.eager_fallback"
    ERROR_TYPE = "error.type"
    TORCH_VERSION = "torch.version"  # of the resource
    INCOMPLETE = "Incomplete"  # the error.type of a compile that did not finish
    # torch 2.14's torch.compiler.config.compile_on_one_rank was on: the graph is the same on every rank
    COMPILE_ON_ONE_RANK = "torch.compile.compile_on_one_rank"
    USER_CONTEXTS = "torch.compile.recompile_user_contexts"  # what the user's recompile hooks said
    KERNEL_SOURCES = "torch.compile.inductor.kernel_sources"  # each kernel's user line (inductor's provenance)


class Events:
    """The root span's events that a compile record is rebuilt from, and their attributes."""

    EXCEPTION = "exception"
    EXCEPTION_MESSAGE = "exception.message"
    GRAPH_BREAK = "torch.compile.graph_break"
    UNHANDLED_GRAPH_BREAK = "torch.compile.unhandled_graph_break"  # torch could not handle it: the compile's failure
    GRAPH_BREAK_REASON = "torch.compile.graph_break.reason"
    GRAPH_BREAK_TYPE = "torch.compile.graph_break.type"
    GRAPH_BREAK_CODE = "torch.compile.graph_break.code"
    # torch could not resume after it: the rest of the function ran in eager (not in torch's counters["graph_break"])
    GRAPH_BREAK_ENDS_FRAME = "torch.compile.graph_break.ends_frame"
    RECOMPILE_LIMIT_NEAR = "torch.compile.recompile_limit_near"


# -- reading a traces file back --------------------------------------------------------------------------------------


def _value(v: Mapping[str, Any]) -> Any:
    if "arrayValue" in v:
        return [_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return None
    return next(iter(v.values())) if v else None


def otlp_attributes(items: Any) -> dict[str, Any]:
    """OTLP-JSON's ``[{"key": ..., "value": {"stringValue": ...}}]`` as a plain dict."""
    out: dict[str, Any] = {}
    for kv in items or []:
        if isinstance(kv, Mapping) and isinstance(kv.get("key"), str) and isinstance(kv.get("value"), Mapping):
            out[kv["key"]] = _value(kv["value"])
    return out


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def record_of_spans(
    root: Mapping[str, Any],
    descendants: list[Mapping[str, Any]],
    resource: Mapping[str, Any],
    features: tuple[Feature, ...] | None = None,
) -> CompileRecord | None:
    """A compile record rebuilt from its root span and phase spans (OTLP-JSON, with ``_attrs``: their attributes as a
    dict), for the run summary; None for a span that is no compile's root. An added feature's events are read back by
    its own view (torch_otel._features)."""
    readers = [k.spans.read for k in features_or_default(features) if k.spans is not None and k.spans.read is not None]
    late_names = late_span_names(features)
    late = [s for s in descendants if s.get("name") in late_names and str(s.get("parentSpanId")) == str(root.get("spanId"))]
    if late:
        descendants = [s for s in descendants if not any(s is x for x in late)]
    a = root["_attrs"]
    kind = a.get(Root.KIND)
    if not isinstance(kind, str):
        return None
    cid = parse_compile_id(a.get(Root.ID))
    start, end = int(root.get("startTimeUnixNano") or 0), int(root.get("endTimeUnixNano") or 0)
    nodes: dict[str, PhaseNode] = {}
    top = PhaseNode(str(root.get("name")), start, end)
    nodes[str(root.get("spanId"))] = top
    pending = sorted(descendants, key=lambda s: int(s.get("startTimeUnixNano") or 0))
    placed = True
    while pending and placed:  # parents before children, whatever order the file holds them in
        placed = False
        rest = []
        for s in pending:
            parent = nodes.get(str(s.get("parentSpanId")))
            if parent is None:
                rest.append(s)
                continue
            sa = s["_attrs"]
            args = {k.removeprefix(PHASE_PREFIX): v for k, v in sa.items() if k.startswith(PHASE_PREFIX)}
            node = PhaseNode(
                str(s.get("name")), int(s.get("startTimeUnixNano") or 0), int(s.get("endTimeUnixNano") or 0), args=args
            )
            parent.children.append(node)
            nodes[str(s.get("spanId"))] = node
            placed = True
        pending = rest
    metrics: dict[str, Any] = {}
    for attr, name in _METRIC_FIELDS.items():
        if attr in a:
            metrics[name] = a[attr]
    duration = a.get(Root.DURATION)
    if isinstance(duration, (int, float)) and kind in ("frame", "backward"):
        metrics["duration_us"] = float(duration) * 1e6
    if isinstance(a.get(Root.RECOMPILE_REASON), str):
        metrics["recompile_reason"] = a[Root.RECOMPILE_REASON]
    if isinstance(a.get(Root.HAS_GUARDED_CODE), bool):
        metrics["has_guarded_code"] = a[Root.HAS_GUARDED_CODE]
    if a.get(Root.COMPILE_ON_ONE_RANK) is True:  # as torch's compiler_config says it (compilation_metrics.py)
        metrics["compiler_config"] = '{"compile_on_one_rank": true}'
    contexts = a.get(Root.USER_CONTEXTS)
    if isinstance(contexts, list):
        metrics["recompile_user_contexts"] = [str(c) for c in contexts]
    error = a.get(Root.ERROR_TYPE)
    events = root.get("events") or []
    if isinstance(error, str) and error != Root.INCOMPLETE:
        metrics["fail_type"] = error
        exc = next((e for e in events if e.get("name") == Events.EXCEPTION), None)
        message = otlp_attributes(exc.get("attributes")).get(Events.EXCEPTION_MESSAGE) if exc else None
        metrics["fail_reason"] = message if isinstance(message, str) else error
        if a.get(Root.RECOMPILE_LIMIT_EXCEEDED):
            metrics["fail_reason"] = f"recompile limit exceeded: {metrics['fail_reason']}"
    rec = CompileRecord(kind, cid, top, attempt=_int(a.get(Root.ATTEMPT)) or 0, rank=_int(a.get(Root.RANK)))
    if rec.rank is None:
        rec.rank = _int(resource.get(Root.RANK))
    rec.metrics = metrics
    if error == Root.INCOMPLETE:
        rec.incomplete = str((root.get("status") or {}).get("message") or "incomplete")
    reasons = a.get(Root.RECOMPILE_REASONS)
    if isinstance(reasons, list):
        rec.recompile_reasons = [str(r) for r in reasons]
    rec.code = CodeLocation(_str(a.get(Root.CODE_FUNCTION)), _str(a.get(Root.CODE_FILE)), _int(a.get(Root.CODE_LINE)))
    if Root.TORCH_CODE_FUNCTION in a:
        rec.torch_code = CodeLocation(
            _str(a.get(Root.TORCH_CODE_FUNCTION)), _str(a.get(Root.TORCH_CODE_FILE)), _int(a.get(Root.TORCH_CODE_LINE))
        )
    rec.frame_class = _str(a.get(Root.FRAME_CLASS))
    caller_file = _str(a.get(Root.CALLER_FILE))
    if caller_file and not in_installed_package(caller_file):
        rec.call_site = CodeLocation(_str(a.get(Root.CALLER_FUNCTION)), caller_file, _int(a.get(Root.CALLER_LINE)))
    rec.torch_version = _str(resource.get(Root.TORCH_VERSION))
    rec.frame_recompiles = _int(a.get(METRIC_ATTRIBUTES["cache_size"]))
    rec.recompile_limit = _int(a.get(Root.RECOMPILE_LIMIT))
    for e in events:
        name, ea = e.get("name"), otlp_attributes(e.get("attributes"))
        if name in (Events.GRAPH_BREAK, Events.UNHANDLED_GRAPH_BREAK):
            code = ea.get(Events.GRAPH_BREAK_CODE)
            reason = str(ea.get(Events.GRAPH_BREAK_REASON) or "")
            if isinstance(code, str) and code.startswith("GB") and code[2:].isdigit():
                reason += f"\n(https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{code[2:]}.html)"  # its code
            rec.graph_breaks.append(
                GraphBreakEvent(
                    cid,
                    reason,
                    _str(ea.get(Events.GRAPH_BREAK_TYPE)),
                    _str(ea.get(Root.CODE_FILE)),
                    _int(ea.get(Root.CODE_LINE)),
                    skipped_frame=name == Events.UNHANDLED_GRAPH_BREAK or bool(ea.get(Root.EAGER_FALLBACK)),
                    ends_frame=bool(ea.get(Events.GRAPH_BREAK_ENDS_FRAME)),
                )
            )
        elif name == Events.RECOMPILE_LIMIT_NEAR:
            rec.recompile_limit = _int(ea.get(Root.RECOMPILE_LIMIT)) or rec.recompile_limit
            rec.recompile_limit_near = True
        elif isinstance(name, str):
            any(read(name, ea, rec) for read in readers)
    for k in features_or_default(features):
        if k.spans is not None and k.spans.await_late is not None:
            k.spans.await_late(rec)
    for s in late:
        read_late_span(s, rec, features)
    return rec


def late_span_names(features: tuple[Feature, ...] | None = None) -> frozenset[str]:
    """The spans features write after their compile's trace, as children of its root (a compiled graph's calls, at exit)."""
    return frozenset(n for k in features_or_default(features) if k.spans is not None for n in k.spans.late_spans)


def own_root_readers(features: tuple[Feature, ...] | None = None) -> dict[str, tuple[Feature, Any]]:
    """The roots of the traces features write of their own (a process's start-up), by name: the feature, its reader."""
    return {
        name: (f, f.spans.read_own)
        for f in features_or_default(features)
        if f.spans is not None and f.spans.read_own is not None and f.summary is not None
        for name in f.spans.own_roots
    }


def read_late_span(span: Mapping[str, Any], rec: CompileRecord, features: tuple[Feature, ...] | None = None) -> None:
    """A late span (OTLP-JSON, with ``_attrs``) back into its compile's record, by the kind that wrote it."""
    name = span.get("name")
    for k in features_or_default(features):
        if k.spans is not None and k.spans.read_late is not None and name in k.spans.late_spans:
            start, end = int(span.get("startTimeUnixNano") or 0), int(span.get("endTimeUnixNano") or 0)
            k.spans.read_late(str(name), span.get("_attrs") or {}, start, end, rec)
