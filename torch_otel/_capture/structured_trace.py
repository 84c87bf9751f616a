"""Full capture's structured records, taken from torch's ``trace_structured`` without a logging record.

With a handler on ``torch.__trace``, torch's ``trace_structured`` builds each record (its metadata, ids and payload),
then hands it to ``logging``: a ``LogRecord`` made, the caller's frame found, every handler called. When the bridge's
handler is the only one, that machinery carries the record from torch to the bridge and nowhere else; and a phase's
begin or end also paid for its JSON text and hash, though the bridge takes phases from torch's chromium hook. Timed on
torch's thread, the two were about two thirds of full capture's time in ``trace_structured``; counted in instructions
on the compile loop, taking them out cut what full capture adds on torch's thread from +109 M to +74.5 M
(docs/benchmarks.md).

So full capture puts :func:`direct` in place of ``trace_structured`` (torch_otel._attach.points.StructuredTraceHook):
in ``torch._logging`` and every torch module that imported it by name. It builds the same record as torch's function,
field by field, and hands it to the capture at once:

- only while the bridge's handler is the only handler of ``torch.__trace`` and nothing of the logger's own would stop
  or send on a record (it is not disabled, has no filter, does not propagate, is enabled for debug records:
  ``logging.disable`` reaches it before 2.13). With any other handler (``TORCH_TRACE``'s file, a user's), a filter,
  or a call this code does not know (an argument torch added since), torch's own function runs, unchanged, and the
  bridge's handler takes the record as before: torch's file is written exactly as torch writes it, and a filter
  drops for the bridge what it drops for everyone;
- only where torch's function is one of the three this mirrors (2.10; 2.11 and 2.12; 2.13 to 2.15): its parameters
  and their defaults, and every name its code uses, exactly. A release that changed any of them keeps torch's;
- the payload's text and its MD5 (``has_payload``) are made as torch makes them: the artifact spans' sizes and hashes
  equal those of a ``TORCH_TRACE`` file of the same run;
- a chromium event is handed over as torch's dict, with no JSON text: a phase's begin or end is then dropped as torch's
  chromium hook delivers it, and an instant is read from the dict;
- the call stack torch adds to a record made outside a compile is taken only for the records whose stack the bridge
  reads (the compilation metrics);
- torch's own accounting stays: ``log_trace_structured_event`` is called, and the time spent is added to the compile's
  ``structured_logging_overhead_s``. The record that function is given lacks what the two points above leave out (a
  stack the bridge does not read, a chromium event's hash); in open-source torch it does nothing with it.

What torch's callbacks raise (``metadata_fn``, ``payload_fn``) reaches torch as it would from torch's own function; what
the bridge's part raises is counted, never raised.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from .._core.errors import _in_bridge, record_error
from .._parse.records import STACK_RECORDS

__all__ = ["direct", "payload_text"]

# torch's reserved names (its own function raises for them): left to it
_RESERVED = frozenset(
    {"rank", "compiled_autograd_id", "frame_id", "frame_compile_id", "attempt", "severity", "timestamp", "pathname",
     "thread", "subgraph_name"}
)  # fmt: skip
_KNOWN = frozenset({"suppress_context", "expect_trace_id", "record_logging_overhead", "compile_id"})


# Every name torch's function uses, on each release this mirrors (the same on Python 3.10 to 3.13): a function whose
# names are not exactly one of these changed something this code would not, and is left to run as it is
_SUBGRAPH = "_get_regional_inductor_subgraph_name"
_NAMES_2_11 = frozenset(
    {"AssertionError", "CapturedTraceback", "CompileContext", "_guards", "_logging", "add_structured_logging_overhead",
     "attempt", "callable", "compile_id", "compiled_autograd_id", "current_trace_id", "debug", "dist", "dumps", "encode",
     "extract", "frame_compile_id", "frame_id", "from_traceback", "get_rank", "handlers", "hashlib", "hexdigest",
     "is_available", "is_initialized", "isinstance", "join", "json", "list", "log_trace_structured_event", "md5", "str",
     "structured", "summary", "time", "time_ns", "torch", "trace_log", "type", "update"}
)  # fmt: skip
_NAMES = (
    _NAMES_2_11 - {"AssertionError"},  # 2.10: its checks are assert statements
    _NAMES_2_11,  # 2.11, 2.12
    _NAMES_2_11 | {_SUBGRAPH, "torch.fx.traceback"},  # 2.13 to 2.15: the record's subgraph name
)
# its parameters' defaults (payload_fn's is a lambda of torch's: not compared)
_DEFAULTS = {"metadata_fn": dict, "suppress_context": False, "expect_trace_id": True, "record_logging_overhead": True,
             "compile_id": None}  # fmt: skip


def _none() -> None:
    return None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, set):  # as torch's: sets are written as lists
        return list(obj)
    raise TypeError(f"Object of type {type(obj)} is not JSON serializable")


def payload_text(payload: Any) -> str:
    """A payload as torch writes it (``trace_structured``): text as it is, a list one JSON value a line, else JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, list):
        return "[\n" + ",\n".join(json.dumps(i) for i in payload) + "\n]"
    return json.dumps(payload, default=_json_default, indent=0)


def direct(
    torch_fn: Callable[..., None],
    handler: Any,
    installed: Callable[[], bool],
    take: Callable[[dict[str, Any], str | None, Any], None],
) -> Callable[..., None] | None:
    """``trace_structured`` for full capture: ``take(record, payload, chromium event)`` is given each record while
    ``handler`` is the only handler of ``torch.__trace`` and ``installed()``; torch's ``torch_fn`` runs otherwise.

    None where torch's function is not one this mirrors (its parameters, their defaults, or the names its code
    uses, differ)."""
    import inspect

    try:
        import torch._logging._internal as internal
        import torch._logging.structured as structured
        import torch.distributed as dist
        import torch.fx.traceback as fx_traceback
        from torch._guards import CompileContext
        from torch.utils._traceback import CapturedTraceback

        params = inspect.signature(torch_fn).parameters
        defaults = {k: params[k].default for k in _DEFAULTS if k in params}
        trace_log = internal.trace_log
        needs = (internal.log_trace_structured_event, internal.add_structured_logging_overhead, structured.from_traceback,
                 CapturedTraceback.extract, CompileContext.current_trace_id)  # fmt: skip
    except Exception:  # noqa: BLE001 - not the torch this mirrors
        return None
    names = frozenset(getattr(getattr(torch_fn, "__code__", None), "co_names", ()))
    if (
        set(params) != _KNOWN | {"name", "metadata_fn", "payload_fn"}
        or defaults != _DEFAULTS
        or names not in _NAMES
        or not all(callable(n) for n in needs)
    ):
        return None
    # the record's subgraph name: only where torch's function adds it (2.13 and later); like torch's other callees,
    # looked up at each call, as torch's function looks them up
    subgraph = _SUBGRAPH in names
    dist_available = dist.is_available()
    time_ns, md5, in_bridge, debug = time.time_ns, hashlib.md5, _in_bridge.get, logging.DEBUG

    @functools.wraps(torch_fn)
    def trace_structured(
        name: str, metadata_fn: Callable[[], Any] = dict, *, payload_fn: Callable[[], Any] = _none, **kwargs: Any
    ) -> None:
        handlers = trace_log.handlers
        try:  # the list as it is now (a handler removed since the length was read: an IndexError, not the record's)
            alone = handlers[0] is handler and len(handlers) == 1
        except IndexError:
            alone = False
        if (
            not alone
            or trace_log.disabled
            or trace_log.filters
            or trace_log.propagate
            or not trace_log.isEnabledFor(debug)
            or not installed()
            or in_bridge()
            or (kwargs and not _KNOWN.issuperset(kwargs))
            or name in _RESERVED
            or not callable(metadata_fn)
            or not callable(payload_fn)
        ):
            return torch_fn(name, metadata_fn, payload_fn=payload_fn, **kwargs)
        start = time_ns()
        record: dict[str, Any] = {name: metadata_fn()}
        if not kwargs.get("suppress_context", False):
            if dist_available and dist.is_initialized():
                record["rank"] = dist.get_rank()
            trace_id = CompileContext.current_trace_id()
            compile_id = kwargs.get("compile_id")
            if kwargs.get("expect_trace_id", True) and trace_id is None and compile_id is None:
                if name in STACK_RECORDS:  # as torch's: the stack of this call (skip=1: this function's frame)
                    record["stack"] = structured.from_traceback(CapturedTraceback.extract(skip=1).summary())  # type: ignore[no-untyped-call]
            else:
                cid = trace_id.compile_id if trace_id else compile_id
                if cid is not None:
                    if cid.compiled_autograd_id is not None:
                        record["compiled_autograd_id"] = cid.compiled_autograd_id
                    if cid.frame_id is not None:
                        record["frame_id"] = cid.frame_id
                    if cid.frame_compile_id is not None:
                        record["frame_compile_id"] = cid.frame_compile_id
                if trace_id:
                    record["attempt"] = trace_id.attempt
            if subgraph:
                subgraph_name = getattr(fx_traceback, _SUBGRAPH)()
                if subgraph_name is not None:
                    record["subgraph_name"] = subgraph_name
        payload = payload_fn()
        text: str | None = None
        event = None
        if name == "chromium_event" and type(payload) is dict:
            event = payload  # handed over as it is: no JSON text, no hash
        elif payload is not None:
            text = payload_text(payload)
            h = md5(usedforsecurity=False)
            h.update(text.encode("utf-8"))
            record["has_payload"] = h.hexdigest()
        try:
            take(record, text, event)
        except Exception as exc:  # noqa: BLE001 - never into torch's compile
            record_error("structured trace record", exc)
        internal.log_trace_structured_event(name, record)
        if kwargs.get("record_logging_overhead", True):
            internal.add_structured_logging_overhead((time_ns() - start) / 1e9)
        return None

    return trace_structured
