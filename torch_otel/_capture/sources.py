"""Every point where live capture attaches to torch: one row each, in one table.

As tlparse's ``default_parsers()`` lists its parsers, :data:`SOURCES` lists the
live capture's sources. Each row says what it gives the user, which torch
releases have it, which capture levels use it, and how it is attached and
detached. :class:`~torch_otel._capture.live_capture.LiveCapture` walks the table: a new torch
release that moves or renames an attach point is a new row (with its own
``releases``), not a new ``if`` inside the capture.

A row whose attach point this torch lacks is skipped, and the capture says
once, in one line, what this release cannot give (:func:`lacking_line`). Rows on
modules torch imports lazily (inductor, export, the mega-cache) attach once the
module is imported; a point missing there is reported then, in one line too.

The release policy lives here as well: the releases this version was tested
with, and the one line for a torch outside them (:func:`release_line`).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core.compile_id import current_compile_id
from .._core.errors import record_error, warn_once
from .._core.import_watch import forget, when_imported
from .._features.cache_lookups import CacheLookupEvent
from .._parse.records import instant_events
from .._version import SUPPORTED_TORCH, TESTED_TORCH

ALL_LEVELS = frozenset({"default", "full"})


class Hookable(Protocol):
    """A hook object of the capture's with its own attach and detach (export, the mega-cache, the warnings link)."""

    def hook(self) -> None: ...

    def unhook(self) -> None: ...


class Capture(Protocol):
    """What the rows of :data:`SOURCES` attach and read: the live capture (:class:`torch_otel._capture.live_capture.LiveCapture`).

    Each row names the capture's hook by a function of the capture (``lambda cap: cap._gb_handler``), so mypy
    checks every name in the table against this protocol, and the capture against it where it attaches the table:
    a misspelt hook fails the type check and ``tests/fast``, never a user's run.
    """

    level: str
    warnings: bool
    installed: bool
    originals: dict[str, Any]
    attach_lock: threading.Lock
    count_graphs: bool
    # where a lazily compiled backward's callable lives as its compile ends: (function on the stack, the local or free
    # variable there that holds it, its attribute), put by the CompiledBackward rows
    backward_holders: list[tuple[str, str, str]]

    def graphs_attached(self) -> None: ...

    def graphs_detached(self) -> None: ...

    def logger_state(self, name: str, lg: logging.Logger) -> Any: ...

    def queue_events(self, convert: Callable[[], list[Any]]) -> None: ...

    @property
    def tapped(self) -> set[type]: ...

    def restore_logger(self, name: str, lg: logging.Logger) -> None: ...

    # the hooks the table attaches
    def _record_chromium_event(self, event: dict[str, Any]) -> None: ...

    def _log_compilation_event(self, metrics: Any) -> None: ...

    def _recompilation_reasons(self, *args: Any, **kwargs: Any) -> Any: ...

    def _log_collective_schedule(self, nodes: Any) -> None: ...

    def _dump_collective_schedule(self, schedule: Any) -> None: ...

    def _create_debug_dir(self, folder_name: str) -> str | None: ...

    @property
    def _gb_handler(self) -> logging.Handler: ...

    @property
    def _trace_handler(self) -> logging.Handler: ...

    @property
    def _ca_miss_handler(self) -> logging.Handler: ...

    @property
    def _warning_hook(self) -> Hookable: ...

    @property
    def _torch_export_hook(self) -> Hookable: ...

    @property
    def _mega_cache_hook(self) -> Hookable: ...

    def _install_global_hook(self, torch_fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def _backward_compiler_hook(self, torch_fn: Callable[..., Any]) -> Callable[..., Any]: ...


# A row's reference to one of the capture's hooks
HookRef = Callable[[Capture], Any]


def _release(version: str) -> tuple[int, int] | None:
    """``"2.15.0+cu132"`` -> ``(2, 15)``; None for what is not a release number."""
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


def tested_status(version: str) -> str:
    """``"tested"``, ``"newer"`` (than the newest tested release), ``"older"`` or ``"unknown"``."""
    rel = _release(version)
    if rel is None:
        return "unknown"
    tested = [_release(v) for v in TESTED_TORCH]
    if rel in tested:
        return "tested"
    return "newer" if rel > max(t for t in tested if t) else "older"


def release_line(version: str) -> str | None:
    """The one line for a torch outside the tested releases; None within them."""
    status = tested_status(version)
    newest = TESTED_TORCH[-1]
    if status == "newer":
        return (
            f"torch {version} is newer than the newest release torch-otel was tested with ({newest}); capturing on a "
            f"best-effort basis, and what this torch has moved is reported as it arms. Tested: {SUPPORTED_TORCH}"
        )
    if status == "older":
        return (
            f"torch {version} is older than the supported range ({SUPPORTED_TORCH}); capturing what it can, and some "
            f"of it may be missing or wrong. Upgrade torch to {TESTED_TORCH[0]} or later for full support"
        )
    if status == "unknown":
        return f"cannot read torch's version ({version!r}); capturing on a best-effort basis. Tested: {SUPPORTED_TORCH}"
    return None


def _in_releases(version: str, releases: tuple[str | None, str | None]) -> bool:
    """Whether ``version`` lies in ``(first, last)`` (releases ``"2.10"``; None: unbounded)."""
    rel = _release(version)
    if rel is None:
        return True
    first, last = (None if r is None else _release(r) for r in releases)
    return (first is None or rel >= first) and (last is None or rel <= last)


@dataclass(frozen=True)
class Source:
    """One attach point. ``attach`` returns False when this torch lacks it (nothing is then attached)."""

    name: str
    gives: str  # what the user gets from it: the lacking line names it
    module: str  # the torch module that has the attach point
    releases: tuple[str | None, str | None] = ("2.10", None)  # the releases that have it (None: open-ended)
    levels: frozenset[str] = ALL_LEVELS  # the capture levels that use it
    lazy: bool = False  # attached once ``module`` is imported (torch loads it only when the user needs it)
    # One release range's way to a point another row reaches on the other releases: outside ``releases`` it is left
    # out, not reported as lacking
    variant: bool = False
    reattach: bool = False  # attached again as each compile starts (torch's set_logs() resets loggers)
    only_if: Callable[[Capture], bool] | None = None  # a setting of the capture that it needs

    def wanted(self, cap: Capture) -> bool:
        return cap.level in self.levels and (self.only_if is None or self.only_if(cap))

    def present(self) -> bool:
        """Whether this torch has the attach point (imports ``module``: for the matrix and ``torch-otel doctor``)."""
        try:
            return self._lookup(importlib.import_module(self.module)) is not None
        except Exception:  # noqa: BLE001 - a module torch no longer has
            return False

    def _lookup(self, mod: Any) -> Any:
        return mod

    def attach(self, cap: Capture) -> bool:
        raise NotImplementedError

    def detach(self, cap: Capture) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class FunctionHook(Source):
    """Module functions replaced by the capture's hooks (``attrs``: ``(torch's name, the capture's hook)``).

    torch imports some of them by name into the module that calls them: the row names that module. On
    detach, torch's function goes back unless someone wrapped the capture's since.
    """

    attrs: tuple[tuple[str, HookRef], ...] = ()

    def _lookup(self, mod: Any) -> Any:
        found = [getattr(mod, a, None) for a, _ in self.attrs]
        return found if all(callable(f) for f in found) else None

    def attach(self, cap: Capture) -> bool:
        mod = sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module)
        found = self._lookup(mod) if mod is not None else None
        if found is None:
            return False
        for (attr, hook), orig in zip(self.attrs, found, strict=True):
            ours = hook(cap)
            if orig == ours:
                continue
            cap.originals[f"{self.module}.{attr}"] = orig
            setattr(mod, attr, ours)
        return True

    def detach(self, cap: Capture) -> None:
        mod = sys.modules.get(self.module)
        for attr, hook in self.attrs:
            orig = cap.originals.pop(f"{self.module}.{attr}", None)
            if mod is not None and orig is not None and getattr(mod, attr, None) == hook(cap):
                setattr(mod, attr, orig)


@dataclass(frozen=True)
class StaticMethodHook(Source):
    """A class's staticmethod replaced by one of the capture's (``owner.attr`` -> ``hook``)."""

    owner: str = ""
    attr: str = ""
    hook: HookRef = lambda cap: None

    def _lookup(self, mod: Any) -> Any:
        cls = getattr(mod, self.owner, None)
        found = cls.__dict__.get(self.attr) if isinstance(cls, type) else None
        return (cls, found) if isinstance(found, staticmethod) else None

    def attach(self, cap: Capture) -> bool:
        found = self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module))
        if found is None:
            return False
        cls, orig = found
        ours = self.hook(cap)
        if orig.__func__ == ours:
            return True
        cap.originals[f"{self.module}.{self.owner}.{self.attr}"] = orig
        setattr(cls, self.attr, staticmethod(ours))
        return True

    def detach(self, cap: Capture) -> None:
        orig = cap.originals.pop(f"{self.module}.{self.owner}.{self.attr}", None)
        found = self._lookup(sys.modules.get(self.module))
        if orig is not None and found is not None and found[1].__func__ == self.hook(cap):
            setattr(found[0], self.attr, orig)


@dataclass(frozen=True)
class MethodHook(Source):
    """A class's method (``owner.attr``) replaced by one the capture makes around torch's: ``hook(cap)`` is given
    torch's function and returns the method. Detach puts torch's back unless someone replaced the capture's since."""

    owner: str = ""
    attr: str = ""
    hook: HookRef = lambda cap: None
    # called once attached and once detached (the graph counters: their wrappers' code is kept from dynamo, and
    # torch's callables go back on detach)
    attached: Callable[[Capture], None] | None = None
    detached: Callable[[Capture], None] | None = None

    def _lookup(self, mod: Any) -> Any:
        cls = getattr(mod, self.owner, None)
        found = cls.__dict__.get(self.attr) if isinstance(cls, type) else None
        return (cls, found) if callable(found) else None

    def _key(self) -> str:
        return f"{self.module}.{self.owner}.{self.attr}"

    def attach(self, cap: Capture) -> bool:
        found = self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module))
        if found is None:
            return False
        cls, torch_fn = found
        if getattr(torch_fn, "__torch_otel_hook__", None) is self:
            return True
        if self.attached is not None:
            self.attached(cap)  # raises: nothing of torch's is replaced
        ours = self.hook(cap)(torch_fn)
        ours.__torch_otel_hook__ = self
        cap.originals[self._key()] = torch_fn
        setattr(cls, self.attr, ours)
        return True

    def detach(self, cap: Capture) -> None:
        torch_fn = cap.originals.pop(self._key(), None)
        found = self._lookup(sys.modules.get(self.module))
        if torch_fn is not None and found is not None and getattr(found[1], "__torch_otel_hook__", None) is self:
            setattr(found[0], self.attr, torch_fn)
        if torch_fn is not None and self.detached is not None:
            self.detached(cap)


@dataclass(frozen=True)
class CompiledBackward(Source):
    """Where a lazily compiled backward's callable lives as its compile ends: the frame of ``function`` on the stack
    holds it in ``holder`` (a local or free variable), as ``attr``. Nothing of torch's is replaced: the capture reads
    it there when the compile's root ends (torch's ``entire_backward_compile`` end, on the compile's own stack) and
    puts the counter in front of it. ``probe``: a name the module has; ``absent``: one it must not have."""

    function: str = ""
    holder: str = ""
    attr: str = "compiled_bw"
    probe: str = ""
    absent: str = ""

    def _lookup(self, mod: Any) -> Any:
        if mod is None or not hasattr(mod, self.probe) or (self.absent and hasattr(mod, self.absent)):
            return None
        return mod

    def attach(self, cap: Capture) -> bool:
        if self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module)) is None:
            return False
        where = (self.function, self.holder, self.attr)
        if where not in cap.backward_holders:
            cap.backward_holders.append(where)
        return True

    def detach(self, cap: Capture) -> None:
        where = (self.function, self.holder, self.attr)
        if where in cap.backward_holders:
            cap.backward_holders.remove(where)


@dataclass(frozen=True)
class LoggerHook(Source):
    """A handler of the capture's on torch's loggers.

    ``lower``: the loggers' level is lowered so torch creates the records, with ``propagate=False`` when
    nobody asked for them (``quiet``), so torch prints nothing new; what the capture changed is put back on
    detach, unless someone changed it since.
    """

    loggers: tuple[str, ...] = ()
    handler: HookRef = lambda cap: None  # the capture's handler
    lower: bool = False
    quiet: bool = False
    registry_name: str | None = None  # the TORCH_LOGS artifact that must exist in torch's log registry

    def _lookup(self, mod: Any) -> Any:
        if self.registry_name is None:
            return True
        try:
            from torch._logging._internal import log_registry

            names = getattr(log_registry, "artifact_names", None) or set()
            return True if self.registry_name in names else None
        except Exception:  # noqa: BLE001
            return None

    def attach(self, cap: Capture) -> bool:
        if self._lookup(None) is None:
            return False
        handler = self.handler(cap)
        for name in self.loggers:
            lg = logging.getLogger(name)
            enabled = not self.lower or lg.isEnabledFor(logging.DEBUG)
            if handler in lg.handlers and enabled:
                continue  # as it was left (the check that runs as each compile starts: two lookups)
            state = cap.logger_state(name, lg)
            if handler not in lg.handlers:
                lg.addHandler(handler)
            if not enabled:
                lg.setLevel(logging.DEBUG)
                if self.quiet:
                    lg.propagate = False  # nobody asked for these records: they must not reach torch's stderr handler
                state.changed = True
            state.set_level, state.set_propagate = lg.level, lg.propagate
        return True

    def detach(self, cap: Capture) -> None:
        handler = self.handler(cap)
        for name in self.loggers:
            lg = logging.getLogger(name)
            if handler in lg.handlers:
                lg.removeHandler(handler)
            cap.restore_logger(name, lg)


@dataclass(frozen=True)
class ObjectHook(Source):
    """A hook object of the capture's with its own ``hook()`` and ``unhook()`` (export, the mega-cache)."""

    obj: HookRef = lambda cap: None  # the capture's hook object
    probe: tuple[str, ...] = ()  # names the module must have

    def _lookup(self, mod: Any) -> Any:
        return (
            mod if all(callable(getattr(mod, n, None)) or isinstance(getattr(mod, n, None), type) for n in self.probe) else None
        )

    def attach(self, cap: Capture) -> bool:
        self.obj(cap).hook()  # waits for the module's import; a name it lacks there is reported then
        return True

    def detach(self, cap: Capture) -> None:
        self.obj(cap).unhook()


@dataclass(frozen=True)
class CountersRead(Source):
    """torch's counters, read at scrape time: nothing to attach, only their presence to check."""

    def _lookup(self, mod: Any) -> Any:
        return getattr(mod, "counters", None)

    def attach(self, cap: Capture) -> bool:
        return self._lookup(importlib.import_module(self.module)) is not None

    def detach(self, cap: Capture) -> None:
        return None


# A tap's conversion: torch's call arguments and the compile id in force -> the typed events they carry
TapEvents = Callable[[tuple[Any, ...], dict[str, Any], Any], list[Any]]


@dataclass(frozen=True)
class EventTap(Source):
    """A torch function (``owner.attr``, or the module's ``attr``) wrapped to hand its arguments, as typed events,
    to the capture: torch's own function runs first and unchanged, then the call is queued like every hook's,
    and ``to_events`` turns it into events off torch's path (:mod:`torch_otel._parse` holds the conversions,
    shared with replay).

    A new kind of event torch hands a function is a row of this class: nothing in the capture changes. The
    event types a tap delivers (``kinds``) are left out of full capture's ``torch.__trace`` records, which carry
    the same facts once more. Detach puts torch's function back unless someone wrapped the tap since.
    """

    attr: str = ""
    owner: str | None = None  # a class of the module whose method (or staticmethod) is tapped
    to_events: TapEvents = lambda args, kwargs, cid: []
    kinds: tuple[type, ...] = ()

    def _lookup(self, mod: Any) -> Any:
        holder = getattr(mod, self.owner, None) if self.owner else mod
        if holder is None:
            return None
        raw = holder.__dict__.get(self.attr) if isinstance(holder, type) else getattr(holder, self.attr, None)
        return (holder, raw) if callable(raw) or isinstance(raw, staticmethod) else None

    def _key(self) -> str:
        return f"{self.module}.{self.owner + '.' if self.owner else ''}{self.attr}"

    def attach(self, cap: Capture) -> bool:
        found = self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module))
        if found is None:
            return False
        holder, raw = found
        if getattr(raw, "__torch_otel_tap__", None) is self:
            return True
        inner: Callable[..., Any] = raw.__func__ if isinstance(raw, staticmethod) else raw
        to_events, current_id = self.to_events, current_compile_id

        @functools.wraps(inner)
        def tap(*args: Any, **kwargs: Any) -> Any:
            result = inner(*args, **kwargs)
            if cap.installed:
                try:
                    cid = current_id()  # read now; the conversion runs off torch's path, with the queue
                    cap.queue_events(lambda: to_events(args, kwargs, cid))
                except Exception as exc:  # noqa: BLE001 - never into torch's call
                    record_error(f"{self.name} tap", exc)
            return result

        tap.__torch_otel_tap__ = self  # type: ignore[attr-defined]
        cap.originals[self._key()] = raw
        setattr(holder, self.attr, staticmethod(tap) if isinstance(raw, staticmethod) else tap)
        cap.tapped.update(self.kinds)
        return True

    def detach(self, cap: Capture) -> None:
        raw = cap.originals.pop(self._key(), None)
        found = self._lookup(sys.modules.get(self.module))
        if raw is None or found is None:
            return
        holder, current = found
        current_fn = current.__func__ if isinstance(current, staticmethod) else current
        if getattr(current_fn, "__torch_otel_tap__", None) is self:
            setattr(holder, self.attr, raw)
        cap.tapped.difference_update(self.kinds)


@dataclass(frozen=True)
class RecordFields(Source):
    """Fields of a record torch hands the capture (``CompilationMetrics``): nothing to attach, their presence to check."""

    owner: str = ""
    fields: tuple[str, ...] = ()

    def _lookup(self, mod: Any) -> Any:
        import dataclasses

        cls = getattr(mod, self.owner, None)
        if not dataclasses.is_dataclass(cls):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls if all(f in names for f in self.fields) else None

    def attach(self, cap: Capture) -> bool:
        return self._lookup(importlib.import_module(self.module)) is not None

    def detach(self, cap: Capture) -> None:
        return None


def _instant_call_events(args: tuple[Any, ...], kwargs: dict[str, Any], cid: Any) -> list[Any]:
    """``ChromiumEventLogger.log_instant_event(self, event_name, time_ns, metadata, ...)`` -> the events of its row."""
    named = dict(zip(("self", "event_name", "time_ns", "metadata"), args, strict=False)) | kwargs
    name, ts = named.get("event_name"), named.get("time_ns")
    if not isinstance(name, str):
        return []
    return instant_events(name, ts if isinstance(ts, int) else None, named.get("metadata"), cid) or []


GRAPH_BREAK_LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.convert_frame.__graph_breaks",
    "torch._dynamo.exc.__graph_breaks",
)
TRACE_LOGGER = "torch.__trace"
CA_VERBOSE_LOGGER = "torch._dynamo.compiled_autograd.__compiled_autograd_verbose"
INDUCTOR_DEBUG = "torch._inductor.debug"
WARNING_LOGGERS = ("torch._dynamo", "torch._inductor")

# The table. Order matters only for attaching: phases first, so a compile is never seen half-hooked.
SOURCES: tuple[Source, ...] = (
    FunctionHook(
        "chromium_events",
        "compile phases (the child spans) and the phase metric",
        "torch._dynamo.utils",  # imported there by name from torch._utils_internal
        attrs=(("record_chromium_event_internal", lambda cap: cap._record_chromium_event),),
    ),
    FunctionHook(
        "compilation_metrics",
        "each compile's CompilationMetrics: durations, failures, recompile reason, cache counts",
        "torch._dynamo.utils",
        levels=frozenset({"default"}),  # full capture reads the same record from torch.__trace
        attrs=(("log_compilation_event", lambda cap: cap._log_compilation_event),),
    ),
    FunctionHook(
        "recompile_reasons",
        "every cache entry's guard failure on a recompile (torch's metrics keep the first)",
        "torch._dynamo.convert_frame",  # imported there by name from torch._dynamo.guards
        levels=frozenset({"default"}),
        attrs=(("get_and_maybe_log_recompilation_reasons", lambda cap: cap._recompilation_reasons),),
    ),
    LoggerHook(
        "graph_break_logs",
        "graph-break events with their reason and user line",
        "logging",
        levels=frozenset({"default"}),  # full capture reads them from torch.__trace
        reattach=True,
        loggers=GRAPH_BREAK_LOGGERS,
        handler=lambda cap: cap._gb_handler,
        lower=True,
        quiet=True,
        registry_name="graph_breaks",
    ),
    LoggerHook(
        "trace_records",
        "every structured record torch traces (full capture: artifacts, graph breaks, metrics)",
        "logging",
        levels=frozenset({"full"}),
        reattach=True,
        loggers=(TRACE_LOGGER,),
        handler=lambda cap: cap._trace_handler,
        lower=True,
    ),
    LoggerHook(
        "compiled_autograd_misses",
        "why compiled autograd compiled a new graph (with TORCH_LOGS=compiled_autograd_verbose)",
        "logging",
        loggers=(CA_VERBOSE_LOGGER,),
        handler=lambda cap: cap._ca_miss_handler,
        registry_name="compiled_autograd_verbose",
    ),
    ObjectHook(
        "compile_warnings",
        "torch's compile warnings as log records (when a logger provider is given)",
        "logging",
        only_if=lambda cap: bool(cap.warnings),
        # a link in logging's record factory, for WARNING_LOGGERS: no handler on torch's loggers (torch's
        # logging tests count a record once per handler on them), nothing torch prints changes
        obj=lambda cap: cap._warning_hook,
        probe=("getLogRecordFactory", "setLogRecordFactory"),
    ),
    RecordFields(
        "cache_counts",
        "FX graph and AOTAutograd cache hits and misses (torch_compile_cache_requests_total)",
        "torch._dynamo.utils",
        releases=("2.11", None),  # 2.10's CompilationMetrics has no local cache counts
        owner="CompilationMetrics",
        fields=(
            "inductor_fx_local_cache_hit_count",
            "inductor_fx_local_cache_miss_count",
            "aotautograd_local_cache_hit_count",
            "aotautograd_local_cache_miss_count",
        ),
    ),
    CountersRead(
        "compiled_autograd_counters",
        "compiled autograd's captures and compiles counters",
        "torch._dynamo.utils",
    ),
    FunctionHook(
        "collective_schedule",
        "each inductor graph's collective schedule (rank divergence)",
        INDUCTOR_DEBUG,
        lazy=True,
        attrs=(
            ("log_collective_schedule", lambda cap: cap._log_collective_schedule),
            ("_dump_collective_schedule", lambda cap: cap._dump_collective_schedule),
        ),
    ),
    StaticMethodHook(
        "inductor_debug_dirs",
        "inductor's debug directory on the compile (TORCH_COMPILE_DEBUG=1)",
        INDUCTOR_DEBUG,
        lazy=True,
        owner="DebugContext",
        attr="create_debug_dir",
        hook=lambda cap: cap._create_debug_dir,
    ),
    EventTap(
        "cache_lookups",
        "each FX graph and AOTAutograd cache lookup: its key, result, time saved, and why a miss missed",
        "torch._dynamo.utils",
        owner="ChromiumEventLogger",
        attr="log_instant_event",  # every instant torch logs: its cache lookups among them, at no payload cost
        to_events=_instant_call_events,
        kinds=(CacheLookupEvent,),
    ),
    MethodHook(
        "graph_calls",
        "how often each compiled graph ran, its first and last call (the run summary's graph calls)",
        "torch._dynamo.output_graph",
        only_if=lambda cap: cap.count_graphs,
        owner="OutputGraph",
        attr="install_global_unsafe",  # dynamo installs each compiled graph as a global of its frame through it
        hook=lambda cap: cap._install_global_hook,
        attached=lambda cap: cap.graphs_attached(),
        detached=lambda cap: cap.graphs_detached(),
    ),
    CompiledBackward(
        "graph_calls_lazy_backward",
        "how often each lazily compiled backward ran",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.12", None),
        lazy=True,
        variant=True,
        only_if=lambda cap: cap.count_graphs,
        function="get_or_compile",  # _AutogradBackwardCompiler.get_or_compile returns self.compiled_bw
        holder="self",
        probe="_AutogradBackwardCompiler",
    ),
    CompiledBackward(
        "graph_calls_lazy_backward_2_10",
        "how often each lazily compiled backward ran",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.10", "2.11"),
        lazy=True,
        variant=True,
        only_if=lambda cap: cap.count_graphs,
        function="_backward_impl",  # calls CompiledFunction.compiled_bw, a class made per graph in post_compile
        holder="CompiledFunction",
        probe="AOTDispatchAutograd",
        absent="_AutogradBackwardCompiler",
    ),
    MethodHook(
        "graph_calls_cached_backward",
        "how often a backward compiled with its forward ran (AOTAutograd's cache served it)",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.12", None),  # 2.10 and 2.11 keep it in a class made per graph, out of reach until it runs
        lazy=True,
        variant=True,
        only_if=lambda cap: cap.count_graphs,
        owner="_AutogradBackwardCompiler",
        attr="__init__",
        hook=lambda cap: cap._backward_compiler_hook,
    ),
    ObjectHook(
        "export",
        "torch.export and draft_export as traces of their own",
        "torch.export._trace",
        obj=lambda cap: cap._torch_export_hook,
        probe=("_export",),
    ),
    ObjectHook(
        "mega_cache",
        "compiles served from torch.compiler.load_cache_artifacts",
        "torch.compiler._cache",
        obj=lambda cap: cap._mega_cache_hook,
        probe=("CacheArtifactManager",),
    ),
)


@dataclass
class Attached:
    """What a capture attached: the rows in place, the rows waiting for their module, the rows this torch lacks."""

    rows: list[Source] = field(default_factory=list)
    waiting: list[tuple[Source, Callable[[], None]]] = field(default_factory=list)
    lacking: list[Source] = field(default_factory=list)


def lacking_line(version: str, rows: Iterable[Source]) -> str:
    gives = "; ".join(f"{s.gives} ({s.name})" for s in rows)
    return f"torch {version} lacks what torch-otel attaches to for: {gives}. The rest is captured"


def report_lacking(name: str) -> None:
    """A row whose attach point turned out missing once its module was imported (lazy rows, and the export and
    mega-cache hooks, which find torch's names only then): its one line, once per row."""
    row = next(s for s in SOURCES if s.name == name)
    version = str(getattr(sys.modules.get("torch"), "__version__", "?"))
    warn_once(f"source-lacking:{name}", "%s", lacking_line(version, [row]))


def attach_all(cap: Capture, version: str, sources: Iterable[Source] | None = None) -> Attached:
    """Attach every row the capture wants; the lazy ones once their module is imported. Never raises."""
    sources = SOURCES if sources is None else sources
    out = Attached()
    lacking: list[Source] = []
    for src in sources:
        if not src.wanted(cap) or (src.variant and not _in_releases(version, src.releases)):
            continue
        if src.lazy:
            callback = _later(cap, src, version, out)
            out.waiting.append((src, callback))
            when_imported(src.module, callback)  # at once if torch has imported it already
        else:
            attached = _attach_one(cap, src)
            if attached:
                out.rows.append(src)
            elif attached is False:
                lacking.append(src)
    if lacking:
        out.lacking.extend(lacking)
        warn_once("sources-lacking", "%s", lacking_line(version, lacking))
    return out


def _attach_one(cap: Capture, src: Source) -> bool | None:
    """True: attached; False: this torch lacks the row's attach point; None: attaching failed (counted and logged
    once as the bridge's own error: torch is not blamed for it)."""
    try:
        return src.attach(cap)
    except Exception as exc:  # noqa: BLE001 - never into the user's program
        record_error(f"attaching {src.name}", exc)
        return None


def _later(cap: Capture, src: Source, version: str, out: Attached) -> Callable[[], None]:
    def attach() -> None:
        with cap.attach_lock:  # two threads importing the module at once attach once
            if not cap.installed or src in out.rows or src in out.lacking:
                return
            attached = _attach_one(cap, src)
            if attached:
                out.rows.append(src)
            elif attached is False:
                out.lacking.append(src)
                report_lacking(src.name)

    return attach


def detach_all(cap: Capture, attached: Attached) -> None:
    for src, callback in attached.waiting:
        forget(src.module, callback)
    for src in reversed(attached.rows):
        try:
            src.detach(cap)
        except Exception as exc:  # noqa: BLE001
            record_error(f"detaching {src.name}", exc)
    attached.rows.clear()
    attached.waiting.clear()


def reattach(cap: Capture, attached: Attached) -> None:
    """Attach the logger rows again (torch's ``set_logs()`` clears handlers and resets levels)."""
    for src in attached.rows:
        if src.reattach:
            src.attach(cap)


def survey(version: str | None = None) -> list[dict[str, Any]]:
    """Each row with whether this torch has it: for ``torch-otel doctor`` and the release matrix's table.

    Imports the modules the rows name (inductor and export included): not for a training process.
    """
    if version is None:
        import torch

        version = str(torch.__version__)
    rows = []
    for src in SOURCES:
        rows.append(
            {
                "name": src.name,
                "gives": src.gives,
                "levels": sorted(src.levels),
                "releases": src.releases,
                "expected": _in_releases(version, src.releases),
                "present": src.present(),
                "variant": src.variant,
            }
        )
    return rows


def _range_words(releases: tuple[str | None, str | None]) -> str:
    first, last = releases
    if first and last:
        return f"torch {first}" if first == last else f"torch {first} to {last}"
    if first:
        return f"torch {first} and later"
    return f"torch {last} and earlier" if last else "every torch"


def doctor_rows(version: str | None = None) -> list[dict[str, Any]]:
    """:func:`survey`'s rows, each with what ``torch-otel doctor`` says of it in a user's words, without the row's
    id: ``status`` (``yes``: it works on this torch; ``no``: this torch has not what it reads, by design; ``MISSING``:
    this torch should have it and does not; ``covered``: another release range's way to what a row that works here
    gives, not shown) and ``says`` (what it gives, and why not where it does not work)."""
    rows = survey(version)
    for r in rows:
        full_only = "default" not in r["levels"] and "full capture" not in r["gives"]
        what = r["gives"] + (" (with TORCH_OTEL_CAPTURE=full)" if full_only else "")
        if r["expected"] and r["present"]:
            r["status"], r["says"] = "yes", what
        elif r["expected"]:
            r["status"] = "MISSING"
            r["says"] = f"{what}: this torch should have what it reads and does not; the rest is captured (please report it)"
        elif r["variant"] and any(o is not r and o["gives"] == r["gives"] and o["expected"] for o in rows):
            r["status"], r["says"] = "covered", f"{what}, as {_range_words(r['releases'])} gives it"
        else:
            r["status"], r["says"] = "no", f"{what}: not on this torch (only on {_range_words(r['releases'])})"
    return rows
