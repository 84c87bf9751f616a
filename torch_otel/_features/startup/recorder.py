"""The start-up's recorder, live: the process's start, hooks that time what it does until its first step, the end.

Installed at the bridge's first code (``torch-otel run``'s interpreter start, ``opentelemetry-instrument``, or ``import
torch_otel.auto``), it reads the process's start from the kernel (:mod:`.process`), hooks importlib's
``_find_and_load`` (every import that loads a module goes through it, ``importlib.import_module`` too; an import of a
loaded module never gets there), and, as each module it waits for finishes loading, the functions of it that
torch_otel._features.startup.targets names. Each call of those on the thread that installed it is an interval of its
phase, until the end (``TORCH_OTEL_STARTUP_END``, :data:`END_MODES`): the first optimizer step's return, the first
outermost forward's return, :func:`ready`, or the main thread's last line (``exit``).

How it stays out of the program's way:

- a Python function is hooked by swapping its code for code of the same signature (:func:`hook_code`), never the
  function object: a module that imported it by name, dynamo's tables and torch.fx hold the same object. A function
  written in C or Rust is replaced as an attribute (``attr``), and is torch's own while a module is being imported;
- while dynamo compiles (its compile callbacks) every function has torch's code: dynamo never traces a hook;
- ``Module.__call__`` has the hook's code only between outermost calls: the modules a forward calls run torch's code;
- the import hook is compiled under importlib's own file name: a failed import's traceback is Python's, to the frame;
- at the end every hook goes but the one that times the second step, which goes after it (code someone else swapped
  in meanwhile is left in place); a child forked before the end takes its hooks out and reports no start-up;
- nothing raises into the program: the recorder's own failures are counted (torch_otel._core.errors).

The module imports only what Python loads at start-up: it runs in every process ``torch-otel run`` starts.
"""

from __future__ import annotations

import _frozen_importlib as _importlib  # Python's own importlib, always loaded
import _thread
import os
import sys
import time

from .process import clock_pair, process_start, waited_children
from .targets import AFTER_END, HOW, TARGETS, apply, busy, error, own_codes

TYPE_CHECKING = False  # typing is not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import CodeType, ModuleType
    from typing import Any

    from .attribution import CompileSpan, Startup, Timeline

__all__ = ["END_MODES", "Recorder", "current", "end_mode", "install", "ready", "uninstall"]

END_MODES = ("auto", "step", "forward", "ready")  # TORCH_OTEL_STARTUP_END
MAX_INTERVALS = 50_000  # past it, intervals are counted, not kept: their time is unattributed
LIVE = ("recording", "second")
HOOK = "__torch_otel_startup_hook__"  # the name the swapped code calls, put in the hooked function's globals

_bootstrap: Any = _importlib  # its _find_and_load is not in typeshed
_clock = time.perf_counter_ns
_ident = _thread.get_ident
_rec: Recorder | None = None
_fork_registered = False


def current() -> Recorder | None:
    """The process's recorder (its start-up may have ended), or None."""
    return _rec


def ready() -> None:
    """The program is ready (a server that takes requests): ends the start-up where ``TORCH_OTEL_STARTUP_END`` is
    ``ready`` or ``auto``."""
    r = _rec
    if r is not None and r.state == "recording" and r.mode in ("ready", "auto"):
        r.end("ready", _clock())


def end_mode(value: str | None) -> tuple[str, str | None]:
    """``TORCH_OTEL_STARTUP_END``'s mode, and the line that names a bad value (then ``auto``)."""
    v = (value or "").strip().lower()
    if not v or v in END_MODES:
        return v or "auto", None
    return "auto", f"TORCH_OTEL_STARTUP_END={value!r} is not one of {', '.join(END_MODES)}: the start-up ends as 'auto' says"


def install(
    *,
    activation: str = "api",
    first_code_ns: int | None = None,
    env: Mapping[str, str] | None = None,
    start: tuple[int, int, str] | None = None,
) -> Recorder | None:
    """Start recording this process's start-up (once; None when ``TORCH_OTEL_STARTUP=off`` or already installed).

    ``activation``: how the bridge came in (``run``, ``instrument``, ``auto``, ``api``): the interpreter phase covers
    the interpreter's start-up for the first two, everything before the bridge's import otherwise.
    ``first_code_ns``: when the bridge's first code ran (:func:`time.perf_counter_ns`); default now."""
    global _rec, _fork_registered
    env = os.environ if env is None else env
    on = env.get("TORCH_OTEL_STARTUP", "").strip().lower()
    if _rec is not None or on in ("off", "0", "false", "no"):
        return None
    mode, problem = end_mode(env.get("TORCH_OTEL_STARTUP_END"))
    problems = [problem] if problem else []
    if on not in ("", "on", "1", "true", "yes"):  # each bad setting its own line
        problems.append(f"TORCH_OTEL_STARTUP={env.get('TORCH_OTEL_STARTUP')!r} is not on or off: the start-up is recorded (on)")
    token = busy.set(True)
    try:
        r = _rec = Recorder(mode, activation, first_code_ns, start, env)
        for p in problems:
            r.notes.append(p)
            _warn(p)
        r.attach()
        if not _fork_registered:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _at_exit(_exiting)
            _fork_registered = True
        r.add(r.installing, _clock(), "bridge", "install")
        return r
    except Exception as exc:  # noqa: BLE001 - never into the user's start-up
        error("start-up install", exc)
        uninstall()
        return None
    finally:
        busy.reset(token)


def uninstall() -> None:
    """Take the recorder out altogether (tests; a process that turns the start-up off)."""
    global _rec
    r, _rec = _rec, None
    if r is not None:
        r.finish("off")


def _warn(line: str) -> None:
    from ..._core.errors import warn_once

    warn_once(f"startup:{line}", "%s", line)


def _at_exit(fn: Callable[[], None]) -> None:
    """``fn`` as the main thread's code ends: before the interpreter joins its threads and runs its ``atexit``
    handlers (whose time is not the start-up's); else with the first of those handlers."""
    import threading

    try:
        threading._register_atexit(fn)  # type: ignore[attr-defined]  # what concurrent.futures uses
    except (AttributeError, RuntimeError):
        import atexit

        atexit.register(fn)


def _exiting() -> None:
    r = _rec
    if r is not None and r.state == "recording":
        r.end("exit", _clock())
    elif r is not None and r.state == "second":  # it ended at its first step or forward; no second came: done
        r.finish()


def _after_fork_in_child() -> None:
    r = _rec
    if r is not None and r.state in LIVE:
        r.finish("forked")


class _Swap:
    """A Python function's code swapped for a hook's, the function object kept: whoever holds it (a module that
    imported it by name, dynamo's tables, torch.fx) calls the hook; torch's code is back when swapped out."""

    __slots__ = ("fn", "group", "new", "on", "orig")

    def __init__(self, fn: Any, new: CodeType, group: str) -> None:
        self.fn, self.new, self.group, self.on, self.orig = fn, new, group, False, fn.__code__

    def put(self, on: bool) -> None:
        if self.fn.__code__ is (self.orig if on else self.new):  # someone else's code in between stays
            self.fn.__code__ = self.new if on else self.orig
        self.on = on


class _Attr:
    """An attribute replaced: a function written in C or Rust, whose code cannot be swapped."""

    __slots__ = ("group", "name", "new", "on", "orig", "owner")

    def __init__(self, owner: Any, name: str, new: Any, group: str) -> None:
        self.owner, self.name, self.new, self.group, self.on = owner, name, new, group, False
        self.orig = owner.__dict__[name]

    def put(self, on: bool) -> None:
        if self.owner.__dict__.get(self.name) is (self.orig if on else self.new):
            setattr(self.owner, self.name, self.new if on else self.orig)
        self.on = on


# When each group of hooks is in: the recorder's state, and whether dynamo compiles, a module is being imported, an
# outermost module call runs (``call``: Module.__call__; ``step``: the optimizer's step end; ``live``: torch._dynamo
# .reset, which must put the compile callbacks back while any hook is in; ``attr``: attributes in modules).
GROUPS = ("code", "attr", "call", "step", "live")


class Recorder:
    """One process's start-up as it runs: intervals timed on the installing thread, the end, the compiles."""

    def __init__(
        self, mode: str, activation: str, first_code_ns: int | None, start: tuple[int, int, str] | None, env: Mapping[str, str]
    ) -> None:
        self.installing = _clock()
        self.main = _ident()
        self.mode = mode
        self.start_ns, self.started_unix_ns, self.source = start or process_start()
        self.clock_pairs = [clock_pair()]
        self.intervals: list[tuple[int, int, str, str]] = []
        self.stack: list[list[Any]] = []  # open intervals: [start, phase, label]
        self.compiles: list[CompileSpan] = []
        self.notes: list[str] = []
        self.state = "recording"  # then second (timing the second step), done, forked or off
        self.end_ns: int | None = None
        self.end_name: str | None = None
        self.second_ns: int | None = None
        self.dropped = 0
        self.hooks: dict[str, list[_Swap | _Attr]] = {g: [] for g in GROUPS}
        self.on = dict.fromkeys(GROUPS, False)
        self.swapped: set[int] = set()
        self.applied: set[str] = set()
        self.callbacks: tuple[Any, Any, Any] | None = None
        self.hook_codes: list[CodeType] = []  # the code swapped into each hooked function
        self.skip_code: Callable[[CodeType], None] | None = None  # dynamo's, once loaded (targets.skip_own_frames)
        self.importing = self.compiling = self.outer = self.forwards = self.loads = 0
        self.import_tops: list[str] = []
        self.opened: dict[int, list[Any]] = {}  # open ``with`` blocks (cudagraph capture), by their object's id
        self.step_from: int | None = None  # where the optimizer's part of the first step begins: the last backward's end
        self.rank = _int(env.get("RANK"))
        first = first_code_ns if first_code_ns is not None else self.installing
        self.interpreter = {"run": "interpreter", "instrument": "interpreter", "auto": "before import torch_otel.auto"}.get(
            activation, "before the bridge"
        )
        before = sorted({k.partition(".")[0] for k in list(sys.modules)} & {"torch", "transformers", "safetensors", "numpy"})
        if before and activation not in ("run", "instrument"):
            self.notes.append(f"imported before the bridge (in '{self.interpreter}'): {', '.join(before)}")
        waited, cpu = waited_children() if self.source == "proc" else (False, 0.0)
        if waited:
            whose = (
                "a shell's, before it exec'd Python"
                if activation in ("run", "instrument")
                else "a shell's before it exec'd Python, or the program's own"
            )
            used = f" ({cpu:.1f} s of their CPU)" if cpu >= 0.1 else ""
            self.notes.append(
                f"'{self.interpreter}' includes programs this process ran first{used}: {whose}; to time Python alone, "
                "start it as the shell's child, not by exec (bash -c 'a; b' execs b)"
            )
        self.add(self.start_ns, max(self.start_ns, first), "interpreter", activation)
        if first < self.installing:
            self.add(first, self.installing, "bridge", "import")

    # -- recording ---------------------------------------------------------------------------------------------------

    def add(self, start: int, end: int, phase: str, label: str) -> None:
        if self.state != "recording":
            return
        if len(self.intervals) >= MAX_INTERVALS:
            self.dropped += 1
            return
        self.intervals.append((start, end, phase, label))

    def push(self, start: int, phase: str, label: str) -> list[Any]:
        entry = [start, phase, label]
        self.stack.append(entry)
        return entry

    def pop(self, entry: list[Any], end: int) -> None:
        stack = self.stack
        if stack and stack[-1] is entry:
            stack.pop()
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] is entry:
                    del stack[i]
                    break
        self.add(entry[0], end, entry[1], entry[2])

    def bridge(self, start: int, end: int, label: str) -> None:
        """The bridge's own set-up (arming when torch compiles first): its phase."""
        self.add(start, end, "bridge", label)

    def add_compile(self, span: CompileSpan) -> None:
        """A compile the bridge recorded (any thread, in any order: records come as the bridge finishes them). One that
        began after the end is not the start-up's and is not kept."""
        if self.state in ("forked", "off") or len(self.compiles) >= MAX_INTERVALS:
            return
        if self.end_ns is not None and span.start_unix_ns > self.clock_pairs[-1][1]:
            return
        self.compiles.append(span)

    # -- the end -----------------------------------------------------------------------------------------------------

    def end(self, name: str, t: int) -> None:
        """The start-up ends at ``t``: open intervals close there; every hook goes but the second step's."""
        if self.state != "recording":
            return
        self._close(name, t)
        self.state = "second"
        if name in ("step", "forward"):
            self.sync()
        else:
            self.finish()

    def _close(self, name: str, t: int) -> None:
        for start, phase, label in self.stack:
            self.add(start, t, phase, label)
        self.stack.clear()
        self.end_ns, self.end_name = t, name
        self.clock_pairs.append(clock_pair())

    def finish(self, state: str = "done") -> None:
        """Stop, and take every hook out; the end is now (``exit``) if none came."""
        if self.state == "recording" and state == "done":
            self._close("exit", _clock())
        if self.state not in LIVE:
            return
        self.state = state
        self.stack.clear()
        for group in reversed(GROUPS):
            for h in reversed(self.hooks[group]):
                h.put(False)
        self.on = dict.fromkeys(GROUPS, False)
        for h in self.hooks["code"] + self.hooks["call"] + self.hooks["step"] + self.hooks["live"]:
            if isinstance(h, _Swap):
                h.fn.__globals__.pop(HOOK, None)
        if self.callbacks is not None:
            handler, start, end = self.callbacks
            for cbs, cb in ((handler.start_callbacks, start), (handler.end_callbacks, end)):
                if cb in cbs:
                    cbs.remove(cb)
        if _bootstrap._find_and_load is _FIND_AND_LOAD:
            _bootstrap._find_and_load = _ORIG_FIND_AND_LOAD

    def timeline(self) -> Timeline:
        """What was recorded, for :func:`torch_otel._features.startup.attribution.build` (the end is now, named ``exit``, if none
        came yet)."""
        end_ns = self.end_ns if self.end_ns is not None else _clock()  # before the import below: it is not the start-up's
        now_pair = clock_pair()
        from .attribution import Timeline

        notes = list(self.notes)
        if self.dropped:
            notes.append(f"{self.dropped} intervals past {MAX_INTERVALS} were not kept: their time is unattributed")
        pairs = [*self.clock_pairs, now_pair] if self.end_ns is None else self.clock_pairs
        return Timeline(
            self.start_ns,
            end_ns,
            self.end_name or "exit",
            self.started_unix_ns,
            self.source,
            tuple(self.intervals),
            tuple(self.compiles),
            tuple(pairs),
            self.interpreter,
            self.second_ns,
            self.rank,
            None,
            tuple(notes),
        )

    def codes(self) -> list[CodeType]:
        """Every code object whose frames the recorder puts on a call's path: its modules' functions, and the hooks."""
        from . import targets

        return [*own_codes((sys.modules[__name__], targets)), *self.hook_codes]

    def startup(self) -> Startup:
        from .attribution import build

        return build(self.timeline())

    # -- which hooks are in ------------------------------------------------------------------------------------------

    def sync(self) -> None:
        """Put each group of hooks in or out as the recorder's state, compiles, imports and outer calls say."""
        rec = self.state == "recording" and not self.compiling
        second = self.state == "second" and not self.compiling
        self._put("code", rec)
        self._put("attr", rec and not self.importing)
        self._put("call", (rec or (second and self.end_name == "forward")) and not self.outer)
        self._put("step", rec or (second and self.end_name == "step"))
        self._put("live", self.state in LIVE)

    def _put(self, group: str, on: bool) -> None:
        if self.on[group] != on:
            self.on[group] = on
            for h in self.hooks[group]:
                h.put(on)

    def _hook(self, h: _Swap | _Attr) -> None:
        self.hooks[h.group].append(h)
        if self.on[h.group]:
            h.put(True)

    def swap(self, fn: Any, phase: str, label: str, how: str = "timed", group: str = "code") -> None:
        """Hook a Python function by its code: calls go to :func:`_dispatch` (``how``), which calls torch's code."""
        fn = getattr(fn, "__func__", fn)  # a classmethod's function
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in self.swapped or code.co_flags & 0x3A0:  # none, done, a generator or coroutine
            return
        new = hook_code(code, fn.__defaults__, len(_HOOKS))
        if new is None:
            return
        import types

        copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__kwdefaults__ = fn.__kwdefaults__
        _HOOKS.append((copy, phase, label, how))
        fn.__globals__[HOOK] = _dispatch
        self.swapped.add(id(fn))
        self.hook_codes.append(new)
        if self.skip_code is not None:  # dynamo is loaded: it never compiles a hook's frame
            self.skip_code(new)
        self._hook(_Swap(fn, new, group))

    def replace(self, owner: Any, name: str, new: Any, group: str = "attr") -> None:
        if name in owner.__dict__:
            self._hook(_Attr(owner, name, new, group))

    def attach(self) -> None:
        """The import hook, then each target module's hooks (now for those loaded, the others as they load)."""
        _bootstrap._find_and_load = _FIND_AND_LOAD
        for name in sorted(TARGETS):
            mod = sys.modules.get(name)
            if mod is not None:
                self.loaded(name, mod)
        self.sync()

    def loaded(self, name: str, mod: ModuleType) -> None:
        if name in self.applied or getattr(getattr(mod, "__spec__", None), "_initializing", False):
            return  # done, or still executing (an import from inside it): when its own import returns
        self.applied.add(name)
        try:
            apply(self, name, mod)
        except Exception as exc:  # noqa: BLE001 - a release without the point: the phase is not seen there
            error(f"start-up hooks on {name}", exc)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


# -- the code a hooked function runs ---------------------------------------------------------------------------------

# (torch's code as a function of its own, phase, label, how): by the key the swapped code passes
_HOOKS: list[tuple[Any, str, str, str]] = []


def hook_code(code: CodeType, defaults: tuple[Any, ...] | None, key: int) -> CodeType | None:
    """Code with ``code``'s signature (its parameters, their kinds, its free variables) that passes its arguments
    to ``__torch_otel_startup_hook__(key, args, kwargs)``."""
    n, k, flags = code.co_argcount, code.co_kwonlyargcount, code.co_flags
    names = code.co_varnames
    pos, kwonly = names[:n], names[n : n + k]
    star = names[n + k] if flags & 0x04 else None
    starstar = names[n + k + (1 if star else 0)] if flags & 0x08 else None
    first_default = n - len(defaults or ())
    params = []
    for i, p in enumerate(pos):
        params.append(p + ("=None" if i >= first_default else ""))
        if i + 1 == code.co_posonlyargcount:
            params.append("/")
    params += [f"*{star}"] if star else (["*"] if kwonly else [])
    params += [f"{p}=None" for p in kwonly] + ([f"**{starstar}"] if starstar else [])
    args = "(" + "".join(f"{p}, " for p in pos) + (f"*{star}, " if star else "") + ")"
    kwargs = "{" + ", ".join([f"{p!r}: {p}" for p in kwonly] + ([f"**{starstar}"] if starstar else [])) + "}"
    free = code.co_freevars
    src = (
        "def _outer():\n"
        + "".join(f"    {v} = None\n" for v in free)
        + f"    def _hooked({', '.join(params)}):\n"
        + (f"        {', '.join(free)},\n" if free else "")
        + f"        return {HOOK}({key}, {args}, {kwargs})\n"
        + "    return _hooked\n"
    )
    ns: dict[str, Any] = {}
    exec(compile(src, "<torch-otel start-up hook>", "exec"), ns)  # noqa: S102 - source made here from names only
    new: CodeType = ns["_outer"]().__code__
    if new.co_freevars != free:
        return None
    new = new.replace(co_name=code.co_name)
    qualname = getattr(code, "co_qualname", None)  # Python 3.11 on
    return new.replace(**{"co_qualname": qualname}) if qualname else new


def _dispatch(key: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a hooked function runs: torch's code, timed as its phase while the start-up records (or what ``how``
    says: torch_otel._features.startup.targets.HOW), on the thread that installed the recorder."""
    copy, phase, label, how = _HOOKS[key]
    r = _rec
    if r is None or r.state not in LIVE or _ident() != r.main or busy.get() or (r.state != "recording" and how not in AFTER_END):
        return copy(*args, **kwargs)
    special = HOW.get(how)
    if special is not None:
        return special(r, copy, phase, label, args, kwargs)
    entry = r.push(_clock(), phase, label)
    try:
        return copy(*args, **kwargs)
    finally:
        r.pop(entry, _clock())


# -- the import hook -------------------------------------------------------------------------------------------------

_ORIG_FIND_AND_LOAD = _bootstrap._find_and_load
_STDLIB: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())


def _import_enter(name: str) -> list[Any] | None:
    r = _rec
    if r is None or r.state != "recording" or _ident() != r.main or busy.get():
        return None
    try:
        mod = sys.modules.get(name)
        if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False):
            return None  # loaded: importlib.import_module asks again, at no cost worth timing
        r.loads += 1
        top = name.partition(".")[0]
        top = "stdlib" if top in _STDLIB else top
        tops = r.import_tops
        entry = r.push(_clock(), "imports", top) if not tops or tops[-1] != top else None
        tops.append(top)
        r.importing += 1
        if r.importing == 1:
            r._put("attr", False)
        return [entry]
    except Exception as exc:  # noqa: BLE001
        error("start-up imports", exc)
        return None


def _import_leave(name: str, token: list[Any]) -> None:
    r = _rec
    if r is None:
        return
    try:
        t = _clock()
        r.importing -= 1
        if r.import_tops:
            r.import_tops.pop()
        if token[0] is not None:
            r.pop(token[0], t)
        if name in TARGETS and r.state in LIVE:
            mod = sys.modules.get(name)
            if mod is not None:
                r.loaded(name, mod)
        if not r.importing:
            r._put("attr", r.state == "recording" and not r.compiling)
    except Exception as exc:  # noqa: BLE001
        error("start-up imports", exc)


_FIND_AND_LOAD_SOURCE = """
def _find_and_load(name, import_):
    token = _enter(name)
    if token is None:
        return _orig(name, import_)
    try:
        return _orig(name, import_)
    finally:
        _leave(name, token)
"""
_ns: dict[str, Any] = {"_orig": _ORIG_FIND_AND_LOAD, "_enter": _import_enter, "_leave": _import_leave}
# importlib's file name: Python strips the frames of that file from an import's traceback, this one's too
exec(compile(_FIND_AND_LOAD_SOURCE, "<frozen importlib._bootstrap>", "exec"), _ns)  # noqa: S102 - our own constant source
_FIND_AND_LOAD = _ns["_find_and_load"]
