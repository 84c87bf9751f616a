"""Sinks installed as packages: the entry points of the group ``torch_otel.sinks``, loaded as the bridge is configured
from the environment (``torch-otel run``, ``import torch_otel.auto``, ``opentelemetry-instrument``), so a sink
installed with pip works with no change to the user's code (docs/extending.md).

Each entry point names a factory (a ``torch_otel.Sink`` class, or a function) that is called with no argument.
``TORCH_OTEL_SINKS`` chooses among them: every one installed (unset, ``all``), none (``none``), or those named. One that
cannot be loaded or made is caught, counted and logged once; the others still load, and the program runs on.
"""

from __future__ import annotations

from typing import Any

from .._core.entry_points import chosen
from .._core.errors import record_error, warn_once

__all__ = ["GROUP", "installed_sinks"]

GROUP = "torch_otel.sinks"


def installed_sinks(names: tuple[str, ...] | None = None) -> list[Any]:
    """The installed sinks, made: every one (``names`` None), or those ``names`` names. Never raises."""
    out = []
    for ep in chosen(GROUP, "TORCH_OTEL_SINKS", names):
        try:
            sink = ep.load()()
        except Exception as exc:  # noqa: BLE001 - counted and logged once; the other sinks still load
            record_error(f"sink {ep.name} ({ep.value})", exc)
            continue
        if not callable(getattr(sink, "on_compile", None)):
            warn_once(
                f"sink-shape:{ep.name}",
                "the sink %s (%s) has no on_compile: make it a torch_otel.Sink (docs/extending.md); it is left out",
                ep.name,
                ep.value,
            )
            continue
        out.append(sink)
    return out
