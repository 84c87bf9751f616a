"""The release policy: the torch releases this version was tested with, and the one line for a torch outside them.

A row of the attach table (torch_otel._attach.points) names the releases that have its attach point
(:func:`in_releases`).
"""

from __future__ import annotations

from .._version import SUPPORTED_TORCH, TESTED_TORCH

__all__ = ["in_releases", "release_line", "tested_status"]


def _release(version: str) -> tuple[int, int] | None:
    """``"2.15.0+cu132"`` -> ``(2, 15)``; None for what is not a release number."""
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


def tested_status(version: str) -> str:
    """``"tested"``, ``"newer"`` (than the newest tested release), ``"older"`` or ``"unknown"``."""
    rel = _release(version)
    if rel is None:
        return "unknown"
    tested = [_release(v) for v in TESTED_TORCH]
    if rel in tested:
        return "tested"
    return "newer" if rel > max(t for t in tested if t) else "older"


def release_line(version: str) -> str | None:
    """The one line for a torch outside the tested releases; None within them."""
    status = tested_status(version)
    newest = TESTED_TORCH[-1]
    if status == "newer":
        return (
            f"torch {version} is newer than the newest release torch-otel was tested with ({newest}); capturing on a "
            f"best-effort basis, and what this torch has moved is reported as it arms. Tested: {SUPPORTED_TORCH}"
        )
    if status == "older":
        return (
            f"torch {version} is older than the supported range ({SUPPORTED_TORCH}); capturing what it can, and some "
            f"of it may be missing or wrong. Upgrade torch to {TESTED_TORCH[0]} or later for full support"
        )
    if status == "unknown":
        return f"cannot read torch's version ({version!r}); capturing on a best-effort basis. Tested: {SUPPORTED_TORCH}"
    return None


def in_releases(version: str, releases: tuple[str | None, str | None]) -> bool:
    """Whether ``version`` lies in ``(first, last)`` (releases ``"2.10"``; None: unbounded)."""
    rel = _release(version)
    if rel is None:
        return True
    first, last = (None if r is None else _release(r) for r in releases)
    return (first is None or rel >= first) and (last is None or rel <= last)
