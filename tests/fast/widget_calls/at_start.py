"""What the widget feature starts with the process, before torch is imported (its registry row names this module):
as a start-up's hooks would, it notes the process's start; the state the bridge's pipeline makes later adopts it."""

from __future__ import annotations

from collections.abc import Mapping

STARTED: list[str] = []  # one entry per start: what the environment said


def start(env: Mapping[str, str]) -> None:
    if env.get("WIDGETS_AT_START") == "raise":
        raise RuntimeError("a start that fails")
    STARTED.append(env.get("WIDGETS_AT_START", ""))
