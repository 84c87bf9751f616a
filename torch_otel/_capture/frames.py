"""Walking the Python stack at a compile's start: the compiled code, and the user's line that called it.

Live capture calls :func:`find_code_and_caller` from its root-event hook. The user's line is the nearest frame
outside torch, the bridge, installed libraries and the standard library (a model in ``transformers`` is called
from the user's script, not from ``transformers``); failing that, the nearest frame outside torch and the bridge's
hooks. The frames on the way, the nearest :data:`MAX_STACK`, are kept for ``code.stacktrace``.
"""

from __future__ import annotations

import logging
import os
import sys
from types import CodeType, FrameType

from .._model.events import Origin

__all__ = ["MAX_STACK", "class_name", "compile_kind_of_capture", "find_code_and_caller", "object_classes", "skip_dirs"]

MAX_STACK = 8  # frames kept in ``code.stacktrace``: from the compiled call out to the user's line

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torch_otel/, this module's folder's parent
_BRIDGE_DIR = _PACKAGE_DIR + os.sep
_WORKLOAD_FILES = (os.sep + "_demo.py",)  # the bridge's only module that calls torch.compile as a user would


def skip_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(never a caller: torch, the bridge, logging; not the user's code: installed libraries, the standard library)."""
    import contextlib
    import site
    import sysconfig

    import torch

    never = [os.path.dirname(torch.__file__), _PACKAGE_DIR, os.path.dirname(logging.__file__)]
    libraries = [p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")]
    try:
        libraries += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site module
        pass
    both = {d for p in libraries if p for d in (os.path.normpath(p), os.path.realpath(p))}
    return (
        # "<torch-otel": code the bridge made (the start-up's hooks on the functions it times)
        tuple(d + os.sep for d in never) + (contextlib.__file__, "<frozen", "<torch-otel"),
        tuple(sorted(d + os.sep for d in both)),
    )


def _error_on_graph_break() -> bool:
    """torch._dynamo.error_on_graph_break(True) in force (torch 2.9 on): torch raises every failure of the compile."""
    utils = sys.modules.get("torch._dynamo.utils")
    return getattr(utils, "_error_on_graph_break", False) is True


# A frame's line, worked out from its code's line table at each read (``f_lineno``): the same call sites come back at
# every compile, so each (code, instruction) pair's line is kept; by the code's id, with the code (never a reused id)
_lines: dict[tuple[int, int], tuple[CodeType, int]] = {}


def _line(f: FrameType, co: CodeType) -> int:
    key = (id(co), f.f_lasti)
    got = _lines.get(key)
    if got is not None and got[0] is co:
        return got[1]
    if len(_lines) >= 4096:
        _lines.clear()
    line = f.f_lineno
    _lines[key] = (co, line)
    return line


# The codes a walk passes over whatever it has found so far (torch's, the bridge's, logging's, but dynamo's ``_compile``
# and the demo's workload), by the ``skip`` they were passed over for: by the code's id, with the code (never a reused
# id). Most of a walk's frames are these, the same at every compile.
_passed: dict[tuple[str, ...], dict[int, CodeType]] = {}


def find_code_and_caller(origin: Origin, frame: FrameType | None, skip: tuple[str, ...], libraries: tuple[str, ...]) -> None:
    """Fill ``origin``'s compiled code (dynamo's ``_compile`` frame), caller and stack, walking out from ``frame``."""
    f = frame
    stack: list[tuple[str, int, str]] = []
    fallback: FrameType | None = None
    need_code = origin.code_name is None
    passed = _passed.get(skip)
    if passed is None or len(passed) >= 4096:
        passed = _passed[skip] = {}
    while f is not None:
        co = f.f_code
        if passed.get(id(co)) is co:
            f = f.f_back
            continue
        fn = co.co_filename
        if need_code and co.co_name == "_compile" and fn.endswith("convert_frame.py"):
            here = f.f_locals
            code = here.get("code")
            if code is not None and hasattr(code, "co_name"):
                origin.code_name = code.co_name
                origin.code_file = code.co_filename
                origin.code_line = code.co_firstlineno
                origin.classes = object_classes(here.get("locals"), here.get("frame"))
                one_graph = here.get("one_graph")
                if isinstance(one_graph, bool):
                    origin.raises = one_graph or _error_on_graph_break()
                need_code = False
        # a frame outside torch and the bridge, or else (the first such) the demo's workload, a module of the bridge: a
        # caller of last resort, never a hook's own frame (the export hook's wrapper sits between the user's call and torch)
        elif not fn.startswith(skip) or (fallback is None and fn.startswith(_BRIDGE_DIR) and fn.endswith(_WORKLOAD_FILES)):
            if len(stack) < MAX_STACK:
                stack.append((fn, _line(f, co), co.co_name))
            if fallback is None:
                fallback = f
            if not fn.startswith(libraries) and not fn.startswith(skip):
                fallback = f
                break  # the user's line: past as many library frames as there are (a model's layers), as torch's record
        elif co.co_name != "_compile" and not fn.endswith(_WORKLOAD_FILES):
            passed[id(co)] = co  # passed over at every walk (dynamo's _compile and the demo's workload: not always)
        f = f.f_back
    if fallback is not None:
        origin.caller_file = fallback.f_code.co_filename
        origin.caller_line = _line(fallback, fallback.f_code)
        origin.caller_function = fallback.f_code.co_name
    origin.stack = stack


def class_name(obj: object) -> str:
    """An object's class as a dotted name, as torch's guards print it (``torch.nn.modules.container.Sequential``; a
    builtin's bare: ``method``)."""
    cls = type(obj)
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or cls.__name__
    return name if module in (None, "builtins") else f"{module}.{name}"


def object_classes(frame_locals: object, frame: object = None) -> dict[str, str]:
    """The classes of the compiled frame's objects that name it (torch_otel._model.events.FrameObjectsEvent): its
    ``self``, torch's wrapper's ``fn``, a bound method's ``fn.__self__``, a wrapper's first positional ``args[0]``.
    ``frame_locals`` is the locals dict dynamo's ``_compile`` was given; else ``frame``'s own."""
    if not isinstance(frame_locals, dict):
        frame_locals = getattr(frame, "f_locals", None)
        if not isinstance(frame_locals, dict):
            return {}
    out: dict[str, str] = {}
    for key in ("self", "fn"):
        if key in frame_locals:
            out[key] = class_name(frame_locals[key])
    args = frame_locals.get("args")
    if type(args) is tuple and args:  # a wrapper's ``*args``: a decorated method's object is the first
        out["args[0]"] = class_name(args[0])
    if out.get("fn") == "method":
        owner = getattr(frame_locals["fn"], "__self__", None)
        if owner is not None:
            out["fn.__self__"] = class_name(owner)
    return out


def compile_kind_of_capture() -> str:
    """Who called torch's ``fullgraph_capture``: an AOT precompile (``torch.compile(...).aot_compile``) or an export."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            break
        if frame.f_code.co_name == "aot_compile_fullgraph":
            return "precompile"
        frame = frame.f_back
    return "export"
