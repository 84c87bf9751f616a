"""The start-up's first code: the entry points call :func:`start` as the process starts (the registry's
``starts_with_process``), and :func:`ready` when the program says it is ready (``torch_otel.ready()``).

Imports only what Python loads at start-up, and the recorder: it runs in every process ``torch-otel run`` starts.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["activation", "ready", "start"]


def activation() -> str:
    """How the bridge came in, read from the calls that led here: ``run`` (``torch-otel run``'s sitecustomize),
    ``instrument`` (``opentelemetry-instrument``), ``auto`` (``import torch_otel.auto``), else ``api``
    (``torch_otel.instrument()``)."""
    names: set[str] = set()
    f: Any = sys._getframe(1)
    while f is not None:
        g = f.f_globals
        name = g.get("__name__", "")
        if name == "sitecustomize" and str(g.get("__file__", "")).replace("\\", "/").endswith("_autostart/sitecustomize.py"):
            return "run"
        names.add(name)
        f = f.f_back
    if "torch_otel._instrumentor" in names or "opentelemetry.instrumentation.auto_instrumentation" in names:
        return "instrument"
    return "auto" if "torch_otel.auto" in names else "api"


def start(env: Mapping[str, str]) -> None:
    """Start recording this process's start-up (``TORCH_OTEL_STARTUP=off`` turns it off). The bridge's own start-up
    counts from the import of ``torch_otel``."""
    from .recorder import install

    how = activation()
    # the package's import is the bridge's first code where the entry point imported it to start (torch-otel run,
    # opentelemetry-instrument, import torch_otel.auto); a program that calls torch_otel.instrument() may have
    # imported it long before: its bridge starts now
    first = getattr(sys.modules.get("torch_otel"), "_IMPORTED_NS", None) if how != "api" else None
    install(activation=how, first_code_ns=first, env=env)


def ready() -> None:
    """The program is ready: ends the start-up where ``TORCH_OTEL_STARTUP_END`` is ``ready`` or ``auto``."""
    from .recorder import ready as end_at_ready

    end_at_ready()
