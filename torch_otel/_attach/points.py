"""The attach table's row types: one per way live capture attaches to torch, each with its own attach and detach.

As tlparse's ``default_parsers()`` lists its parsers, the attach table (torch_otel._capture.attach_table: live
capture's own rows, and each feature's, torch_otel._features) lists where live capture attaches to torch. Each row
says what it gives the user, which torch releases have it, which capture levels use it, and how it is attached and
detached. A new torch release that moves or renames an attach point is a new row (with its own ``releases``), not a
new ``if`` inside the capture.

A row names the hook it attaches through a function of what it attaches to (``lambda cap: cap._gb_handler``): the
row types are generic in that target (:class:`AttachTarget`, or live capture's own protocol for its rows), so mypy
checks every hook a row names, and a misspelt one fails the type check and ``tests/fast``, never a user's run.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .._core.compile_id import current_compile_id
from .._core.errors import by_own_level, record_error, warn_once

__all__ = ["ALL_LEVELS", "AttachTarget", "CountersRead", "EventTap", "FunctionHook", "Hookable", "LoggerHook",
           "MethodHook", "ObjectHook", "RecordFields", "Source", "StaticMethodHook", "StructuredTraceHook"]  # fmt: skip


ALL_LEVELS = frozenset({"default", "full"})


class Hookable(Protocol):
    """A hook object of the capture's with its own attach and detach (export, the mega-cache, the warnings link)."""

    def hook(self) -> None: ...

    def unhook(self) -> None: ...


class AttachTarget(Protocol):
    """What every row attaches to and reads: the live capture (torch_otel._capture.live_capture.LiveCapture)."""

    level: str
    warnings: bool
    installed: bool
    originals: dict[str, Any]  # torch's functions the rows replaced, by "module.name" (put back on detach)
    attach_lock: threading.Lock

    def logger_state(self, name: str, lg: logging.Logger) -> Any: ...

    def restore_logger(self, name: str, lg: logging.Logger) -> None: ...

    def queue_events(self, convert: Callable[[], list[Any]]) -> None:
        """An EventTap row's call: ``convert`` runs off torch's path, with the queue, and its events are processed."""

    def queue_event(self, event: Any) -> None:
        """An event made on torch's path (a feature's hook), processed off it with the queue."""

    def state(self, name: str) -> Any:
        """The live state of the feature ``name`` in the capture's pipeline (None: it has none)."""

    def at_root_end(self, root: str, fn: Callable[[], None]) -> None:
        """Call ``fn`` on torch's thread as a compile's root phase ``root`` ends, before its end is queued."""

    def forget_root_end(self, root: str, fn: Callable[[], None]) -> None: ...

    @property
    def tapped(self) -> set[type]: ...


C = TypeVar("C", bound=AttachTarget)

# A row's reference to one of its target's hooks
HookRef = Callable[[C], Any]


@dataclass(frozen=True)
class Source(Generic[C]):
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
    only_if: Callable[[C], bool] | None = None  # a setting of the capture that it needs

    def wanted(self, cap: C) -> bool:
        return cap.level in self.levels and (self.only_if is None or self.only_if(cap))

    def present(self) -> bool:
        """Whether this torch has the attach point (imports ``module``: for the matrix and ``torch-otel doctor``)."""
        try:
            return self._lookup(importlib.import_module(self.module)) is not None
        except Exception:  # noqa: BLE001 - a module torch no longer has
            return False

    def _lookup(self, mod: Any) -> Any:
        return mod

    def attach(self, cap: C) -> bool:
        raise NotImplementedError

    def detach(self, cap: C) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class FunctionHook(Source[C]):
    """Module functions replaced by the capture's hooks (``attrs``: ``(torch's name, the capture's hook)``).

    torch imports some of them by name into the module that calls them: the row names that module. On
    detach, torch's function goes back unless someone wrapped the capture's since.
    """

    attrs: tuple[tuple[str, HookRef[C]], ...] = ()

    def _lookup(self, mod: Any) -> Any:
        found = [getattr(mod, a, None) for a, _ in self.attrs]
        return found if all(callable(f) for f in found) else None

    def attach(self, cap: C) -> bool:
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

    def detach(self, cap: C) -> None:
        mod = sys.modules.get(self.module)
        for attr, hook in self.attrs:
            orig = cap.originals.pop(f"{self.module}.{attr}", None)
            if mod is not None and orig is not None and getattr(mod, attr, None) == hook(cap):
                setattr(mod, attr, orig)


@dataclass(frozen=True)
class StaticMethodHook(Source[C]):
    """A class's staticmethod replaced by one of the capture's (``owner.attr`` -> ``hook``)."""

    owner: str = ""
    attr: str = ""
    hook: HookRef[C] = lambda cap: None

    def _lookup(self, mod: Any) -> Any:
        cls = getattr(mod, self.owner, None)
        found = cls.__dict__.get(self.attr) if isinstance(cls, type) else None
        return (cls, found) if isinstance(found, staticmethod) else None

    def attach(self, cap: C) -> bool:
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

    def detach(self, cap: C) -> None:
        orig = cap.originals.pop(f"{self.module}.{self.owner}.{self.attr}", None)
        found = self._lookup(sys.modules.get(self.module))
        if orig is not None and found is not None and found[1].__func__ == self.hook(cap):
            setattr(found[0], self.attr, orig)


def _mark(ours: Any, row: Any) -> None:
    """``ours`` marked as the function ``row`` put in torch's place, and as itself: ``functools.wraps`` copies a
    function's attributes onto its wrapper, so a wrapper of ours carries the row's mark too, but not its own reference."""
    ours.__torch_otel_hook__ = row
    ours.__torch_otel_self__ = weakref.ref(ours)


def _is_ours(held: Any, row: Any) -> bool:
    """Whether ``held`` is the function ``row`` put in torch's place (not a wrapper of it someone made since)."""
    if getattr(held, "__torch_otel_hook__", None) is not row:
        return False
    me = getattr(held, "__torch_otel_self__", None)
    return me is not None and me() is held


@dataclass(frozen=True)
class MethodHook(Source[C]):
    """A class's method (``owner.attr``) replaced by one the capture makes around torch's: ``hook(cap)`` is given
    torch's function and returns the method. Detach puts torch's back unless someone replaced the capture's since."""

    owner: str = ""
    attr: str = ""
    hook: HookRef[C] = lambda cap: None
    # called once attached and once detached (the graph counters: their wrappers' code is kept from dynamo, and
    # torch's callables go back on detach)
    attached: Callable[[C], None] | None = None
    detached: Callable[[C], None] | None = None

    def _lookup(self, mod: Any) -> Any:
        cls = getattr(mod, self.owner, None)
        found = cls.__dict__.get(self.attr) if isinstance(cls, type) else None
        return (cls, found) if callable(found) else None

    def _key(self) -> str:
        return f"{self.module}.{self.owner}.{self.attr}"

    def attach(self, cap: C) -> bool:
        found = self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module))
        if found is None:
            return False
        cls, torch_fn = found
        if _is_ours(torch_fn, self):
            return True
        if self.attached is not None:
            self.attached(cap)  # raises: nothing of torch's is replaced
        ours = self.hook(cap)(torch_fn)
        _mark(ours, self)
        cap.originals[self._key()] = torch_fn
        setattr(cls, self.attr, ours)
        return True

    def detach(self, cap: C) -> None:
        torch_fn = cap.originals.pop(self._key(), None)
        found = self._lookup(sys.modules.get(self.module))
        if torch_fn is not None and found is not None and _is_ours(found[1], self):
            setattr(found[0], self.attr, torch_fn)
        if torch_fn is not None and self.detached is not None:
            self.detached(cap)


_KNOWN_ARTIFACTS: set[str] = set()  # TORCH_LOGS artifacts found in torch's log registry


@dataclass(frozen=True)
class LoggerHook(Source[C]):
    """A handler of the capture's on torch's loggers.

    ``lower``: the loggers' level is lowered so torch creates the records, with ``propagate=False`` when
    nobody asked for them (``quiet``), so torch prints nothing new; what the capture changed is put back on
    detach, unless someone changed it since.
    """

    loggers: tuple[str, ...] = ()
    handler: HookRef[C] = lambda cap: None  # the capture's handler
    lower: bool = False
    quiet: bool = False
    registry_name: str | None = None  # the TORCH_LOGS artifact that must exist in torch's log registry

    def _lookup(self, mod: Any) -> Any:
        if self.registry_name is None or self.registry_name in _KNOWN_ARTIFACTS:
            return True
        try:
            from torch._logging._internal import log_registry

            names = getattr(log_registry, "artifact_names", None) or set()
            if self.registry_name not in names:
                return None
            _KNOWN_ARTIFACTS.add(self.registry_name)  # torch never takes one out: found once, not looked up again
            return True
        except Exception:  # noqa: BLE001
            return None

    def attach(self, cap: C) -> bool:
        if self._lookup(None) is None:
            return False
        handler = self.handler(cap)
        known = logging.Logger.manager.loggerDict
        for name in self.loggers:
            lg = known.get(name)  # as each compile starts: the logger read without logging's lock where it exists
            if not isinstance(lg, logging.Logger):
                lg = logging.getLogger(name)
            open_ = not self.lower or lg.isEnabledFor(logging.DEBUG)  # False when disabled, or under logging.disable
            if handler in lg.handlers and open_ and not lg.disabled:
                continue  # as it was left (the check that runs as each compile starts: a few lookups)
            # whether it is enabled by its level (someone asked for its records, or the capture did), whatever holds it
            enabled = not self.lower or lg.getEffectiveLevel() <= logging.DEBUG
            state = cap.logger_state(name, lg)
            if handler not in lg.handlers:
                lg.addHandler(handler)
            if not enabled:
                lg.setLevel(logging.DEBUG)
                if self.quiet:
                    lg.propagate = False  # nobody asked for these records: they must not reach torch's stderr handler
                state.changed = True
            state.set_level, state.set_propagate = lg.level, lg.propagate
            if lg.disabled or (self.lower and not lg.isEnabledFor(logging.DEBUG)):
                self._unblock(lg, handler, state)
        return True

    def _unblock(self, lg: logging.Logger, handler: Any, state: Any) -> None:
        """A logger that drops the capture's records before its handlers see them, whatever its level:
        ``logging.config.dictConfig`` disables every logger that exists when it runs (unless given
        ``disable_existing_loggers=False``), and ``logging.disable(level)`` holds every logger at that level and below.

        Where the capture's handler is the logger's only reader (no other handler, no propagation), letting the records
        through changes nothing anyone sees but the capture's records: ``disabled`` is turned off, and the logger is
        enabled by its own level whatever ``logging.disable`` says (as torch's 2.13 does for ``torch.__trace``); both
        put back on detach. Else one line says what the capture does not see, and the fix. torch's
        ``LazyTraceHandler`` with no directory (``TORCH_TRACE`` unset) writes nothing: not a reader."""
        others = [h for h in lg.handlers if h is not handler and not _writes_nothing(h)]
        if not others and not lg.propagate:
            if lg.disabled:
                lg.disabled = False
                state.reenabled = True
            if self.lower and not lg.isEnabledFor(logging.DEBUG) and "isEnabledFor" not in vars(lg):
                lg.isEnabledFor = state.by_level = by_own_level(lg)  # type: ignore[method-assign,assignment]
            return
        if lg.disabled:
            why = "is disabled (logging.config.dictConfig disables every logger that exists when it runs)"
            fix = "pass disable_existing_loggers=False to dictConfig"
        else:
            why = f"is held by logging.disable({logging.getLevelName(lg.manager.disable)})"
            fix = "quiet the loggers you meant with their own setLevel, and call logging.disable(logging.NOTSET)"
        warn_once(  # one line per row, naming its first such logger
            f"blocked logger:{self.name}", "torch's logger %s %s: the bridge does not see %s; %s", lg.name, why, self.gives, fix
        )

    def detach(self, cap: C) -> None:
        handler = self.handler(cap)
        for name in self.loggers:
            lg = logging.getLogger(name)
            if handler in lg.handlers:
                lg.removeHandler(handler)
            cap.restore_logger(name, lg)


@dataclass(frozen=True)
class StructuredTraceHook(LoggerHook[C]):
    """The handler on ``torch.__trace`` (a :class:`LoggerHook`), and the capture's ``trace_structured`` in place of
    torch's (``function``: ``module.attr``), so a record reaches the handler's capture without a logging record while
    that handler is the only one (torch_otel._capture.structured_trace).

    torch's function is replaced in every ``torch`` module imported that holds it by name: its own, those that
    re-export it (``torch._logging``: later imports by name take the capture's from there), and those that imported
    it. ``direct(cap)`` is given torch's function and returns the capture's, or None (this torch's function is not the
    one the capture knows: the handler alone then takes the records). Detach puts torch's back wherever the capture's
    is found.
    """

    function: str = ""
    direct: HookRef[C] = lambda cap: None

    def attach(self, cap: C) -> bool:
        if not super().attach(cap):
            return False
        module, _, attr = self.function.rpartition(".")
        current = getattr(sys.modules.get(module), attr, None)
        if current is None or _is_ours(current, self):
            return True  # as each compile starts: attached already (a few lookups)
        ours = self.direct(cap)(current)
        if ours is None:
            return True
        _mark(ours, self)
        cap.originals[self.function] = current
        _replace_in_torch(attr, lambda held: held is current, ours)
        return True

    def detach(self, cap: C) -> None:
        super().detach(cap)
        torch_fn = cap.originals.pop(self.function, None)
        if torch_fn is not None:
            attr = self.function.rpartition(".")[2]
            _replace_in_torch(attr, lambda held: _is_ours(held, self), torch_fn)


def _writes_nothing(h: logging.Handler) -> bool:
    """torch's ``LazyTraceHandler`` before its first record, with no directory: ``TORCH_TRACE`` unset (outside Meta's
    cluster, where it picks one, it then writes nothing and takes itself off)."""
    return type(h).__name__ == "LazyTraceHandler" and getattr(h, "root_dir", 0) is None and getattr(h, "stream", 0) is None


def _replace_in_torch(attr: str, replaced: Callable[[Any], bool], value: Any) -> None:
    """``attr`` set to ``value`` in every torch module imported whose own ``attr`` is one ``replaced`` says."""
    for name, m in list(sys.modules.items()):
        if name == "torch" or name.startswith("torch."):
            found = getattr(m, "__dict__", None)
            if type(found) is dict and replaced(found.get(attr)):
                setattr(m, attr, value)


@dataclass(frozen=True)
class ObjectHook(Source[C]):
    """A hook object of the capture's with its own ``hook()`` and ``unhook()`` (export, the mega-cache)."""

    obj: HookRef[C] = lambda cap: None  # the capture's hook object
    probe: tuple[str, ...] = ()  # names the module must have

    def _lookup(self, mod: Any) -> Any:
        return (
            mod if all(callable(getattr(mod, n, None)) or isinstance(getattr(mod, n, None), type) for n in self.probe) else None
        )

    def attach(self, cap: C) -> bool:
        self.obj(cap).hook()  # waits for the module's import; a name it lacks there is reported then
        return True

    def detach(self, cap: C) -> None:
        self.obj(cap).unhook()


@dataclass(frozen=True)
class CountersRead(Source[C]):
    """torch's counters, read at scrape time: nothing to attach, only their presence to check."""

    def _lookup(self, mod: Any) -> Any:
        return getattr(mod, "counters", None)

    def attach(self, cap: C) -> bool:
        return self._lookup(importlib.import_module(self.module)) is not None

    def detach(self, cap: C) -> None:
        return None


# A tap's conversion: torch's call arguments and the compile id in force -> the typed events they carry
TapEvents = Callable[[tuple[Any, ...], dict[str, Any], Any], list[Any]]


@dataclass(frozen=True)
class EventTap(Source[C]):
    """A torch function (``owner.attr``, or the module's ``attr``) wrapped to hand its arguments, as typed events,
    to the capture: torch's own function runs first and unchanged, then the call is queued like every hook's,
    and ``to_events`` turns it into events off torch's path (:mod:`torch_otel._parse` holds the conversions,
    shared with replay).

    A new kind of event torch hands a function is a row of this class: nothing in the capture changes. The
    event types a tap delivers (``delivers``) are left out of full capture's ``torch.__trace`` records, which carry
    the same facts once more. Detach puts torch's function back unless someone wrapped the tap since.
    """

    attr: str = ""
    owner: str | None = None  # a class of the module whose method (or staticmethod) is tapped
    to_events: TapEvents = lambda args, kwargs, cid: []
    delivers: tuple[type, ...] = ()

    def _lookup(self, mod: Any) -> Any:
        holder = getattr(mod, self.owner, None) if self.owner else mod
        if holder is None:
            return None
        raw = holder.__dict__.get(self.attr) if isinstance(holder, type) else getattr(holder, self.attr, None)
        return (holder, raw) if callable(raw) or isinstance(raw, staticmethod) else None

    def _key(self) -> str:
        return f"{self.module}.{self.owner + '.' if self.owner else ''}{self.attr}"

    def attach(self, cap: C) -> bool:
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
        cap.tapped.update(self.delivers)
        return True

    def detach(self, cap: C) -> None:
        raw = cap.originals.pop(self._key(), None)
        found = self._lookup(sys.modules.get(self.module))
        if raw is None or found is None:
            return
        holder, current = found
        current_fn = current.__func__ if isinstance(current, staticmethod) else current
        if getattr(current_fn, "__torch_otel_tap__", None) is self:
            setattr(holder, self.attr, raw)
        cap.tapped.difference_update(self.delivers)


@dataclass(frozen=True)
class RecordFields(Source[C]):
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

    def attach(self, cap: C) -> bool:
        return self._lookup(importlib.import_module(self.module)) is not None

    def detach(self, cap: C) -> None:
        return None
