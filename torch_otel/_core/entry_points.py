"""Packages that plug into the bridge through entry points (the groups ``torch_otel.sinks`` and
``torch_otel.features``): one scan of a group, the user's choice among what it holds, and one line for a name that no
installed package provides. Never raises."""

from __future__ import annotations

from typing import Any

from .errors import record_error, warn_once

__all__ = ["chosen"]

_all: Any = None  # every installed entry point, read once per process


def chosen(group: str, variable: str, names: tuple[str, ...] | None) -> list[Any]:
    """The entry points of ``group``, sorted by name: every one (``names`` None) or those ``names`` names, as the
    environment variable ``variable`` chose them (``_core.settings.entry_point_names``). A name no installed package
    provides is one line; a broken install is counted and logged once, and gives none."""
    global _all
    try:
        if _all is None:  # one scan of the installed distributions for every group (each scan reads them all)
            from importlib.metadata import entry_points

            _all = entry_points()
        found = sorted(_all.select(group=group), key=lambda ep: ep.name)
    except Exception as exc:  # noqa: BLE001 - a broken install never breaks the user's program
        record_error(f"{group} entry points", exc)
        return []
    if names is not None and (missing := sorted(set(names) - {ep.name for ep in found})):
        warn_once(
            f"{group}-missing:{','.join(missing)}",
            "%s names %s, which no installed package provides (installed: %s); install it, or name one of those",
            variable,
            ", ".join(missing),
            ", ".join(ep.name for ep in found) or "none",
        )
    return [ep for ep in found if names is None or ep.name in names]
