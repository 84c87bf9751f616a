"""Live capture: torch's own hooks -> typed events -> the assembler.

Default capture uses only sources that cost torch nothing extra (docs/configuration.md, capture levels):
``torch._dynamo.utils.record_chromium_event_internal`` (every begin/end phase
event), ``torch._dynamo.utils.log_compilation_event`` (one CompilationMetrics
per compile) and the ``graph_breaks`` artifact loggers (handled with
``propagate=False`` unless the user asked for that artifact in TORCH_LOGS, so
torch prints nothing new). Full capture adds a handler on ``torch.__trace``:
torch then builds every payload, exactly as with ``TORCH_TRACE``; while that handler
is the only one, each record comes from the capture's ``trace_structured`` in place of
torch's, with no logging record (torch_otel._capture.structured_trace).

The hooks only take what must be read at the moment (the event itself, and for a
compile's root: the caller's frame, trace context and rank) and queue it. The
parsing, assembly, spans and metrics run off the compile's path, in batches, on
a worker thread that wakes at most ``BATCH_DELAY_S`` after a compile ends; or
at once in :meth:`LiveCapture.drain` (``force_flush``, ``shutdown``). Batching
several compiles keeps the bridge's code warm in the CPU caches that torch's
compile evicts: the same work costs about half as much as inline (``bench/``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from threading import get_ident
from time import time_ns
from typing import Any

from opentelemetry import context as otel_context

from .._assemble.assembler import Assembler
from .._attach.attaching import Attached, attach_all, detach_all, reattach
from .._attach.releases import release_line
from .._core.compile_id import current_compile_id
from .._core.errors import _in_bridge, guarded, record_error, warn_once
from .._model.events import (
    DebugDirEvent,
    Event,
    GraphScheduleEvent,
    LogEvent,
    Origin,
    PhaseEvent,
    RecompileReasonsEvent,
)
from .._model.record import ROOTS
from . import attach_table
from .attach_table import INDUCTOR_DEBUG, WARNING_LOGGERS
from .cpu import compile_cpu_ns
from .frames import compile_kind_of_capture, find_code_and_caller, skip_dirs
from .mega_cache import MegaCacheHook
from .processing import Processing
from .structured_trace import direct
from .torch_export import TorchExportHook
from .warnings import WarningRecordHook

BATCH_DELAY_S = 0.5  # a finished compile becomes spans and metrics at most this much later
MAX_PENDING = 50_000  # queued events; past this the hook processes them itself (memory stays bounded)


# A queued piece of work: (handler, three arguments).
_Item = tuple[Callable[[Any, Any, Any], None], Any, Any, Any]


def _rank() -> int | None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001
        return None
    return None


def _cuda_device() -> int | None:
    """The CUDA device current on this thread, if this process has initialised CUDA (never initialises it)."""
    cuda = sys.modules.get("torch.cuda")
    try:
        if cuda is not None and cuda.is_initialized():
            return int(cuda.current_device())
    except Exception:  # noqa: BLE001 - a broken CUDA runtime names no device
        return None
    return None


def _aot_graph() -> str | None:
    """The AOTAutograd graph being compiled (``"5_backward"``): torch sets it just before a lazy backward's root event.

    DDP's optimizer splits one frame into a graph per bucket, each with its own lazy backward under the
    same compile id; this tells them apart.
    """
    lu = sys.modules.get("torch._functorch._aot_autograd.logging_utils")
    names = getattr(lu, "graph_being_compiled", None)
    return str(names[0]) if isinstance(names, list) and names else None


class _ForwardingHandler(logging.Handler):
    """Hands each record of a torch logger to one of the capture's hooks. Adds no output, prints no traceback."""

    def __init__(self, hook: Callable[[logging.LogRecord], None], level: int = logging.DEBUG) -> None:
        super().__init__(level)
        self._hook = hook

    def emit(self, record: logging.LogRecord) -> None:
        self._hook(record)

    def handleError(self, record: logging.LogRecord) -> None:
        return None


class _TraceHandler(logging.Handler):
    def __init__(self, capture: LiveCapture) -> None:
        super().__init__(logging.DEBUG)
        self._capture = capture

    def handle(self, record: logging.LogRecord) -> bool:
        # Called for every record torch traces: no filters to run, and no lock to take (the queue is thread-safe).
        self._capture._on_trace_record(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self._capture._on_trace_record(record)

    def handleError(self, record: logging.LogRecord) -> None:
        return None


class _LoggerState:
    __slots__ = ("level", "propagate", "changed", "set_level", "set_propagate", "reenabled", "by_level")

    def __init__(self, logger: logging.Logger) -> None:
        self.level = logger.level
        self.propagate = logger.propagate
        self.changed = False
        self.set_level = logger.level
        self.set_propagate = logger.propagate
        self.reenabled = False  # the capture turned the logger's ``disabled`` off (put back on detach)
        self.by_level: Any = None  # the capture's ``isEnabledFor`` on it, past ``logging.disable`` (taken off on detach)


class LiveCapture:
    """Installs and removes the hooks; every hook is guarded and never raises."""

    def __init__(
        self,
        assembler: Assembler,
        level: str = "default",
        warnings: bool = False,
        on_first_compile: list[Callable[[], None]] | None = None,
        after_compile_in_child: Callable[[], None] | None = None,
        states: Mapping[str, Any] | None = None,
        on_tick: Callable[[], None] | None = None,
        tick_s: float | None = None,
    ) -> None:
        self.assembler = assembler
        # The features' live states in the capture's pipeline: their rows' hooks are the states' own (``state``)
        self.states: Mapping[str, Any] = dict(states or {})
        # Called on torch's thread as a root phase ends, before its end is queued (a feature's rows register them)
        self._root_end: dict[str, list[Callable[[], None]]] = {}
        # Every ``tick_s`` on the worker thread, once it runs: the pipeline collects its features' states
        self._on_tick = on_tick if tick_s else None
        self._tick_s = tick_s
        # A forked child processes each compile as it ends, then calls this (the bridge exports at once)
        self._after_compile_in_child = after_compile_in_child
        # Run once, as the first compile starts (lazy servers, arming the push).
        self._first_compile = list(on_first_compile or ())
        self.level = level
        self.warnings: bool = warnings
        # torch's compile warnings for log records: taken as torch creates them, with no handler on its loggers
        self._warning_hook = WarningRecordHook(self._on_warning, WARNING_LOGGERS)
        self.installed = False
        # torch's functions the capture replaced, by "module.name" (the sources put them back on detach)
        self.originals: dict[str, Any] = {}
        self.attached = Attached()
        self.attach_lock = threading.Lock()
        self._torch_debug_dir: Any = None  # inductor's DebugContext.create_debug_dir, kept once seen
        self._schedule_tls = threading.local()
        self._gb_handler = _ForwardingHandler(self._on_graph_break)
        # compiled autograd's cache-miss lines (TORCH_LOGS=compiled_autograd_verbose): attached without changing
        # the logger's level, so torch formats and logs them only if the user asked
        self._ca_miss_handler = _ForwardingHandler(self._on_compiled_autograd_miss)
        self._trace_handler = _TraceHandler(self)
        self._logger_states: dict[str, _LoggerState] = {}
        self._skip: tuple[str, ...] = ()
        self._libraries: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._pending: deque[_Item] = deque()
        self._drain_lock = threading.RLock()
        self._wake = threading.Event()
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()
        # Full capture: a chromium record held back until we know whether torch's chromium hook follows it
        # (a phase begin or end, which the hook delivers without JSON) or not (an instant).
        self._held = threading.local()
        self._holding = False  # whether a record was ever held (else there is nothing to clear)
        self._pid = os.getpid()  # in a forked child there is no worker: each compile is processed as it ends
        # event types an attached tap (an EventTap row) delivers: full capture's trace records skip them
        self.tapped: set[type] = set()
        # what each queued item is processed with, off torch's path (bound once: the hooks append them)
        proc = self.processing = Processing(assembler, self.tapped)
        self._process_event, self._process_events = proc.event, proc.events
        self._process_chromium, self._process_root_end, self._process_phase = proc.chromium, proc.root_end, proc.phase
        self._process_metrics, self._process_graph_break = proc.metrics, proc.graph_break
        self._process_trace_record, self._process_chromium_record = proc.trace_record, proc.chromium_record
        self._torch_export_hook = TorchExportHook(self._on_export, self._origin)
        self._mega_cache_hook = MegaCacheHook()

    # -- lifecycle ------------------------------------------------------------
    def install(self) -> None:
        """Attach every source of the table (:mod:`torch_otel._capture.sources`) that this capture level uses; say once what this torch lacks."""
        with self._lock:
            if self.installed:
                return
            import torch

            version = str(torch.__version__)
            line = release_line(version)
            if line:
                warn_once("torch-release", "%s", line)
            self._skip, self._libraries = skip_dirs()
            self._stop, self._worker = threading.Event(), None
            self.installed = True
        # Outside the lock: a row on a module torch has imported already attaches at once.
        attached = attach_all(self, version, attach_table.rows())
        with self._lock:
            self.attached = attached

    def uninstall(self) -> None:
        with self._lock:
            if not self.installed:
                return
            with self.attach_lock:
                self.installed = False
                detach_all(self, self.attached)
            self._logger_states.clear()
            self._stop.set()
            self._wake.set()
        self.drain()

    def _reattach(self) -> None:
        """torch's set_logs() clears handlers and resets levels: put ours back as each compile starts."""
        reattach(self, self.attached)

    def logger_state(self, name: str, lg: logging.Logger) -> _LoggerState:
        """What a logger was before the capture changed it (taken again if someone changed it since)."""
        state = self._logger_states.get(name)
        if state is None or (lg.level, lg.propagate) != (state.set_level, state.set_propagate):
            state = self._logger_states[name] = _LoggerState(lg)
        return state

    def restore_logger(self, name: str, lg: logging.Logger) -> None:
        """Put back only what the capture changed and nobody has changed since."""
        state = self._logger_states.pop(name, None)
        if state is None:
            return
        if state.changed and lg.level == state.set_level and lg.propagate == state.set_propagate:
            lg.setLevel(state.level)
            lg.propagate = state.propagate
        if state.reenabled and not lg.disabled:
            lg.disabled = True
        if state.by_level is not None and vars(lg).get("isEnabledFor") is state.by_level:
            del lg.isEnabledFor

    # -- origin ---------------------------------------------------------------
    def _origin(self) -> Origin:
        """Who compiled: the compiled frame, and the user's line that called it.

        The user's line is the nearest frame outside torch, the bridge, installed libraries and the
        standard library (a model in ``transformers`` is called from the user's script, not from
        ``transformers``). Failing that, the nearest frame outside torch and the bridge's hooks. The
        frames on the way, at most ``MAX_STACK``, are kept for ``code.stacktrace``.
        """
        cpu_ns, child_cpu_ns = compile_cpu_ns()
        origin = Origin(
            parent_context=otel_context.get_current(),
            thread=threading.current_thread().name,
            cpu_ns=cpu_ns,
            child_cpu_ns=child_cpu_ns,
            cuda_device=_cuda_device(),
        )
        find_code_and_caller(origin, sys._getframe(1), self._skip, self._libraries)
        return origin

    # -- the queue -------------------------------------------------------------
    def drain(self) -> None:
        """Process every queued event now, in order, on the calling thread. Never raises."""
        with self._drain_lock:
            token = _in_bridge.set(True)  # torch events our own processing might cause are not captured
            try:
                pop = self._pending.popleft
                while True:
                    try:
                        fn, a, b, c = pop()
                    except IndexError:
                        break
                    try:
                        fn(a, b, c)
                    except Exception as exc:  # noqa: BLE001 - one bad event must not stop the others
                        record_error("live event processing", exc)
                try:
                    self.assembler.release_held()  # a compile held for a skip torch logs after it: not past its batch
                except Exception as exc:  # noqa: BLE001
                    record_error("live event processing", exc)
            finally:
                _in_bridge.reset(token)

    def after_fork_in_child(self) -> None:
        """The parent's queued events are the parent's to report; the locks may be held by its threads."""
        self._pending.clear()
        self._drain_lock = threading.RLock()
        self._wake = threading.Event()
        self._worker = None

    # -- what the features' rows use (torch_otel._attach.points.AttachTarget) ------------------------------------
    def state(self, name: str) -> Any:
        return self.states.get(name)

    def queue_event(self, event: Event) -> None:
        """An event a feature's hook made on torch's path: processed off it, in order with the others."""
        self._pending.append((self._process_event, event, None, None))

    def at_root_end(self, root: str, fn: Callable[[], None]) -> None:
        hooks = self._root_end.setdefault(root, [])
        if fn not in hooks:
            hooks.append(fn)

    def forget_root_end(self, root: str, fn: Callable[[], None]) -> None:
        hooks = self._root_end.get(root)
        if hooks and fn in hooks:
            hooks.remove(fn)

    def _run_first_compile(self) -> None:
        callbacks, self._first_compile = self._first_compile, []
        for cb in callbacks:
            try:
                cb()
            except Exception as exc:  # noqa: BLE001
                record_error("first-compile setup", exc)

    def _compile_ended(self) -> None:
        """A compile ended (its root's end, or its metrics): have the queue processed soon."""
        if os.getpid() != self._pid:
            # A forked child may be killed (pool.terminate) at any time: process and export each compile as it ends.
            self.drain()
            if self._after_compile_in_child is not None:
                try:
                    self._after_compile_in_child()
                except Exception as exc:  # noqa: BLE001
                    record_error("export in a forked child", exc)
            return
        if len(self._pending) > MAX_PENDING:
            self.drain()
            return
        if self._worker is None:
            with self._lock:  # two threads ending their first compiles at once start one worker
                if self._worker is None and self.installed:
                    self._worker = threading.Thread(target=self._run, name="torch-otel-live", daemon=True)
                    self._worker.start()
        self._wake.set()

    def _run(self) -> None:
        wake, stop = self._wake, self._stop
        while True:
            if not wake.wait(self._tick_s if self._on_tick is not None else None):
                if stop.is_set():
                    return
                self._tick()
                continue
            # Cleared before the delay, never after: a stop (which also sets ``wake``) can then not be missed.
            wake.clear()
            # Let the compiles that follow this one queue up: one batch processes them all.
            if stop.wait(BATCH_DELAY_S):
                return  # uninstall processes what is left
            self.drain()

    def _tick(self) -> None:
        if self._on_tick is not None:
            try:
                self._on_tick()
            except Exception as exc:  # noqa: BLE001
                record_error("live capture tick", exc)

    # -- hooks (on torch's path: take what must be read now, queue the rest) ----
    def _record_chromium_event(self, event: dict[str, Any]) -> None:
        orig = self.originals.get("torch._dynamo.utils.record_chromium_event_internal")
        try:
            if type(event) is dict and event.get("name") not in ROOTS and self.installed and not _in_bridge.get():
                # a phase (most events): only queued, so nothing it does can call back into the bridge
                if self._holding:
                    self._held.item = None
                self._pending.append((self._process_phase, event, None, get_ident()))
            else:
                self._on_chromium(event)
        except Exception as exc:  # noqa: BLE001 - never into torch's compile
            record_error("chromium event hook", exc)
        if orig is not None:
            orig(event)

    def _log_compilation_event(self, metrics: Any) -> None:
        orig = self.originals.get("torch._dynamo.utils.log_compilation_event")
        self._on_metrics(metrics)
        if orig is not None:
            orig(metrics)

    def _recompilation_reasons(self, *args: Any, **kwargs: Any) -> Any:
        orig: Any = self.originals.get("torch._dynamo.convert_frame.get_and_maybe_log_recompilation_reasons")
        if orig is None:  # uninstalled, but someone wrapped this hook since: torch's own function, untouched
            from torch._dynamo.guards import get_and_maybe_log_recompilation_reasons as orig
        reasons = orig(*args, **kwargs)
        self._on_reasons(reasons)
        return reasons

    def _log_collective_schedule(self, nodes: Any) -> None:
        orig: Any = self.originals.get(INDUCTOR_DEBUG + ".log_collective_schedule")
        if orig is None:  # uninstalled, but someone wrapped this hook since
            from torch._inductor.debug import log_collective_schedule as orig
        self._schedule_tls.ops = None
        try:
            orig(nodes)
        finally:
            self._on_schedule()

    def _dump_collective_schedule(self, schedule: Any) -> None:
        orig: Any = self.originals.get(INDUCTOR_DEBUG + "._dump_collective_schedule")
        if orig is None:
            from torch._inductor.debug import _dump_collective_schedule as orig
        self._schedule_tls.ops = schedule
        orig(schedule)

    def _create_debug_dir(self, folder_name: str) -> str | None:
        # torch's own, kept after uninstall: someone may have wrapped ours since, and still call it
        orig = self.originals.get(INDUCTOR_DEBUG + ".DebugContext.create_debug_dir")
        if orig is not None:
            self._torch_debug_dir = orig
        path: str | None = self._torch_debug_dir.__func__(folder_name)
        if orig is not None:
            self._on_debug_dir(path)
        return path

    @guarded("debug directory hook")
    def _on_debug_dir(self, path: object) -> None:
        if self.installed and isinstance(path, str):
            self._pending.append((self._process_event, DebugDirEvent(current_compile_id(), path), None, None))

    @guarded("collective schedule hook")
    def _on_schedule(self) -> None:
        if not self.installed:
            return
        ops = getattr(self._schedule_tls, "ops", None)
        self._schedule_tls.ops = None
        names = [str(op) for op in ops] if isinstance(ops, list) else []
        ev = GraphScheduleEvent(current_compile_id(), names)
        self._pending.append((self._process_event, ev, None, None))

    @guarded("chromium event hook")
    def _on_chromium(self, event: dict[str, Any]) -> None:
        if not self.installed:
            return  # someone wrapped our hook, so uninstall could not take it out
        if self._holding:
            self._held.item = None  # full capture: this event's trace record, replaced by the event itself
        name = event.get("name") if type(event) is dict else None
        if name in ROOTS:
            ph = event.get("ph")
            if ph == "B":
                origin = self._origin()
                if name == "entire_backward_compile":
                    origin.aot_graph = _aot_graph()
                elif name == "fullgraph_capture":
                    origin.root_kind = compile_kind_of_capture()
                self._pending.append((self._process_chromium, event, origin, _rank()))
                self._reattach()  # torch's set_logs() clears handlers: put ours back
                if self._first_compile:
                    self._run_first_compile()
                return
            if ph == "E":
                hooks = self._root_end.get(name)
                if hooks:  # a feature's (a lazy backward's graph): its events go before the end, into the open compile
                    for fn in list(hooks):
                        try:
                            fn()
                        except Exception as exc:  # noqa: BLE001 - never into torch's compile
                            record_error(f"root end hook {name}", exc)
                self._pending.append((self._process_root_end, event, None, compile_cpu_ns()))
                self._compile_ended()
            else:
                self._pending.append((self._process_chromium, event, None, None))
            return
        # A phase: the thread it ran on tells inductor's parallel kernel builds apart (see torch_otel._assemble.phase_tree)
        self._pending.append((self._process_phase, event, None, get_ident()))

    def queue_events(self, convert: Callable[[], list[Event]]) -> None:
        """An EventTap row's call (on torch's path: queued; turned into events with the rest, off it)."""
        self._pending.append((self._process_events, convert, None, None))

    def _on_export(self, ev: PhaseEvent) -> None:
        """A torch.export call began or ended (the torch.export hook): a root, queued like torch's own."""
        if not self.installed:
            return
        self._pending.append((self._process_event, ev, ev.origin, _rank() if ev.ph == "B" else None))
        if ev.ph == "B":
            self._reattach()
            if self._first_compile:
                self._run_first_compile()
        else:
            self._compile_ended()

    @guarded("compilation metrics hook")
    def _on_metrics(self, metrics: Any) -> None:
        if not self.installed:
            return
        fields = metrics if isinstance(metrics, dict) else getattr(metrics, "__dict__", None)
        if fields is None:
            import dataclasses

            fields = {f.name: getattr(metrics, f.name, None) for f in dataclasses.fields(metrics)}
        fields = dict(fields)
        interrupt = sys.exc_info()[1]
        if not fields.get("fail_type") and isinstance(interrupt, BaseException) and not isinstance(interrupt, Exception):
            # torch records failures from ``except Exception``: a compile cut by Ctrl-C (or SystemExit)
            # would read as a success. It is logged while the interrupt is in flight on this thread.
            fields["fail_type"] = type(interrupt).__name__
            fields["fail_reason"] = f"the compile was interrupted ({type(interrupt).__name__})"
        self._pending.append((self._process_metrics, fields, None, None))
        self._compile_ended()

    @guarded("recompile reasons hook")
    def _on_reasons(self, reasons: Any) -> None:
        if self.installed and isinstance(reasons, list) and reasons:
            ev = RecompileReasonsEvent(current_compile_id(), [str(r) for r in reasons])
            self._pending.append((self._process_event, ev, None, None))

    @guarded("warning hook")
    def _on_warning(self, record: logging.LogRecord) -> None:
        if record.name.endswith("__graph_breaks"):
            return  # graph breaks are their own events
        ev = LogEvent(current_compile_id(), int(record.created * 1e9), record.levelno, record.name, record.getMessage())
        self._pending.append((self._process_event, ev, None, None))

    @guarded("compiled autograd cache-miss handler")
    def _on_compiled_autograd_miss(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.installed and message.startswith("Cache miss due to"):
            ev = RecompileReasonsEvent(None, [message], for_next="compiled_autograd")
            self._pending.append((self._process_event, ev, None, None))

    @guarded("graph break handler")
    def _on_graph_break(self, record: logging.LogRecord) -> None:
        cid, message = current_compile_id(), record.getMessage()
        self._pending.append((self._process_graph_break, cid, message, int(record.created * 1e9)))

    def _direct_trace_structured(self, torch_fn: Callable[..., None]) -> Callable[..., None] | None:
        """Full capture's ``trace_structured``: each record handed over with no logging record while the trace
        handler is the only one (torch_otel._capture.structured_trace)."""
        return direct(torch_fn, self._trace_handler, lambda: self.installed, self._take_trace_record)

    @guarded("torch.__trace handler")
    def _take_trace_record(self, md: dict[str, Any], payload: str | None, event: Any) -> None:
        """A record from :meth:`_direct_trace_structured` (a chromium event as torch's dict), queued as
        :meth:`_on_trace_record` queues one from the handler: inside the bridge (what it does, a forked child's export
        at a compile's end among it, is not captured), and never raising."""
        if event is not None:
            self._queue_record((self._process_chromium_record, md, event, time_ns()), md)
        else:
            self._queue_record((self._process_trace_record, md, payload, time_ns()), md)

    @guarded("torch.__trace handler")
    def _on_trace_record(self, record: logging.LogRecord) -> None:
        md = getattr(record, "metadata", None)
        if not isinstance(md, dict):
            return
        payload = getattr(record, "payload", None)
        payload = payload if isinstance(payload, str) else None
        self._queue_record((self._process_trace_record, md, payload, int(record.created * 1e9)), md)

    def _queue_record(self, item: _Item, md: dict[str, Any]) -> None:
        """A trace record's item queued; a chromium event's held until it is known whether torch's chromium hook
        follows it (a phase's begin or end, which the hook delivers) or not (an instant)."""
        held = getattr(self._held, "item", None)
        if held is not None:  # no chromium hook came after it: an instant event
            self._held.item = None
            self._pending.append(held)
        if "chromium_event" in md:
            self._holding = True
            self._held.item = item
            return
        self._pending.append(item)
        if "compilation_metrics" in md:
            self._compile_ended()
