"""What the start-up recorder hooks, module by module, and what each hook does when it is called.

:data:`TARGETS`: for each module (torch's, safetensors', transformers'), the functions a start-up spends its time in,
hooked as the module finishes loading (torch_otel._features.startup.recorder applies them):

- distributed init: ``init_process_group``, ``new_group``, ``init_device_mesh``;
- weights: ``torch.load``, safetensors' ``load_file`` and ``load`` and a ``with safe_open(...)`` block,
  ``from_pretrained`` (a model's and an ``AutoModel``'s), ``Module.load_state_dict``, distributed checkpoint loads;
- data: the DataLoader's iterator (its workers' start) and each batch;
- waiting for ranks: ``torch.distributed``'s collectives, and DDP's constructor's check and broadcast of the
  parameters (``_verify_params_across_processes``, ``_broadcast_coalesced``, written in C++);
- CUDA init: ``torch.cuda._lazy_init``; cudagraph capture: ``torch.cuda.graph`` blocks, and inductor's cudagraph
  recording (dynamo's ``CUDAGRAPH_RECORDING`` callbacks);
- the first step: each outermost module call (``Module.__call__``), ``torch.autograd.backward``, and the optimizer's
  step end (``Optimizer._optimizer_step_code``, which every optimizer's step calls as it returns);
- the bridge: its set-up when torch's compiler is first imported (``import_watch._fire``);
- dynamo: its compile callbacks take every hook out while it compiles; ``torch._dynamo.reset()`` (which clears them)
  puts them back; ``fullgraph_capture`` (strict export, AOT compile: dynamo tracing outside its callbacks) takes every
  hook out too.

:data:`HOW`: what a hook does besides timing its call as its phase: an outermost module call (and the forward end), the
step end, the ``with`` blocks, ``reset`` and ``fullgraph_capture``. A release that lacks a point leaves its phase
unseen there, and nothing else.
"""

from __future__ import annotations

import _thread
import sys
import time
from contextvars import ContextVar

TYPE_CHECKING = False  # typing is not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

__all__ = ["HOW", "TARGETS", "busy", "error"]

_clock = time.perf_counter_ns
_ident = _thread.get_ident
busy: ContextVar[bool] = ContextVar("torch_otel_startup_busy", default=False)  # the recorder's own code runs

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
)

# module -> (the function's path in it, phase, label, how, group): Python functions, hooked by their code
SWAPS: dict[str, tuple[tuple[str, str, str, str, str], ...]] = {
    "torch.nn.modules.module": (
        ("Module.__call__", "first_step", "forward", "call", "call"),
        ("Module.load_state_dict", "weights", "load_state_dict", "timed", "code"),
    ),
    "torch.optim.optimizer": (("Optimizer._optimizer_step_code", "first_step", "optimizer.step", "step", "step"),),
    "torch.autograd": (("backward", "first_step", "backward", "backward", "code"),),
    "torch.utils.data.dataloader": (
        ("DataLoader._get_iterator", "data", "DataLoader.iter", "timed", "code"),
        ("_BaseDataLoaderIter.__next__", "data", "DataLoader.next", "timed", "code"),
    ),
    "torch.serialization": (("load", "weights", "torch.load", "timed", "code"),),
    "torch.distributed": (
        ("distributed_c10d.init_process_group", "distributed_init", "init_process_group", "timed", "code"),
        ("distributed_c10d.new_group", "distributed_init", "new_group", "timed", "code"),
        *((f"distributed_c10d.{c}", "waiting_for_ranks", c, "timed", "code") for c in COLLECTIVES),
    ),
    "torch.distributed.device_mesh": (("init_device_mesh", "distributed_init", "init_device_mesh", "timed", "code"),),
    "torch.distributed.checkpoint.state_dict_loader": (
        ("load", "weights", "dcp.load", "timed", "code"),
        ("load_state_dict", "weights", "dcp.load", "timed", "code"),
    ),
    "safetensors.torch": (
        ("load_file", "weights", "safetensors.load", "timed", "code"),
        ("load", "weights", "safetensors.load", "timed", "code"),
    ),
    "transformers.modeling_utils": (("PreTrainedModel.from_pretrained", "weights", "from_pretrained", "timed", "code"),),
    "transformers.models.auto.auto_factory": (
        ("_BaseAutoModelClass.from_pretrained", "weights", "from_pretrained", "timed", "code"),
    ),
    "torch.cuda": (("_lazy_init", "cuda_init", "torch.cuda._lazy_init", "timed", "code"),),
    "torch.cuda.graphs": (
        ("graph.__enter__", "cudagraph_capture", "torch.cuda.graph", "enter", "code"),
        ("graph.__exit__", "cudagraph_capture", "torch.cuda.graph", "exit", "code"),
    ),
    "torch._dynamo": (("reset", "bridge", "torch._dynamo.reset", "reset", "live"),),
    "torch._dynamo.convert_frame": (("fullgraph_capture", "compile", "fullgraph_capture", "capture", "live"),),
    # the bridge's own set-up, as torch's compiler is first imported (the OpenTelemetry SDK's imports included)
    "torch_otel._core.import_watch": (("_fire", "bridge", "arm", "timed", "code"),),
}


def error(where: str, exc: BaseException) -> None:
    """The recorder's own failure: counted, logged once on the bridge's logger; never raised."""
    try:
        from ..._core.errors import record_error

        record_error(where, exc)
    except Exception:  # noqa: BLE001, S110
        pass


def _resolve(mod: ModuleType, path: str) -> Any:
    obj: Any = mod
    for part in path.split("."):
        obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
        if obj is None:
            return None
    return obj


def apply(r: Any, name: str, mod: ModuleType) -> None:
    """Hook what module ``name`` gives (it has finished loading)."""
    for path, phase, label, how, group in SWAPS.get(name, ()):
        fn = _resolve(mod, path)
        if fn is not None:
            r.swap(fn, phase, label, how, group)
    special = SPECIAL.get(name)
    if special is not None:
        special(r, mod)


# -- what a hook does ------------------------------------------------------------------------------------------------


def _module_call(r: Any, call: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An outermost module call: torch's own code for the modules it calls, its interval, and perhaps the end."""
    if r.outer:
        return call(*args, **kwargs)
    r.outer += 1
    r.sync()
    t0 = _clock()
    entry = r.push(t0, phase, label) if r.state == "recording" else None
    part = False
    if entry is not None and r.mode == "auto" and not r.forwards:
        try:
            part = _part_of_generate(args[0] if args else None)
        except Exception as exc:  # noqa: BLE001
            error("start-up generate", exc)
    try:
        return call(*args, **kwargs)
    finally:
        t1 = _clock()
        r.outer -= 1
        try:
            if entry is not None:
                r.pop(entry, t1)
                r.step_from = t1
            if not part:
                _forwarded(r, t0, t1)
            r.sync()
        except Exception as exc:  # noqa: BLE001
            error("start-up forward", exc)


GENERATE_DEPTH = 64  # frames looked through, out from a module call, for the ``generate`` it is part of


def _part_of_generate(module: Any) -> bool:
    """Whether this outermost call runs inside the ``generate`` (transformers') of another model than the one called:
    an encoder-decoder's encoder, before its model's first call; an assistant model's drafts (assisted decoding), which
    its own ``generate`` makes inside the model's. The first token is that model's own call's return, so the calls
    before it are part of the first token, not the first forward."""
    f: Any = sys._getframe(2)
    for _ in range(GENERATE_DEPTH):
        if f is None:
            return False
        if f.f_code.co_name == "generate":
            owner = f.f_locals.get("self")
            if owner is not None and owner is not module and any(c.__name__ == "GenerationMixin" for c in type(owner).__mro__):
                return True
        f = f.f_back
    return False


def _forwarded(r: Any, t0: int, t1: int) -> None:
    if r.state == "second":
        if r.end_name == "forward":
            r.second_ns = t1 - t0
            r.finish()
        return
    r.forwards += 1
    if r.forwards == 1 and (r.mode == "forward" or (r.mode == "auto" and not _optimizer_made())):
        r.end("forward", t1)


def _optimizer_made() -> bool:
    """An optimizer was constructed (torch marks each optimizer class's step as hooked in its first __init__)."""
    optim = sys.modules.get("torch.optim.optimizer")
    classes = [optim.Optimizer] if optim is not None else []
    while classes:
        c = classes.pop()
        if getattr(c.__dict__.get("step"), "hooked", False):
            return True
        classes.extend(c.__subclasses__())
    return False


def _step(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An optimizer's step returned: the first ends the start-up (its part: from the last backward or forward), the
    next is the second step."""
    out = copy(*args, **kwargs)
    t = _clock()
    try:
        if r.state == "recording" and r.mode in ("auto", "step"):
            if r.step_from is not None:
                r.add(r.step_from, t, phase, label)
            r.end("step", t)
        elif r.state == "second" and r.end_name == "step" and r.end_ns is not None:
            r.second_ns = t - r.end_ns
            r.finish()
    except Exception as exc:  # noqa: BLE001
        error("start-up step", exc)
    return out


def _backward(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    entry = r.push(_clock(), phase, label)
    try:
        return copy(*args, **kwargs)
    finally:
        r.step_from = t = _clock()
        r.pop(entry, t)


def _enter(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t0 = _clock()
    out = copy(*args, **kwargs)
    r.opened[id(args[0])] = r.push(t0, phase, label)
    return out


def _exit(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return copy(*args, **kwargs)
    finally:
        entry = r.opened.pop(id(args[0]), None)
        if entry is not None:
            r.pop(entry, _clock())


def _reset(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = copy(*args, **kwargs)
    _callbacks(r)
    skip_own_frames(r)  # dynamo's reset forgets what it was told of each code
    return out


def _capture(r: Any, copy: Callable[..., Any], phase: str, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Dynamo tracing outside its compile callbacks (strict export, AOT compile): every hook out meanwhile."""
    r.compiling += 1
    r.sync()
    try:
        return copy(*args, **kwargs)
    finally:
        r.compiling -= 1
        r.sync()


# how -> what the hook does, given the recorder, torch's code as a function of its own, the phase, the label and the
# call's arguments (``timed``, the default, times the call as its phase); those of AFTER_END run after the end too
HOW: dict[str, Any] = {
    "call": _module_call,
    "step": _step,
    "backward": _backward,
    "enter": _enter,
    "exit": _exit,
    "reset": _reset,
    "capture": _capture,
}
AFTER_END = frozenset({"call", "step", "reset", "capture"})


# -- what is not a Python function -----------------------------------------------------------------------------------


def _timed(r: Any, fn: Callable[..., Any], phase: str, label: str) -> Callable[..., Any]:
    """A C function timed as ``phase``/``label`` while ``r`` records, on its thread."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        if r.state != "recording" or _ident() != r.main or busy.get():
            return fn(*args, **kwargs)
        entry = r.push(_clock(), phase, label)
        try:
            return fn(*args, **kwargs)
        finally:
            r.pop(entry, _clock())

    timed.__name__ = timed.__qualname__ = getattr(fn, "__name__", "timed")
    timed.__doc__ = getattr(fn, "__doc__", None)
    return timed


def _ddp(r: Any, mod: ModuleType) -> None:
    """DDP's constructor's first collectives, written in C++: replaced as attributes of torch.distributed, where DDP
    calls them."""
    for name in ("_verify_params_across_processes", "_broadcast_coalesced"):
        fn = vars(mod).get(name)
        if fn is not None:
            r.replace(mod, name, _timed(r, fn, "waiting_for_ranks", name))


def _safe_open(r: Any, mod: ModuleType) -> None:
    """``with safe_open(...)``: the block's time (a class written in Rust: its methods replaced as attributes)."""
    cls = mod.safe_open
    enter, exit_ = cls.__dict__["__enter__"], cls.__dict__["__exit__"]
    opened: dict[int, list[Any]] = {}

    def __enter__(self: Any) -> Any:  # noqa: N807
        if r.state == "recording" and _ident() == r.main and not busy.get():
            opened[id(self)] = r.push(_clock(), "weights", "safetensors.safe_open")
        return enter(self)

    def __exit__(self: Any, *exc: Any) -> Any:  # noqa: N807
        try:
            return exit_(self, *exc)
        finally:
            entry = opened.pop(id(self), None)
            if entry is not None:
                r.pop(entry, _clock())

    r.replace(cls, "__enter__", __enter__, "code")
    r.replace(cls, "__exit__", __exit__, "code")


def _dynamo(r: Any, mod: ModuleType) -> None:
    _callbacks(r)
    skip_own_frames(r)


def own_codes(modules: tuple[ModuleType, ...]) -> list[Any]:
    """The code of every function and method the recorder's modules define, nested ones included."""
    import types

    out: list[Any] = []

    def add(code: Any) -> None:
        out.append(code)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                add(c)

    for mod in modules:
        for obj in vars(mod).values():
            members = [obj] if isinstance(obj, types.FunctionType) else list(vars(obj).values()) if isinstance(obj, type) else []
            for fn in members:
                fn = getattr(fn, "__func__", fn)
                if isinstance(fn, types.FunctionType) and fn.__module__ == mod.__name__:
                    add(fn.__code__)
    return out


def skip_own_frames(r: Any) -> None:
    """Every frame the recorder puts on a call's path (a hook's code, its dispatch, the handlers, the recorder's methods)
    is one dynamo never compiles. Where a compiled function's eager part calls a hooked function (after a graph break,
    or in a frame dynamo gave up on), dynamo's frame callback sees these frames: it would take them for the user's code
    and compile them (torch's own frames it skips by their file), a graph break or a recompile the program never had.
    Skipped frame by frame: the frames they call (torch's, the user's) are dynamo's to decide, as without the recorder."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:  # a torch without it: nothing to mark
        return
    r.skip_code = skip_code
    for code in r.codes():
        skip_code(code)


def _callbacks(r: Any) -> None:
    """Dynamo's compile callbacks: every hook out while it compiles; inductor's cudagraph recording timed."""
    from torch._dynamo.callback import callback_handler

    if r.callbacks is None:

        def trigger(args: Any) -> str:
            return str(getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO"))

        def start(args: Any = None) -> None:
            what = trigger(args)
            if what == "CUDAGRAPH_RECORDING":
                if r.state == "recording" and _ident() == r.main:
                    r.opened[-1] = r.push(_clock(), "cudagraph_capture", "cudagraph recording")
            elif what != "TRITON_AUTOTUNING":
                r.compiling += 1
                r.sync()

        def end(args: Any = None) -> None:
            what = trigger(args)
            if what == "CUDAGRAPH_RECORDING":
                entry = r.opened.pop(-1, None)
                if entry is not None:
                    r.pop(entry, _clock())
            elif what != "TRITON_AUTOTUNING" and r.compiling:
                r.compiling -= 1
                r.sync()

        r.callbacks = (callback_handler, start, end)
    _, start, end = r.callbacks
    if start not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(start)
    if end not in callback_handler.end_callbacks:
        callback_handler.register_end_callback(end)


SPECIAL: dict[str, Callable[[Any, ModuleType], None]] = {
    "torch.distributed": _ddp,
    "safetensors": _safe_open,
    "torch._dynamo": _dynamo,
}
TARGETS = frozenset(SWAPS) | frozenset(SPECIAL)  # the modules the recorder waits for
