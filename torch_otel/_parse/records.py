"""Structured-trace records -> typed events: one handler per record type, one table.

Used by full live capture (torch's records, from ``trace_structured``) and by replay of
``TORCH_TRACE`` logs, so both produce the very same events. Unknown record types are
counted by the caller, never fatal. The features' rows (instants and artifacts of their own,
torch_otel._features) join the tables below as the features' registry stands.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .._core.compile_id import CompileId, compile_id_from_metadata, parse_compile_id
from .._core.graph_breaks import parse_graph_break
from .._features import registry
from .._features.feature import InstantHandler
from .._model.events import (
    ArtifactEvent,
    Event,
    FrameObjectsEvent,
    GraphBreakEvent,
    GraphScheduleEvent,
    MetricsEvent,
    PhaseEvent,
    RecompileReasonsEvent,
    StartEvent,
)

_CA_PREFIX = re.compile(r"^!\d+: ")

# (metadata value, whole metadata, payload, compile id, attempt, rank) -> events
Handler = Callable[[Any, dict[str, Any], str | None, CompileId | None, int, int | None], list[Event]]


class RecordError(ValueError):
    """A record whose shape this parser cannot use (counted as a skipped line)."""


def _chromium(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    if not payload:
        raise RecordError("chromium_event without payload")
    try:
        ev = json.loads(payload)
    except ValueError as exc:
        raise RecordError(f"chromium_event payload is not JSON: {exc}") from None
    return chromium_record_events(ev, cid, attempt, rank)


def chromium_record_events(ev: Any, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    """A chromium event's record (its dict, and the record's ids) -> its events: an instant that is a feature's, or a
    phase event. Replay reads the dict from the record's JSON payload; full live capture is handed torch's dict."""
    phase = chromium_to_event(ev, attempt, rank, record_id=cid)
    if phase.ph == "i":
        found = instant_events(phase.name, phase.ts_ns, phase.args, phase.compile_id, attempt, rank)
        if found is not None:
            return found
    return [phase]


def instant_events(
    name: str, ts_ns: int | None, args: Any, cid: CompileId | None, attempt: int = 0, rank: int | None = None
) -> list[Event] | None:
    """The events of one of torch's instant events that is a feature's (by name prefix: each feature's
    ``parse.instants``, torch_otel._features), or None when no feature has a row for it."""
    for prefix, handler in _tables()[1]:
        if name.startswith(prefix):
            return handler(name, ts_ns, args, cid, attempt, rank)
    return None


PHASE_TYPES = ("B", "E", "i", "X")  # a tuple: an unhashable ph is refused, not raised on


def chromium_to_event(ev: Any, attempt: int = 0, rank: int | None = None, record_id: CompileId | None = None) -> PhaseEvent:
    """A chromium event dict (as torch builds it) -> :class:`PhaseEvent`.

    ``record_id`` is the compile id of the trace record that carried the event (its ``frame_id``,
    ``frame_compile_id``, ``compiled_autograd_id``). It decides, as tlparse keys records: the event's own
    ``args.compile_id`` is only the fallback for records without ids (live hooks, and phases torch logs
    outside a compile context, such as inductor's compile workers).
    """
    if type(ev) is not dict and not isinstance(ev, dict):
        raise RecordError("chromium event is not an object")
    get = ev.get
    name, ph, ts = get("name"), get("ph"), get("ts")
    if not isinstance(name, str) or ph not in PHASE_TYPES or not isinstance(ts, (int, float)):
        raise RecordError("chromium event lacks name/ph/ts")
    args = get("args")
    if type(args) is not dict and not isinstance(args, dict):
        args = {}
    return PhaseEvent(record_id or parse_compile_id(args.get("compile_id")), name, ph, int(ts * 1000), args, attempt, rank)


def metrics_to_event(fields: dict[str, Any], rank: int | None = None, record_id: CompileId | None = None) -> MetricsEvent:
    """A CompilationMetrics dict -> :class:`MetricsEvent`; the record's ids decide over the payload's ``compile_id``."""
    cid = record_id or parse_compile_id(fields.get("compile_id"))
    return MetricsEvent(
        cid,
        fields,
        is_forward=fields.get("is_forward") is not False,
        is_runtime=fields.get("is_runtime") is True,
        rank=rank,
    )


def _metrics(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    if not isinstance(value, dict):
        raise RecordError("compilation_metrics is not an object")
    ev = metrics_to_event(value, rank, cid)
    ev.attempt = attempt
    stack = md.get("stack")
    if isinstance(stack, list):
        ev.stack_functions = tuple(f["name"] for f in stack if isinstance(f, dict) and isinstance(f.get("name"), str))
    return [ev]


def _digest(md: dict[str, Any], payload: str | None) -> str | None:
    h = md.get("has_payload")
    if isinstance(h, str):
        return h
    if payload is not None:
        return hashlib.md5(payload.encode("utf-8", "replace"), usedforsecurity=False).hexdigest()
    return None


def _recompile_reasons(payload: str | None, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    # torch writes a list as JSON, but a single reason as its bare text (trace_structured leaves strings as they are)
    try:
        reasons = json.loads(payload or "null")
    except ValueError:
        reasons = payload
    reasons = [reasons] if isinstance(reasons, str) else reasons
    if not isinstance(reasons, list):
        raise RecordError("recompile_reasons payload is not a list")
    return [RecompileReasonsEvent(cid, [str(r) for r in reasons], attempt, rank)]


def _compiled_autograd_reasons(payload: str | None, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    # TORCH_LOGS=compiled_autograd_verbose: "!1: Cache miss due to ..."
    reasons = _json_payload(payload)
    if not isinstance(reasons, list):
        raise RecordError("compiled_autograd_compile_reasons payload is not a list")
    return [RecompileReasonsEvent(cid, [_CA_PREFIX.sub("", str(r)) for r in reasons], attempt, rank)]


def _collective_schedule(payload: str | None, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    ops = _json_payload(payload)
    if not isinstance(ops, list):
        raise RecordError("inductor_collective_schedule payload is not a list")
    return [GraphScheduleEvent(cid, [str(op) for op in ops], None, attempt, rank)]


def _tensor_meta(payload: str | None, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    meta = _json_payload(payload)
    if not isinstance(meta, dict) or not isinstance(meta.get("ops"), list):
        raise RecordError("inductor_runtime_and_tensor_meta payload has no list of ops")
    return [GraphScheduleEvent(cid, [], tensor_meta_digest(meta["ops"]), attempt, rank)]


def _graph_break_reason(payload: str | None, cid: CompileId | None, attempt: int, rank: int | None) -> list[Event]:
    gb = parse_graph_break(payload or "")
    return [
        GraphBreakEvent(
            cid, gb.reason, gb.gb_type, gb.filename, gb.lineno, gb.skipped_frame, attempt, rank, ends_frame=gb.ends_frame
        )
    ]


# (payload, compile id, attempt, rank) -> events
ArtifactHandler = Callable[[str | None, CompileId | None, int, int | None], list[Event]]

# The artifacts the mapping reads, one row each, as tlparse lists its parsers: replay keeps their payloads (they
# are small) and the handler turns each into its events. A row without a handler is an ArtifactEvent whose payload
# a reader uses (replay: the writer's torch version). Every other artifact is an ArtifactEvent, its payload only
# measured and hashed. The features' rows join these (:func:`artifacts`).
ARTIFACTS: dict[str, ArtifactHandler | None] = {
    "recompile_reasons": _recompile_reasons,
    "compiled_autograd_compile_reasons": _compiled_autograd_reasons,
    "inductor_collective_schedule": _collective_schedule,
    "inductor_runtime_and_tensor_meta": _tensor_meta,
    "dynamo_graph_break_reason": _graph_break_reason,
    "torch_version": None,
}

# The tables with the features' rows in, made once for each registry's table (a test adds a feature through its row)
_made: tuple[Any, dict[str, ArtifactHandler | None], tuple[tuple[str, InstantHandler], ...]] | None = None


def _tables() -> tuple[dict[str, ArtifactHandler | None], tuple[tuple[str, InstantHandler], ...]]:
    global _made
    made, features = _made, registry.features()
    if made is None or made[0] is not features:
        made = _made = (features, {**ARTIFACTS, **registry.parse_artifacts(features)}, registry.parse_instants(features))
    return made[1], made[2]


def artifacts() -> dict[str, ArtifactHandler | None]:
    """Every artifact whose payload is kept, with its handler: :data:`ARTIFACTS` and each feature's."""
    return _tables()[0]


def _artifact(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise RecordError("artifact without a name")
    name = value["name"]
    handler = _tables()[0].get(name)
    if handler is not None:
        return handler(payload, cid, attempt, rank)
    return [
        ArtifactEvent(
            cid,
            "artifact",
            name,
            len(payload or ""),
            _digest(md, payload),
            payload,
            {"encoding": value.get("encoding")} if isinstance(value.get("encoding"), str) else {},
            attempt,
            rank,
        )
    ]


def _json_payload(payload: str | None) -> Any:
    try:
        return json.loads(payload or "null")
    except ValueError:
        raise RecordError("artifact payload is not JSON") from None


def tensor_meta_digest(ops: list[Any]) -> str:
    """A short stable digest of a graph's per-op output shapes, strides and dtypes (runtime estimates left out)."""
    outs = [op.get("outputs") if isinstance(op, dict) else None for op in ops]
    text = json.dumps(outs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _dynamo_start(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    stack = value.get("stack") if isinstance(value, dict) else None
    return [StartEvent(cid, stack if isinstance(stack, list) else [], attempt, rank)]


def _generic(record_type: str) -> Handler:
    """The trivial record types: graphs, guards, tensor descriptions -> named artifacts."""

    def handler(
        value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
    ) -> list[Event]:
        attrs: dict[str, Any] = {}
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, (int, float, bool)):
                    attrs[k] = v
        given = value.get("name") if isinstance(value, dict) else None
        name = given if isinstance(given, str) else record_type
        return [ArtifactEvent(cid, record_type, name, len(payload or ""), _digest(md, payload), payload, attrs, attempt, rank)]

    return handler


def _ignore(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    return []


# The guards torch logs on the compiled frame's objects that name it, with the class it printed for each (2.13:
# "| +- GuardManager: source=L['fn'], accessed_by=FrameLocalsGuardAccessor(key='fn', ...), type=<class
# 'torch.nn.modules.container.Sequential'>, tag_safe=..."): its ``self``, torch's wrapper's ``fn``, a bound
# method's ``fn.__self__`` and a wrapper's first positional ``args[0]``. The replay reader keeps only the lines that
# hold one of these marks (:data:`FRAME_OBJECT_MARKS`), never the rest of the guards' text.
FRAME_OBJECT_MARKS = (b"source=L['self'], ", b"source=L['fn'], ", b"source=L['fn'].__self__, ", b"source=L['args'][0], ")
FRAME_OBJECT_LINES = "_torch_otel_frame_object_lines"  # where the reader puts those lines, in the record's metadata
_OBJECT_GUARD = re.compile(r"source=L\['(self|fn|args)'\](\.__self__|\[0\])?, .*?\btype=<class '([^']+)'>")


def guard_classes(lines: Iterable[str]) -> dict[str, str]:
    """The classes torch's guards name for the frame's ``self``, ``fn``, ``fn.__self__`` and ``args[0]`` (the first of
    each)."""
    out: dict[str, str] = {}
    for line in lines:
        m = _OBJECT_GUARD.search(line)
        if m:
            out.setdefault(m.group(1) + (m.group(2) or ""), m.group(3))
    return out


_guards_artifact = _generic("dynamo_cpp_guards_str")


def _guards(
    value: Any, md: dict[str, Any], payload: str | None, cid: CompileId | None, attempt: int, rank: int | None
) -> list[Event]:
    """``dynamo_cpp_guards_str``: its artifact, and the classes of the frame's objects its guards name."""
    events = _guards_artifact(value, md, payload, cid, attempt, rank)
    lines = md.get(FRAME_OBJECT_LINES)
    classes = guard_classes(lines if isinstance(lines, list) else (payload or "").splitlines())
    if classes:
        events.append(FrameObjectsEvent(cid, classes, attempt, rank))
    return events


GENERIC_RECORDS = (
    "dynamo_output_graph",
    "optimize_ddp_split_graph",
    "optimize_ddp_split_child",
    "compiled_autograd_graph",
    "aot_forward_graph",
    "aot_backward_graph",
    "aot_inference_graph",
    "aot_joint_graph",
    "inductor_pre_grad_graph",
    "inductor_post_grad_graph",
    "inductor_output_code",
    "dynamo_guards",
    "dynamo_cpp_guards_str",
    "graph_dump",
    "symbolic_shape_specialization",
    "guard_added_fast",
    "guard_added",
    "create_symbol",
    "unbacked_symbol",
    "propagate_real_tensors",
    "expression_created",
    "missing_fake_kernel",
    "mismatched_fake_kernel",
    "exported_program",
    "create_unbacked_symbol",
    "propagate_real_tensors_provenance",
    "link",
    "describe_tensor",
    "describe_storage",
    "describe_source",
    "symbolic_shape_guard",
    "dump_file",
    "fx_graph_cache_hit",
    "fx_graph_cache_miss",
    "fx_graph_cache_bypass",
    "aotautograd_cache_hit",
    "aotautograd_cache_miss",
    "aotautograd_cache_bypass",
    "recompile_reasons",
)

# The single registry of record types. ``str`` records (interned file names)
# are handled by the replay reader itself, like tlparse does.
HANDLERS: dict[str, Handler] = {
    "chromium_event": _chromium,
    "compilation_metrics": _metrics,
    "bwd_compilation_metrics": _metrics,
    # a compiled graph's runtime record (cudagraph set-up, runtime autotuning at its first calls; is_runtime): what
    # log_compilation_event hands live capture at default capture. Its time is in the graph's runtime phases
    "compilation_metrics_runtime": _metrics,
    "bwd_compilation_metrics_runtime": _metrics,
    "artifact": _artifact,
    "dynamo_start": _dynamo_start,
    "str": _ignore,
    **{k: _generic(k) for k in GENERIC_RECORDS},
    "dynamo_cpp_guards_str": _guards,
}


# The record types whose metadata's ``stack`` (torch's, on a record made outside a compile) a handler reads
STACK_RECORDS = frozenset(k for k, handler in HANDLERS.items() if handler is _metrics)


def record_context(md: dict[str, Any]) -> tuple[CompileId | None, int, int | None]:
    """A record's compile id, attempt and rank, from its metadata."""
    cid, attempt = compile_id_from_metadata(md)
    rank = md.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = None
    return cid, attempt, rank


def parse_record(
    md: dict[str, Any], payload: str | None, interned: dict[int, str] | None = None, payload_size: int | None = None
) -> tuple[str, list[Event] | None]:
    """Parse one record. Returns ``(record type, events)``; ``events`` is None for an unknown record type.

    ``interned`` is the reader's table of ``str`` records (file names are
    interned to ints, as tlparse resolves them). ``payload_size`` is the size of
    a payload the reader measured but did not keep (``payload`` is then None). Raises :class:`RecordError`
    for a known record type of unusable shape.
    """
    if not md or not isinstance(md, dict):
        raise RecordError("empty metadata")
    record_type = next(iter(md))
    if record_type == "str" and interned is not None:
        v = md["str"]
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], int)):
            raise RecordError("str record is not [text, id]")
        if len(interned) < 1_000_000:
            interned[v[1]] = v[0]
        return record_type, []
    handler = HANDLERS.get(record_type)
    if handler is None:
        return record_type, None
    cid, attempt, rank = record_context(md)
    events = handler(md[record_type], md, payload, cid, attempt, rank)
    if payload is None and payload_size:
        for ev in events:
            if isinstance(ev, ArtifactEvent):
                ev.size = payload_size
    if interned is not None:
        for ev in events:
            if isinstance(ev, StartEvent):
                for frame in ev.stack:
                    if isinstance(frame, dict) and isinstance(frame.get("filename"), int):
                        frame["filename_str"] = interned.get(frame["filename"])
    return record_type, events
