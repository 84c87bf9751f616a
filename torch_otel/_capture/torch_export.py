"""``torch.export`` as a compile of its own: a root for each export, live.

torch logs no root event for an export: a strict export's dynamo capture is a
``fullgraph_capture`` with no compile id, a non-strict one logs nothing. So the
live capture wraps ``torch.export._trace._export`` (which ``torch.export.export``
looks up at each call) and ``torch.export._draft_export.draft_export`` and turns
each outermost call into a root ``export`` begin and end, on the same queue as
torch's own phase events. A draft export's report (its failures by type:
``GUARD_ADDED``, ``DATA_DEPENDENT_ERROR``, ...) rides on the end event.

The modules are wrapped once imported (they are not, until the user exports:
``torch.export._trace`` costs 0.4 s to import), and put back by ``unhook``.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._core.errors import _in_bridge, record_error
from .._core.import_watch import forget, when_imported
from .._model.events import Origin, PhaseEvent
from .attach_table import report_lacking

TRACE_MODULE = "torch.export._trace"
DRAFT_MODULE = "torch.export._draft_export"
# (module, function, what the root's api says)
TARGETS = ((TRACE_MODULE, "_export", "torch.export.export"), (DRAFT_MODULE, "draft_export", "torch.export.draft_export"))


def draft_failures(result: Any) -> dict[str, int]:
    """A draft export's report: its failures counted by type (no payloads: they hold the user's code)."""
    failures = getattr(getattr(result, "_report", None), "failures", None)
    if not isinstance(failures, list):
        return {}
    counts: Counter[str] = Counter()
    for f in failures:
        t = getattr(f, "failure_type", None)
        counts[getattr(t, "name", None) or str(t)] += 1
    return dict(counts)


class TorchExportHook:
    """Wraps torch's export entry points for one live capture; ``emit(event, origin)`` queues a root event."""

    def __init__(self, emit: Callable[[PhaseEvent], None], origin: Callable[[], Origin]) -> None:
        self._emit = emit
        self._origin = origin
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._wrapped: dict[tuple[str, str], tuple[Any, Any]] = {}  # (module, name) -> (torch's, ours)
        self._waiting: list[tuple[str, Callable[[], None]]] = []
        self.active = False

    def hook(self) -> None:
        self.active = True
        for module in dict.fromkeys(m for m, _, _ in TARGETS):
            callback = functools.partial(self._wrap_module, module)
            if not when_imported(module, callback):
                self._waiting.append((module, callback))

    def unhook(self) -> None:
        self.active = False
        for module, callback in self._waiting:
            forget(module, callback)
        self._waiting.clear()
        with self._lock:
            for (module, name), (orig, ours) in self._wrapped.items():
                mod = sys.modules.get(module)
                if mod is not None and getattr(mod, name, None) is ours:  # unless someone wrapped ours since
                    setattr(mod, name, orig)
            self._wrapped.clear()

    def _wrap_module(self, module: str) -> None:
        try:
            mod = sys.modules.get(module)
            if mod is None or not self.active:
                return
            with self._lock:
                for target_module, name, api in TARGETS:
                    if target_module != module or (module, name) in self._wrapped:
                        continue
                    orig = getattr(mod, name, None)
                    if not callable(orig):
                        report_lacking("export")
                        continue
                    ours = self._wrapper(orig, api)
                    setattr(mod, name, ours)
                    self._wrapped[(module, name)] = (orig, ours)
        except Exception as exc:  # noqa: BLE001 - runs inside the user's import
            record_error("export hook", exc)

    def _wrapper(self, orig: Callable[..., Any], api: str) -> Callable[..., Any]:
        hook = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not hook.active or getattr(hook._tls, "depth", False) or _in_bridge.get():
                return orig(*args, **kwargs)  # an export inside an export (draft_export's retries) is its phase
            draft = api.endswith("draft_export")
            strict = kwargs.get("strict", not draft)
            hook._event("B", {"api": api, "strict": bool(strict)})
            hook._tls.depth = True
            try:
                result = orig(*args, **kwargs)
            except BaseException as exc:
                hook._tls.depth = False
                hook._event("E", {"fail_type": type(exc).__name__, "fail_reason": str(exc)[:4096]})
                raise
            hook._tls.depth = False
            hook._event("E", {"draft_failures": draft_failures(result)} if draft else {})
            return result

        return wrapper

    def _event(self, ph: str, args: dict[str, Any]) -> None:
        try:
            origin = self._origin() if ph == "B" else None
            ev = PhaseEvent(None, "export", ph, time.time_ns(), args, origin=origin, final=ph == "E")
            self._emit(ev)
        except Exception as exc:  # noqa: BLE001 - never into the user's export
            record_error("export hook", exc)
