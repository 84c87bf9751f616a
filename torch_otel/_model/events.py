"""Small typed events: what live capture and TORCH_TRACE replay both produce.

Every source (the live hooks, the ``torch.__trace`` handler of full capture,
the replay reader) turns torch's records into these, once; one assembler and
one span/metric mapping consume them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core.compile_id import CompileId


@dataclass(slots=True)
class Origin:
    """Where a live compile came from (not in TORCH_TRACE logs)."""

    parent_context: Any = None  # opentelemetry Context active when the compile started
    caller_file: str | None = None
    caller_line: int | None = None
    caller_function: str | None = None
    code_name: str | None = None
    code_file: str | None = None
    code_line: int | None = None
    thread: str | None = None
    stack: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, function), innermost first
    aot_graph: str | None = None  # a lazy backward's AOTAutograd graph, as torch names it ("5_backward")
    root_kind: str | None = None  # a standalone compile's kind when the live hook knows it ("precompile")
    # CPU time when the compile began, of the process and the processes working for it (torch_otel._capture.cpu), and of
    # those other processes alone
    cpu_ns: int | None = None
    child_cpu_ns: int | None = None
    # The CUDA device current on the compiling thread, when CUDA is initialised there (named on the root span)
    cuda_device: int | None = None
    # The classes of the compiled frame's objects that name it (FrameObjectsEvent's, as live capture sees them)
    classes: dict[str, str] = field(default_factory=dict)
    # A failed compile raises into the caller, nothing runs uncompiled: torch.compile(fullgraph=True) (dynamo's
    # ``_compile`` called with ``one_graph``) or torch._dynamo.error_on_graph_break(True) as it began (None: not
    # known; torch's log says neither)
    raises: bool | None = None


@dataclass(slots=True)
class PhaseEvent:
    """A chromium event: ``ph`` is ``B`` (begin), ``E`` (end) or ``i`` (instant)."""

    compile_id: CompileId | None
    name: str
    ph: str
    ts_ns: int
    args: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    rank: int | None = None
    origin: Origin | None = None
    final: bool = False  # a root's end after which torch logs nothing more of its compile (the live torch.export hook)
    thread: int | None = None  # live: the thread torch logged it on; replay: unknown (torch's log writes tid 0)
    cpu_ns: int | None = None  # live, a root's end: the CPU time then, as Origin.cpu_ns
    child_cpu_ns: int | None = None  # and of it, as Origin.child_cpu_ns


@dataclass(slots=True)
class MetricsEvent:
    """One ``CompilationMetrics`` record (``compilation_metrics`` / ``bwd_...``)."""

    compile_id: CompileId | None
    fields: dict[str, Any]
    is_forward: bool = True
    is_runtime: bool = False
    rank: int | None = None
    attempt: int = 0  # replay: the record's attempt (a restarted compile's metrics say its last)
    stack_functions: tuple[str, ...] = ()  # replay: the functions of the stack torch logged with it (says export or precompile)


@dataclass(slots=True)
class GraphBreakEvent:
    compile_id: CompileId | None
    reason: str
    gb_type: str | None = None
    filename: str | None = None
    lineno: int | None = None
    skipped_frame: bool = False
    attempt: int = 0
    rank: int | None = None
    ts_ns: int | None = None  # when torch logged it (live); None: the assembler dates it by the compile's phases
    # torch could not resume after it: it compiled up to the last point it could resume from, and the rest of the
    # function ran in eager (torch counts it in counters["unimplemented"], not counters["graph_break"])
    ends_frame: bool = False


@dataclass(slots=True)
class ArtifactEvent:
    """Full capture only: a named structured-trace record and its payload's size/hash."""

    compile_id: CompileId | None
    record_type: str  # the record's first metadata key: artifact, dynamo_output_graph, ...
    name: str
    size: int = 0
    digest: str | None = None
    payload: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    rank: int | None = None
    ts_ns: int | None = None  # as for GraphBreakEvent


@dataclass(slots=True)
class RecompileReasonsEvent:
    """Why a frame recompiled: one guard failure per cached entry that did not match (tlparse lists them all)."""

    compile_id: CompileId | None
    reasons: list[str]
    attempt: int = 0
    rank: int | None = None
    for_next: str | None = None  # logged before the compile it explains begins: the next root of this kind


@dataclass(slots=True)
class GraphScheduleEvent:
    """One inductor graph's schedule, as torch logs it for cross-rank diagnostics.

    ``collectives`` are the collective ops in the order inductor scheduled them (torch's
    ``inductor_collective_schedule``); ``tensor_meta`` is a digest of the per-op output shapes,
    strides and dtypes (``inductor_runtime_and_tensor_meta``, logged only with ``LOG_TLPARSE=1``),
    or None when the source does not have it.
    """

    compile_id: CompileId | None
    collectives: list[str]
    tensor_meta: str | None = None
    attempt: int = 0
    rank: int | None = None


@dataclass(slots=True)
class StartEvent:
    """``dynamo_start``: the user stack of the frame being compiled."""

    compile_id: CompileId | None
    stack: list[dict[str, Any]]
    attempt: int = 0
    rank: int | None = None


@dataclass(slots=True)
class FrameObjectsEvent:
    """The classes of the compiled frame's objects that name it, as dotted names (``torch.nn.modules.container.
    Sequential``; a builtin's bare, ``method``): its ``self``; torch's wrapper's ``fn`` (the module ``torch.compile``
    wrapped, or a bound method); a bound method's ``fn.__self__``. Replay reads them from the guards torch logged on
    them (``dynamo_cpp_guards_str``: ``source=L['fn'] ... type=<class '...'>``); live capture from the frame's own
    locals (its ``Origin.classes``)."""

    compile_id: CompileId | None
    classes: dict[str, str]
    attempt: int = 0
    rank: int | None = None


@dataclass(slots=True)
class LogEvent:
    """A warning or error torch logged (``torch._dynamo``/``torch._inductor``), live capture only."""

    compile_id: CompileId | None
    ts_ns: int
    level: int
    logger: str
    message: str


@dataclass(slots=True)
class DebugDirEvent:
    """Inductor made a graph's debug directory (``TORCH_COMPILE_DEBUG=1`` / ``config.trace.enabled``), live only."""

    compile_id: CompileId | None
    path: str


class Event(Protocol):
    """What every event has: the compile it belongs to (None: torch logged it outside any compile).

    The event types above are the record's own kinds; a kind added to them (torch_otel._features) has its event type
    in its own module.
    """

    compile_id: CompileId | None


def torch_version_of(payload: str | None) -> str | None:
    """The torch release a ``torch_version`` artifact names (its writer's), or None."""
    try:
        v = json.loads(payload or "null")
    except ValueError:
        return None
    version = v.get("pytorch_version") if isinstance(v, dict) else None
    return version if isinstance(version, str) and version else None
