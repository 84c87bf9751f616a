"""Frames torch left running in eager: which frame, why, where the break is, and that the frame now runs uncompiled.

This is the costliest outcome torch.compile has: the frame's whole work runs in eager, and the run's compile time
falls, which reads like an improvement. torch says it in four ways, each a compile of the frame:

- a graph break inside a loop: torch skips the whole frame (it adds ``graph break in loop``, GB7000, to its
  reason); the break is the first graph break torch logged for the compile (``print`` in a ``for`` loop: GB0059);
- any other graph break torch could not handle ("Failed to handle graph break gracefully"): it skips the frame;
- the recompile limit: the frame's new inputs run in eager from then on;
- a compile that left no guarded code (``has_guarded_code`` false): a failure, or nothing torch could compile.

:class:`EagerFrames` keeps one row per frame (bounded), keyed as the run summary keys frames; :func:`eager_lines`
writes them first in the summary's text.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._core.graph_breaks import explanation, graph_break_code, in_loop
from .._core.text import cut, wrap
from .._model.record import CompileRecord
from .recompile_guards import limit_label

__all__ = ["MAX_EAGER_FRAMES", "EagerFrames", "eager_lines", "why_eager"]

MAX_EAGER_FRAMES = 1000
MAX_HIT_STREAMS = 64  # the processes whose limit hit a frame's row follows (more: the row stays)
# the reasons a later compile of the frame in the same process disproves: it runs compiled since
_UNTIL_COMPILED = frozenset({"recompile_limit", "failure"})
# why a frame runs in eager, most telling first
WHYS = ("graph_break_in_loop", "graph_break", "recompile_limit", "failure", "no_graph")


@dataclass(slots=True)
class _Eager:
    why: str
    compiles: int = 0
    first_id: str = ""
    code: str | None = None  # the break's GB code
    gb_type: str | None = None
    file: str | None = None  # the break's
    line: int | None = None
    explanation: str | None = None  # torch's one line about the break
    fail_type: str | None = None
    limit: int | None = None
    limit_name: str | None = None  # None: recompile_limit; else the limit torch hit (accumulated_recompile_limit)
    # the processes (rank, pid) in which the frame still runs in eager, for a limit hit or a failed compile: one that
    # compiled the frame since runs it compiled (after torch._dynamo.reset(), which empties torch's cache; or a failure
    # that was raised into the caller, as under fullgraph=True, which a log does not tell from one torch suppressed)
    hit_by: set[tuple[int | None, int | None]] | None = None


def why_eager(rec: CompileRecord) -> _Eager | None:
    """Why this compile left its frame in eager, with the break where a graph break did it; None when it did not."""
    if not rec.eager_fallback:
        return None
    skipped = next((gb for gb in rec.graph_breaks if gb.skipped_frame), None)
    if skipped is not None:
        loop = in_loop(rec.fail_reason) or in_loop(skipped.reason)
        return _Eager(
            "graph_break_in_loop" if loop else "graph_break",
            code=graph_break_code(skipped.gb_type, skipped.reason),
            gb_type=skipped.gb_type,
            file=skipped.filename,
            line=skipped.lineno,
            explanation=explanation(skipped.reason),
            fail_type=rec.fail_type,
        )
    if rec.recompile_limit_hit:
        return _Eager("recompile_limit", fail_type=rec.fail_type, limit=rec.recompile_limit, limit_name=rec.recompile_limit_kind)
    if rec.fail_type:
        m = rec.metrics or {}
        f, ln = m.get("fail_user_frame_filename"), m.get("fail_user_frame_lineno")
        return _Eager(
            "failure",
            fail_type=rec.fail_type,
            file=f if isinstance(f, str) else None,
            line=ln if isinstance(ln, int) and not isinstance(ln, bool) else None,
        )
    return _Eager("no_graph")


def _text(e: Mapping[str, Any]) -> str:
    """Why, in words: where the break is, which code, and what torch did."""
    why = e.get("why")
    at = f" at {os.path.basename(str(e['break_file']))}:{e.get('break_line')}" if e.get("break_file") else ""
    if why == "graph_break_in_loop":
        return f"a graph break inside a loop{at}: torch skipped the whole frame (GB7000)"
    if why == "graph_break":
        return f"a graph break torch could not handle{at}: torch skipped the whole frame"
    if why == "recompile_limit":
        limit = f" ({e['limit']})" if e.get("limit") is not None else ""
        which = limit_label(e.get("limit_name"))
        return f"hit the {which}{limit}: its new inputs run in eager"
    if why == "failure":
        return f"its compile failed ({e.get('fail_type')}){at}: torch runs it uncompiled"
    return "torch compiled no graph for it (nothing it could compile): it runs uncompiled"


class EagerFrames:
    """Per frame (the run summary's frame key): why torch left it in eager, and how many of its compiles did."""

    def __init__(self, max_frames: int = MAX_EAGER_FRAMES) -> None:
        self.max_frames = max_frames
        self.frames: dict[tuple[Any, ...], _Eager] = {}

    def add(self, rec: CompileRecord, key: tuple[Any, ...]) -> None:
        if rec.kind != "frame":
            return
        found = why_eager(rec)
        have = self.frames.get(key)
        if found is None:
            if have is not None and have.hit_by:  # compiled since it was left in eager: it runs compiled there
                have.hit_by.discard((rec.rank, rec.process_id))
            return
        if found.why in _UNTIL_COMPILED:
            hit_by = have.hit_by if have is not None and have.why == found.why else set()
            if hit_by is not None and len(hit_by) < MAX_HIT_STREAMS:
                hit_by.add((rec.rank, rec.process_id))
            found.hit_by = hit_by if hit_by is not None and len(hit_by) < MAX_HIT_STREAMS else None  # past it: kept
        if have is None:
            if len(self.frames) >= self.max_frames:
                return
            found.first_id = rec.id_str
            have = self.frames[key] = found
        elif WHYS.index(found.why) < WHYS.index(have.why):  # the most telling reason wins, its first compile kept
            found.compiles, found.first_id = have.compiles, have.first_id
            have = self.frames[key] = found
        elif have.why == found.why:
            have.hit_by = found.hit_by  # the same set, or None past its bound
        have.compiles += 1

    def to_dict(self) -> list[dict[str, Any]]:
        """One row per frame, the most telling reason first (a graph break in a loop, ...)."""
        out = []
        for key, e in sorted(self.frames.items(), key=lambda kv: (WHYS.index(kv[1].why), str(kv[0][0]), str(kv[0][1]))):
            if e.why in _UNTIL_COMPILED and e.hit_by is not None and not e.hit_by:
                continue  # every process that left it in eager compiled it again since: it runs compiled
            row: dict[str, Any] = {
                "function": key[0],
                "file": key[1],
                "line": key[2],
                "call_site": key[3] if len(key) > 3 else None,
                "why": e.why,
                "compiles": e.compiles,
                "first_compile": e.first_id,
                "code": e.code,
                "type": e.gb_type,
                "break_file": e.file,
                "break_line": e.line,
                "explanation": e.explanation,
                "fail_type": e.fail_type,
                "limit": e.limit,
                "limit_name": e.limit_name or "recompile_limit",
            }
            row["text"] = _text(row)
            out.append(row)
        return out


def eager_lines(rows: list[Mapping[str, Any]], width: int, where: Callable[[Mapping[str, Any]], str], most: int = 4) -> list[str]:
    """The frames left in eager, for the top of the summary: each frame and why, then torch's word on the break."""
    rows = [r for r in rows if isinstance(r, Mapping)]
    if not rows:
        return []
    costly = [r for r in rows if r.get("why") != "no_graph"]
    out = [
        f"FRAMES LEFT IN EAGER: {len(rows)}"
        + (f" ({len(costly)} by a graph break, a failure or the recompile limit)" if costly and len(costly) != len(rows) else "")
        + ": torch runs their whole work uncompiled"
    ]
    for r in (costly or rows)[:most]:
        out.extend(wrap(f"  {where(r)}: {r.get('text')}", width, 2, "      "))
        if r.get("code"):
            gb = f"{r['code']} {r.get('type') or ''}".strip()
            out.append(cut(f"    the break: {gb}" + (f": {r['explanation']}" if r.get("explanation") else ""), width))
    more = len(costly or rows) - most
    if more > 0:
        out.append(f"  ({more} more: --json or the HTML page lists them)")
    return out
