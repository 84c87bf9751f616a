"""The compile record: what the assembler hands every sink, and the sink's interface.

A compile is a root chromium event (``dynamo`` for a frame compile, ``entire_backward_compile`` for a lazily
compiled backward, ``compiled_autograd`` for a compiled-autograd graph, and the standalone compiles) with the
phases nested inside it (:class:`PhaseNode`), its ``CompilationMetrics`` record, graph breaks and artifacts.

Every fact a sink needs that is not in torch's own records is derived once, by the assembler's derive step,
before any sink sees the record (the derived block of :class:`CompileRecord`): the code location a compile inherits
from its frame or its forward, a lazy backward's forward, the compiled-autograd graph a frame ran under, the
mega-cache hits, each feature's facts (``derived``) and the trace identity. Events are kept as their source made
them: a derived fact goes into the record, never back into an event. Sinks read the record; none writes into it,
and their order carries no meaning.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Any, NamedTuple

from .._core.categories import LIMIT_RAISED, is_recompile_limit_hit
from .._core.compile_id import CompileId
from .._core.paths import in_installed_package
from .events import ArtifactEvent, FrameObjectsEvent, GraphBreakEvent, GraphScheduleEvent, LogEvent, Origin

__all__ = [
    "BYPASS_PHASES",
    "CACHE_METRIC_PREFIXES",
    "DURATION_KINDS",
    "ROOTS",
    "ROOT_NAMES",
    "RUNTIME",
    "STANDALONE",
    "WORKER_ARG",
    "CodeLocation",
    "CompileRecord",
    "Linked",
    "PhaseNode",
    "Sink",
    "frame_name",
    "short_class",
]

# torch's root chromium events -> the kind of compile each begins
ROOTS: dict[str, str] = {
    "dynamo": "frame",
    "entire_backward_compile": "backward",
    "compiled_autograd": "compiled_autograd",
    "export": "export",  # the live hook around torch.export (torch logs no root of its own for it)
    "fullgraph_capture": "export",  # strict export; an AOT precompile's is told apart by its stack
    "compile_fx_aot": "aot_inductor",
}
# Compiles that are not a frame's: each is its own trace, and nests no other root of its family.
STANDALONE = frozenset({"export", "precompile", "aot_inductor"})
# Not a compile: work torch times for a compiled graph after its compile ended, at its first calls (GPU: cudagraph
# set-up, runtime autotuning). Each outermost such phase is a record of this kind, under its graph's compile id.
RUNTIME = "runtime"
# The root span's name of each kind of record
ROOT_NAMES = {
    "frame": "torch.compile",
    "backward": "torch.compile.backward",
    "compiled_autograd": "torch.compiled_autograd",
    "export": "torch.export",
    "precompile": "torch.compile.aot_compile",
    "aot_inductor": "torch._inductor.aot_compile",
    "runtime": "torch.compile.runtime",
}
# cache -> the prefix of its counts in torch's CompilationMetrics; the phase that reports its bypass
CACHE_METRIC_PREFIXES = (("fx_graph", "inductor_fx"), ("aot_autograd", "aotautograd"))
# The failures torch suppresses, running the frame uncompiled (convert_frame's ``soft_fail``: ``Unsupported`` and
# ``UserError``; 2.10's ``RecompileLimitExceeded`` is an ``Unsupported``); any other raises into the caller unless
# ``torch._dynamo.config.suppress_errors`` is on (CompilationMetrics' ``config_suppress_errors``)
SOFT_FAIL_TYPES = frozenset({"Unsupported", "UserError", "RecompileLimitExceeded"})
# (cache, location, result) -> torch's CompilationMetrics field that counts it
_CACHE_COUNT_FIELDS = tuple(
    ((cache, location, result), f"{prefix}_{location}_cache_{result}_count")
    for cache, prefix in CACHE_METRIC_PREFIXES
    for location in ("local", "remote")
    for result in ("hit", "miss")
)
_CACHE_KEYS, _CACHE_COUNTED = tuple(k for k, _ in _CACHE_COUNT_FIELDS), tuple(f for _, f in _CACHE_COUNT_FIELDS)
BYPASS_PHASES = {"inductor_compile": "fx_graph", "backend_compile": "aot_autograd"}
_NAME = attrgetter("name")
# The kinds whose duration is torch's CompilationMetrics.duration_us (CompileRecord.duration_ns); the others' root
# covers more than torch's record (an export's: the whole call) or torch logs no record for them
DURATION_KINDS = frozenset({"frame", "backward"})

_TORCH_FRAME = re.compile(r"[\\/]torch[\\/](?:_dynamo|_functorch|_inductor|_compile|_utils|nn|utils|fx|autograd)[\\/]")


def _is_compile_wrapper(frame: dict[str, Any]) -> bool:
    """torch.compile's wrapper, or a module compiled in place (``Module.compile()``), whose ``_wrapped_call_impl``
    calls the compiled ``_call_impl`` (torch's log has no frame between it and the compiled frame)."""
    path, name = frame.get("filename_str"), frame.get("name")
    if not isinstance(path, str):
        return False
    return (path.endswith("eval_frame.py") and name in ("compile_wrapper", "_fn")) or (
        name == "_wrapped_call_impl" and path.replace("\\", "/").endswith("torch/nn/modules/module.py")
    )


_INSTALLED_TORCH = re.compile(r"[\\/](?:site|dist)-packages[\\/]torch[\\/]")


# The bridge's own frames on a call's path (the start-up recorder's hooks, which a log's stack holds between the user's
# call and torch's): code it made (``<torch-otel ...>``), and its package's files, installed or a checkout
_BRIDGE_FRAME = re.compile(r"^<torch-otel|[\\/]torch_otel[\\/]_features[\\/]")


def _in_torch(path: str) -> bool:
    """A frame of torch itself (one of a source checkout too, which lies in no installed package), or one the bridge
    put on the call's path: never the user's line."""
    return (
        _TORCH_FRAME.search(path) is not None
        or _INSTALLED_TORCH.search(path) is not None
        or _BRIDGE_FRAME.search(path) is not None
    )


# What torch's wrapper may hold that is no object of the user's: a function names no class (torch's code name stays)
_NOT_A_CLASS = frozenset({"function", "builtin_function_or_method", "functools.partial", "method-wrapper", "NoneType"})


def short_class(dotted: str) -> str:
    """A class's own name from its dotted name: ``torch.nn.modules.container.Sequential`` -> ``Sequential``."""
    return dotted.rsplit(".", 1)[-1]


def frame_name(code: CodeLocation, classes: dict[str, str], call_site: CodeLocation | None) -> tuple[CodeLocation, str | None]:
    """The compiled frame as the user wrote it, and the class that names it (docs/span-model.md, "Which frame").

    - torch's own code holding the callable ``torch.compile`` wrapped (``fn``: wrap_inline's ``inner``, where a
      module whose ``forward`` is torch's own is compiled): the module's class (a bound method's object's), at the
      user's line that called it, else at torch's code;
    - a method (its frame has a ``self``) in a file: ``Class.name``, the class of its object, at its own file and line;
    - a library's wrapper of a method (a decorator's ``wrapper(*args, **kwargs)`` in an installed package, as
      transformers' ``deprecate_kwarg`` wraps a model's ``forward``): ``Class.name``, the class of its first argument
      (the method's object; not a builtin value or a tensor), at the wrapper's file and line;
    - else torch's code object as it is.
    Live and replay name a frame alike: both read the classes of the same objects (the frame's locals; the guards
    torch logged on them).
    """
    if not code.function:
        return code, None
    wrapped = classes.get("fn")
    if wrapped == "method":
        wrapped = classes.get("fn.__self__")
    if wrapped and wrapped not in _NOT_A_CLASS and code.file and _in_torch(code.file):
        where = call_site if call_site is not None and call_site.file else code
        return CodeLocation(short_class(wrapped), where.file, where.line), wrapped
    own = classes.get("self")
    # (code torch generated, such as a compiled-autograd graph's ``<eval_with_key>.3``, guards no ``self``: its name stays)
    if own and own not in _NOT_A_CLASS and "." not in code.function and code.file and not code.file.startswith("<"):
        return CodeLocation(f"{short_class(own)}.{code.function}", code.file, code.line), own
    first = classes.get("args[0]")
    if first and _names_a_wrapped_method(first) and "." not in code.function and in_installed_package(code.file):
        return CodeLocation(f"{short_class(first)}.{code.function}", code.file, code.line), first
    return code, None


# What a library's ``*args`` wrapper's first argument is when it is no method's object: a value, a tensor
_NOT_AN_OBJECT = frozenset({"torch.Tensor", "torch.nn.parameter.Parameter", "torch.nn.parameter.Buffer"})


def _names_a_wrapped_method(dotted: str) -> bool:
    """Whether a library wrapper's first positional argument (``args[0]``) is the object of the method it wraps, by its
    class: a class of a module (a model), not a builtin value (``int``, ``tuple``), a tensor or a function."""
    return "." in dotted and dotted not in _NOT_AN_OBJECT and dotted not in _NOT_A_CLASS and not dotted.startswith("torch._")


def _span_ns(node: PhaseNode) -> int:
    return max(0, (node.end_ns if node.end_ns is not None else node.start_ns) - node.start_ns)


class CodeLocation(NamedTuple):
    """The compiled code: function, file and first line (each None where no record says)."""

    function: str | None = None
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Linked:
    """Another compile this one belongs with (a backward's forward, a frame's compiled-autograd graph)."""

    compile_id: str
    trace_id: int | None = None
    span_id: int | None = None
    attempt: int = 0
    code: CodeLocation = CodeLocation()
    call_site: CodeLocation | None = None  # the user's line that called it (CompileRecord.call_site)
    torch_code: CodeLocation | None = None  # torch's code object, where it differs from ``code`` (CompileRecord's)
    frame_class: str | None = None  # the class that names the frame (CompileRecord's)


# The arg on a phase that ran on one of inductor's compile workers (a kernel build on a thread of its own, logged with
# no compile id) and was given to the only compile in flight: it ran beside the phase it began in, not inside it
WORKER_ARG = "attributed"


@dataclass(slots=True, init=False)
class PhaseNode:
    name: str
    start_ns: int
    end_ns: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    children: list[PhaseNode] = field(default_factory=list)
    instants: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)

    def __init__(  # the dataclass's own, less its three calls of a default factory: one node per phase torch begins
        self, name: str, start_ns: int, end_ns: int | None = None, args: dict[str, Any] | None = None,
        children: list[PhaseNode] | None = None, instants: list[tuple[str, int, dict[str, Any]]] | None = None,
    ) -> None:  # fmt: skip
        self.name, self.start_ns, self.end_ns = name, start_ns, end_ns
        self.args = {} if args is None else args
        self.children = [] if children is None else children
        self.instants = [] if instants is None else instants

    @property
    def on_worker(self) -> bool:
        """Whether it ran on a compile worker's thread, beside its parent (see :data:`WORKER_ARG`)."""
        return WORKER_ARG in self.args

    def self_ns(self, duration_ns: int | None = None) -> int:
        """Its time not in a sub-phase of its own thread: ``duration_ns`` (else its own) less its children's on the
        same thread, never below zero. A build on a compile worker ran beside the phase it began in (whose thread
        waited or worked meanwhile) and is not subtracted: torch counts ``async_compile.wait`` whole
        (``CompilationMetrics.triton_compile_time_us``), and a replay, whose log names no thread, could not tell which
        build's end is which, so live and replay agree."""
        dur = duration_ns if duration_ns is not None else _span_ns(self)
        mine = self.on_worker
        return max(0, dur - sum(_span_ns(c) for c in self.children if c.on_worker == mine))

    def nodes(self) -> list[PhaseNode]:
        """This node and every node below it, in ``walk``'s order (without the depths)."""
        out: list[PhaseNode] = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            if node.children:  # most are leaves
                stack.extend(reversed(node.children))
        return out

    def walk(self) -> Iterable[tuple[PhaseNode, int]]:
        """Depth-first (node, depth), this node first."""
        stack: list[tuple[PhaseNode, int]] = [(self, 0)]
        while stack:
            node, depth = stack.pop()
            yield node, depth
            if node.children:  # most are leaves
                below = depth + 1
                stack.extend([(c, below) for c in reversed(node.children)])


class _Sealed(NamedTuple):
    """A finished compile's facts from torch's records, worked out once (:meth:`CompileRecord.seal`)."""

    fail_type: str | None
    fail_reason: str | None
    limit_hit: bool
    eager_fallback: bool
    cache_counts: dict[tuple[str, str, str], int]
    duration_ns: int


@dataclass(slots=True)
class CompileRecord:
    kind: str
    compile_id: CompileId | None
    root: PhaseNode
    attempt: int = 0
    rank: int | None = None
    origin: Origin | None = None
    metrics: dict[str, Any] | None = None
    graph_breaks: list[GraphBreakEvent] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    artifacts: list[ArtifactEvent] = field(default_factory=list)
    start_stack: list[dict[str, Any]] | None = None
    # replay: the classes of the compiled frame's objects that name it, from the guards torch logged (live: the
    # origin's classes)
    frame_objects: list[FrameObjectsEvent] = field(default_factory=list)
    recompile_reasons: list[str] = field(default_factory=list)  # one per cache entry that did not match
    # One per inductor graph of this compile that torch logged a schedule for (collective ops, in order)
    schedules: list[GraphScheduleEvent] = field(default_factory=list)
    # each feature's events (torch_otel._features), by feature name, in the order they came
    attached: dict[str, list[Any]] = field(default_factory=dict)
    incomplete: str | None = None
    dropped: int = 0
    # inductor's debug directories of this compile, one per graph (TORCH_COMPILE_DEBUG=1)
    debug_dirs: list[str] = field(default_factory=list)
    # replay: the TORCH_TRACE file it came from (live: torch's own trace file, looked up when it is mapped)
    trace_file: str | None = None
    # a lazy backward: the n-th (from 0) of its compile id in this process (DDP's buckets each have one)
    backward_index: int | None = None
    # torch's time of the latest phase event of this compile: the date of a record that carries none (replay)
    last_ts_ns: int | None = None
    # Replay: the process that wrote the log (from its lines) and its torch version (torch_version artifact)
    process_id: int | None = None
    torch_version: str | None = None
    # live: the CPU time from the compile's start to its end of this process (every thread's: inductor's compile
    # threads too) and of the processes working for it (torch_otel._capture.cpu: the C++ compilers inductor ran, its compile
    # worker processes); ``child_cpu_ns`` is the part in those other processes
    cpu_ns: int | None = None
    child_cpu_ns: int | None = None
    # -- Derived by the assembler, once, before any sink sees the record (torch_otel._assemble.derive) --
    # the compiled frame as the user wrote it (docs/span-model.md, "Which frame"): ``MyModel.forward``, ``Sequential``
    # (through torch's wrapper, at the caller's line), else torch's code; a limit check's is its frame's, a lazy
    # backward's its forward's. torch's code object where it differs; the class that names the frame, if one does
    code: CodeLocation = CodeLocation()
    torch_code: CodeLocation | None = None
    frame_class: str | None = None
    # the user's line that called the compiled code: the nearest frame outside torch and installed packages (live: the
    # stack at the compile's start; replay: dynamo_start's); a lazy backward's is its forward's. None: unknown
    call_site: CodeLocation | None = None
    called_directly: bool = False  # the user's code called the compiled code itself (no library frame between them)
    forward: Linked | None = None  # a lazy backward: its forward compile, when still remembered
    compiled_autograd: Linked | None = None  # a frame traced under compiled autograd: that graph's compile
    mega_cache_hits: dict[str, int] = field(default_factory=dict)  # cache -> hits on entries a mega-cache load put there
    # the trace identity of the compile's root span (None: not traced); exemplars and log records name it
    trace_id: int | None = None
    span_id: int | None = None
    # a frame compile: its frame's compiles before it (torch's cache_size, else those seen), the limit in effect (its
    # dynamo_config's, else live config's), and whether it is the frame's first within two recompiles of that limit
    frame_recompiles: int | None = None
    recompile_limit: int | None = None
    recompile_limit_near: bool = False
    recompile_limit_kind: str | None = None  # None: recompile_limit; accumulated_recompile_limit where nearer, or hit
    shared_frame: bool = False  # its torch frame compiled other classes too, under one limit (:meth:`limit_frame`)
    # what each feature's derive step found (torch_otel._features), by feature name
    derived: dict[str, Any] = field(default_factory=dict)
    _key: tuple[CompileId | None, str] | None = None  # its key among the compiles in flight
    _stack: list[PhaseNode] = field(default_factory=list)
    # Phases open on inductor's compile workers, apart from the compile's own stack: worker thread -> its open
    # phases (live), or None -> every worker's, in the order they began (replay: torch's log does not say the thread)
    _lanes: dict[int | None, list[PhaseNode]] | None = None
    _ended: bool = False
    _nodes: int = 1
    # what torch's records say, worked out once when the assembler finished the compile (:meth:`seal`): every sink
    # reads these, several times each
    _sealed: _Sealed | None = None
    _all_nodes: list[PhaseNode] | None = None  # its tree's nodes, kept once the assembler finished it (``phase_nodes``)

    @property
    def id_str(self) -> str:
        return str(self.compile_id) if self.compile_id is not None else "-/-"

    def _text(self, field_name: str) -> str | None:
        """A CompilationMetrics text field; else the root's end event's (torch puts ``fail_type`` there too)."""
        v = (self.metrics or {}).get(field_name)
        if not (isinstance(v, str) and v):
            v = self.root.args.get(field_name)
        return v if isinstance(v, str) and v else None

    def phase_nodes(self) -> list[PhaseNode]:
        """Every node of its tree in ``root.walk``'s order; kept once the compile is finished (:meth:`seal`)."""
        kept = self._all_nodes
        return kept if kept is not None else self.root.nodes()

    def limit_frame(self) -> CodeLocation:
        """The frame this compile counts for (the limit, the summary): torch's where classes share it, else ``code``."""
        return (self.torch_code or self.code) if self.shared_frame else self.code

    def seal(self) -> None:
        """The assembler has finished this compile: torch's facts no longer change, so the ones every sink reads (its
        failure, the recompile limit, eager fallback, cache lookups) are worked out once, here."""
        self._all_nodes = self._all_nodes or self.root.nodes()  # the assembler's list, where it listed the finished tree
        fail_type, fail_reason = self._text("fail_type"), self._text("fail_reason")
        hit = is_recompile_limit_hit(fail_type, fail_reason)
        fallback, duration_ns = self._eager_fallback(hit, fail_type), self._duration_ns()
        self._sealed = _Sealed(fail_type, fail_reason, hit, fallback, self._cache_counts(), duration_ns)

    @property
    def fail_type(self) -> str | None:
        """torch's ``fail_type`` (``Unsupported``, ``InductorError``, ...) of a failed compile."""
        sealed = self._sealed
        return sealed.fail_type if sealed is not None else self._text("fail_type")

    @property
    def fail_reason(self) -> str | None:
        sealed = self._sealed
        return sealed.fail_reason if sealed is not None else self._text("fail_reason")

    @property
    def recompile_reason(self) -> str | None:
        if self.kind == "compiled_autograd":  # no metrics record: the cache miss torch logged for it
            return self.recompile_reasons[0] if self.recompile_reasons else None
        return self._text("recompile_reason")

    @property
    def recompile_limit_hit(self) -> bool:
        """The frame exceeded ``recompile_limit``: it runs in eager from now on."""
        sealed = self._sealed
        return sealed.limit_hit if sealed is not None else is_recompile_limit_hit(self.fail_type, self.fail_reason)

    @property
    def eager_fallback(self) -> bool:
        """This compile left its frame running in eager (limit hit, skipped frame, no guarded code)."""
        sealed = self._sealed
        return sealed.eager_fallback if sealed is not None else self._eager_fallback(self.recompile_limit_hit, self.fail_type)

    def _eager_fallback(self, limit_hit: bool, fail_type: str | None) -> bool:
        if fail_type == LIMIT_RAISED:
            return False  # the limit hit, raised into the caller (fail_on_recompile_limit_hit, or fullgraph=True)
        if limit_hit or any(gb.skipped_frame for gb in self.graph_breaks):
            return True
        m = self.metrics or {}
        if m.get("has_guarded_code") is not False:
            return False
        if fail_type is None:
            return True  # nothing torch could compile, and no failure: the frame runs uncompiled
        # A failed compile leaves its frame uncompiled only where torch suppresses the error (convert_frame's
        # ConvertFrame): a soft failure, or any with suppress_errors on. Any other raises into the caller, as every
        # failure does under fullgraph=True or error_on_graph_break(True): the call failed, nothing ran in eager.
        if self.origin is not None and self.origin.raises:
            return False
        return fail_type in SOFT_FAIL_TYPES or m.get("config_suppress_errors") is True

    def cache_counts(self) -> dict[tuple[str, str, str], int]:
        """The compile's cache lookups: ``(cache, location, result) -> count``, caches ``fx_graph`` and ``aot_autograd``.
        Hits and misses are torch's counts in its CompilationMetrics; a bypass is a phase torch marked
        ``cache_state=bypass`` (local: a bypass never reaches a remote cache). A new dict on each call."""
        sealed = self._sealed
        return dict(sealed.cache_counts) if sealed is not None else self._cache_counts()

    def _cache_counts(self) -> dict[tuple[str, str, str], int]:
        counts = list(map((self.metrics or {}).get, _CACHE_COUNTED))  # in C: most compiles' are all None or 0
        out = {k: n for k, n in zip(_CACHE_KEYS, counts, strict=True) if type(n) is int and n > 0} if any(counts) else {}
        for node in compress(nodes := self.phase_nodes(), map(BYPASS_PHASES.__contains__, map(_NAME, nodes))):  # caches'
            if node.args.get("cache_state") == "bypass":
                key = (BYPASS_PHASES[node.name], "local", "bypass")
                out[key] = out.get(key, 0) + 1
        return out

    def own_code(self) -> CodeLocation:
        """The compiled code as this compile's own records say: torch's metrics, else the live origin, else dynamo_start.

        Sinks read :attr:`code`, which the assembler derives from this and the compiles before it.
        """
        m = self.metrics or {}
        origin = self.origin
        name = m.get("co_name") or (origin.code_name if origin else None)
        path = m.get("co_filename") or (origin.code_file if origin else None)
        line = m.get("co_firstlineno") or (origin.code_line if origin else None)
        if (not name or not path) and self.start_stack:
            top = self.start_stack[-1]
            name, path, line = name or top.get("name"), path or top.get("filename_str"), line or top.get("line")
        return CodeLocation(
            name if isinstance(name, str) and name else None,
            path if isinstance(path, str) and path else None,
            line if isinstance(line, int) and not isinstance(line, bool) else None,
        )

    @property
    def guarded(self) -> bool:
        """Whether torch built guards for the compile (its metrics' ``guard_count``)."""
        count = (self.metrics or {}).get("guard_count")
        return isinstance(count, int) and not isinstance(count, bool) and count > 0

    def object_classes(self) -> dict[str, str]:
        """The classes of the compiled frame's objects that name it (:class:`FrameObjectsEvent`): live capture's, else
        the guards torch logged (its last attempt's). Only for a compile torch built guards for (its metrics'
        ``guard_count``): replay reads the classes from those guards, so live and replay name a frame alike; a compile
        without (a frame skipped before any guard, the recompile-limit check) is named as its frame's earlier one."""
        if not self.guarded:
            return {}
        if self.origin is not None and self.origin.classes:
            return self.origin.classes
        for ev in reversed(self.frame_objects):
            if ev.classes:
                return ev.classes
        return {}

    def caller(self) -> CodeLocation:
        """The user's line that called the compiled code: the live origin's, else the frame below it in dynamo_start."""
        origin = self.origin
        if origin is not None:
            return CodeLocation(origin.caller_function or None, origin.caller_file or None, origin.caller_line)
        if self.start_stack and len(self.start_stack) >= 2:
            below = [c for c in self.start_stack[:-1] if not _BRIDGE_FRAME.search(str(c.get("filename_str") or ""))]
            c = below[-1] if below else self.start_stack[-2]
            name, path, line = c.get("name"), c.get("filename_str"), c.get("line")
            return CodeLocation(
                name if isinstance(name, str) else None,
                path if isinstance(path, str) else None,
                line if isinstance(line, int) and not isinstance(line, bool) else None,
            )
        return CodeLocation()

    def user_call_site(self) -> tuple[CodeLocation | None, bool]:
        """The user's line that called the compiled code, as this compile's own records say, and whether the user's code
        called it directly (no library frame between them): the live origin's caller (already the nearest frame
        outside torch and installed packages) and its stack, else the stack torch logged with ``dynamo_start``.
        ``(None, False)`` where neither says, or every frame is torch's or a library's."""
        origin = self.origin
        if origin is not None and origin.caller_file:
            if in_installed_package(origin.caller_file):
                return None, False
            first = origin.stack[0][0] if origin.stack else origin.caller_file
            site = CodeLocation(origin.caller_function or None, origin.caller_file, origin.caller_line)
            return site, not in_installed_package(first)
        stack = self.start_stack or []
        # torch's log leaves out the frames running compiled code: the compiled frame was called by the user's code
        # itself only when torch.compile's wrapper called it (eval_frame's compile_wrapper, _fn before 2.11)
        entry = len(stack) >= 2 and _is_compile_wrapper(stack[-2])
        direct = True
        for c in reversed(stack[:-1]):
            path = c.get("filename_str")
            if not isinstance(path, str) or not path or _in_torch(path):
                continue
            if in_installed_package(path):
                direct = False
                continue
            name, line = c.get("name"), c.get("line")
            line = line if isinstance(line, int) and not isinstance(line, bool) else None
            return CodeLocation(name if isinstance(name, str) else None, path, line), direct and entry
        return None, False

    @property
    def span_ns(self) -> int:
        """The root span's duration: torch's outer event (a frame's ``dynamo``), or the live hook's."""
        end = self.root.end_ns if self.root.end_ns is not None else self.root.start_ns
        return max(0, end - self.root.start_ns)

    @property
    def duration_ns(self) -> int:
        sealed = self._sealed
        return sealed.duration_ns if sealed is not None else self._duration_ns()

    def _duration_ns(self) -> int:
        """The compile's duration, as torch records it (docs/metrics.md, "Compile time").

        A frame compile or a lazy backward: torch's ``CompilationMetrics.duration_us``, which is its
        ``entire_frame_compile`` (``entire_backward_compile``). The root span is torch's outer event, which also
        covers torch recording and logging that record (a frame's ``dynamo``: a few ms more). Any other
        compile, or one torch logged no metrics for: the root span's.
        """
        if self.kind in DURATION_KINDS:
            us = (self.metrics or {}).get("duration_us")
            if isinstance(us, (int, float)) and not isinstance(us, bool) and us >= 0:
                return int(us * 1000)
        return self.span_ns

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def handled_graph_breaks(self) -> list[GraphBreakEvent]:
        """The graph breaks torch handled (it split the graph and resumed after it): torch's ``counters["graph_break"]``.

        Two kinds are not among them, as torch does not count them there (it counts both in
        ``counters["unimplemented"]``): a graph break torch could not handle (``skipped_frame``: the frame is
        skipped and runs in eager; the compile's failure), and one it could not resume after (``ends_frame``: it
        compiled up to the last point it could resume from, and the rest of the function ran in eager).
        """
        return [gb for gb in self.graph_breaks if not gb.skipped_frame and not gb.ends_frame]

    @property
    def frame_ending_graph_breaks(self) -> list[GraphBreakEvent]:
        """The graph breaks torch could not resume after: the rest of their function ran in eager."""
        return [gb for gb in self.graph_breaks if gb.ends_frame and not gb.skipped_frame]


class Sink(abc.ABC):
    """What the assembler hands its compiles to: spans, metrics, the run summary, log records, reports.

    The assembler calls ``on_start`` as a compile begins (optional) and ``on_finish`` once it has ended and
    every derived fact is on the record. A sink only reads the record. Its pipeline
    (torch_otel._pipeline.build.Pipeline) owns its lifecycle, as the OpenTelemetry SDK's provider owns its span
    processors: it calls ``force_flush`` and ``shutdown`` on every sink in order, under one deadline. A sink that
    reports (the run summary, the cache key index, replay's report) writes on ``shutdown``; one with nothing
    buffered keeps the defaults. Exceptions are caught by the caller, counted and logged once: a sink never
    reaches the user's compile, nor stops the sinks after it.
    """

    def on_start(self, record: CompileRecord) -> None:  # noqa: B027 - optional, empty by design
        """A compile began (its record holds only the root so far)."""

    @abc.abstractmethod
    def on_finish(self, record: CompileRecord) -> None:
        """A compile ended: the whole record, derived facts included."""

    def on_orphan_log(self, event: LogEvent) -> None:  # noqa: B027 - optional, empty by design
        """A torch warning logged outside any compile the assembler knows of."""

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        """Deliver what the sink holds, within ``timeout_millis``; True when done in time."""
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:  # noqa: B027 - optional, empty by design
        """Deliver and write what the sink holds (within ``timeout_millis`` where it can), then release it; safe
        to call twice."""
