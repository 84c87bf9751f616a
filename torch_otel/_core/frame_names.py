"""How a frame is named and matched across two runs: ``forward (model.py:32)``, and the pairs of one frame on both sides.

A run summary names a frame by its function, file and first line, and, for a frame in an installed package, the
user's line that called it. Compile ids shift when code changes, so two runs' frames are matched by those, not by id
(:func:`match`). Plain dicts in, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .merge import basename as _base
from .paths import in_installed_package

__all__ = ["match", "row_where", "where"]


def where(fn: Any, path: Any, line: Any, call_site: Any = None) -> str:
    """``forward (model.py:32)``, as the run summary names a frame; a library's frame with the user's line that called
    it: ``wrapper (generic.py:1030) from train.py:42``."""
    b = _base(path)
    # a library's frame only: the user's own frame is named by its own line
    site = f" from {call_site}" if isinstance(call_site, str) and call_site and in_installed_package(path) else ""
    return str(fn) if b is None else f"{fn} ({b}:{line if line is not None else '?'}){site}"


def row_where(r: Mapping[str, Any]) -> str:
    """A frame row's name (:func:`where`)."""
    return where(r.get("function"), r.get("file"), r.get("line"), r.get("call_site"))


def match(
    base: list[Mapping[str, Any]], new: list[Mapping[str, Any]], fn: str = "function", path: str = "file", line: str = "line"
) -> list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]:
    """Pairs of the same frame (or location) on both sides: by name, file, line and the user's call site of a
    library's frame; then by name, file and call site, where only one of each side is left (its line moved: code
    above it changed); then without the call site, where only one is left (a summary of an older torch-otel has
    none). Unpaired ones pair with None."""
    pairs: list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = []
    left_b = list(base)
    left_n = list(new)

    def exact(d: Mapping[str, Any]) -> tuple[Any, ...]:
        return (d.get(fn), _base(d.get(path)), d.get(line), d.get("call_site"))

    def loose(d: Mapping[str, Any]) -> tuple[Any, ...]:
        return (d.get(fn), _base(d.get(path)), d.get("call_site"))

    def loosest(d: Mapping[str, Any]) -> tuple[Any, ...]:
        return (d.get(fn), _base(d.get(path)))

    for key in (exact, loose, loosest):
        index: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for d in left_b:
            index.setdefault(key(d), []).append(d)
        counts_n: dict[tuple[Any, ...], int] = {}
        for d in left_n:
            counts_n[key(d)] = counts_n.get(key(d), 0) + 1
        rest_n = []
        for d in left_n:
            k = key(d)
            cands = index.get(k)
            if cands and (key is exact or (len(cands) == 1 and counts_n[k] == 1)):
                b = cands.pop(0)
                pairs.append((b, d))
            else:
                rest_n.append(d)
        matched = {id(b) for b, _ in pairs if b is not None}
        left_b = [d for d in left_b if id(d) not in matched]
        left_n = rest_n
    pairs += [(None, d) for d in left_n]
    pairs += [(d, None) for d in left_b]
    return pairs
