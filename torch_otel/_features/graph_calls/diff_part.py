"""Graph calls in ``torch-otel diff``: how often each frame's compiled graphs ran on both sides, where both runs
counted them (a live run's summary or traces; a ``TORCH_TRACE`` log holds no calls), and its lines of the diff's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._core.frame_names import match, row_where
from ..._core.merge import num
from ..._core.text import cut, cut_where
from .calls import NAME

__all__ = ["compare", "text"]


def _graph_calls(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    c = s.get(NAME)
    return c if isinstance(c, Mapping) else None


def _once(c: Mapping[str, Any]) -> Mapping[str, Any]:
    """The graphs that ran at most once (the call that compiled them), and their compile seconds."""
    return next((r for r in c.get("ran_at_most") or [] if isinstance(r, Mapping) and r.get("calls") == 1), {})


def compare(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any] | None:
    """How often each frame's compiled graphs ran on both sides, where both runs counted them (a live run's summary or
    traces; a ``TORCH_TRACE`` log holds no calls): per frame, its calls, graphs, and those that ran at most once."""
    cb, cn = _graph_calls(b), _graph_calls(n)
    if cb is None or cn is None:
        return None
    frames = []
    fb = [f for f in cb.get("frames") or [] if isinstance(f, Mapping)]
    fn = [f for f in cn.get("frames") or [] if isinstance(f, Mapping)]
    for x, y in match(fb, fn):
        ref = y or x
        assert ref is not None
        frames.append(
            {
                "function": ref.get("function"),
                "file": ref.get("file"),
                "line": ref.get("line"),
                "call_site": ref.get("call_site"),
                "status": "both" if x is not None and y is not None else "new" if y is not None else "gone",
                **{
                    f"{side}_{k}": int(num((d or {}).get(k)))
                    for side, d in (("base", x), ("new", y))
                    for k in ("calls", "compiles", "dead")
                },
                **{
                    f"{side}_dead_compile_s": round(num((d or {}).get("dead_compile_s")), 6)
                    for side, d in (("base", x), ("new", y))
                },
            }
        )
    ob, on = _once(cb), _once(cn)
    return {
        "base_graphs": int(num(cb.get("graphs"))),
        "new_graphs": int(num(cn.get("graphs"))),
        "base_calls": int(num(cb.get("calls"))),
        "new_calls": int(num(cn.get("calls"))),
        "base_ran_once": int(num(ob.get("compiles"))),
        "new_ran_once": int(num(on.get("compiles"))),
        "base_ran_once_compile_s": round(num(ob.get("compile_s")), 6),
        "new_ran_once_compile_s": round(num(on.get("compile_s")), 6),
        "frames": sorted(frames, key=lambda f: -(f["base_calls"] + f["new_calls"])),
    }


def text(gc: Any, w: int) -> list[str]:
    """The diff's lines: calls and graphs on both sides, those that ran at most once; per frame, how its calls changed."""
    if not gc:
        return []
    lines = [
        f"graph calls: {gc['base_calls']:,} -> {gc['new_calls']:,} calls of {gc['base_graphs']} -> {gc['new_graphs']} "
        f"compiled graphs; ran at most once: {gc['base_ran_once']} ({gc['base_ran_once_compile_s']:.2f} s compiling) -> "
        f"{gc['new_ran_once']} ({gc['new_ran_once_compile_s']:.2f} s)"
    ]
    for x in gc["frames"]:
        tag = " (new)" if x["status"] == "new" else " (gone)" if x["status"] == "gone" else ""
        rest = (
            f"{tag}: calls {x['base_calls']:,} -> {x['new_calls']:,}, "
            f"graphs {x['base_compiles']} -> {x['new_compiles']}, ran at most once {x['base_dead']} -> {x['new_dead']}"
        )
        # the frame's name gives way before its numbers (a library's frame with the user's call site is long)
        lines.append(cut(f"  {cut_where(row_where(x), max(24, w - 2 - len(rest)))}{rest}", w))
    return lines
