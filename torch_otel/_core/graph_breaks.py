"""Graph-break messages: parse torch's text once, map it to the registry's stable GB codes."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

_AT_RE = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.M)
_REASON_RE = re.compile(r"^Graph Break Reason: ", re.M)
_SKIP_RE = re.compile(r"torch\.compile will skip tracing the frame (?P<frame>.+?) and fall back to eager")
# How dynamo's root tracer words a graph break it could not handle (torch 2.10 to 2.13): it skips the frame, which
# runs in eager, and the compile fails. convert_frame words the same outcome as _SKIP_RE.
_UNHANDLED = "Failed to handle graph break gracefully"
# How dynamo words a graph break it cannot resume after (torch 2.10 to 2.15, symbolic_convert.step): it compiles up to
# the last point it could resume from and runs the rest of the function in eager. torch counts it apart from the graph
# breaks it resumes after (counters["unimplemented"], not counters["graph_break"]).
_CANNOT_RESUME = "Encountered graph break that we cannot resume from"
# The graph break torch adds when the first one was inside a loop: it skips the whole frame (GB7000)
_IN_LOOP_RE = re.compile(r"^graph break in loop\s*$", re.M | re.I)
_GB_URL_RE = re.compile(r"/gb/gb(\d{4})\.html")


@dataclass(slots=True)
class ParsedGraphBreak:
    reason: str
    gb_type: str | None
    filename: str | None
    lineno: int | None
    skipped_frame: bool  # torch could not handle it: it skipped the frame (eager), and the compile failed
    ends_frame: bool = False  # torch could not resume after it: the rest of the function ran in eager


def parse_graph_break(text: str) -> ParsedGraphBreak:
    """Parse a ``graph_breaks`` log line or a ``dynamo_graph_break_reason`` payload.

    Only torch's reason and the user's file:line are kept: the user code
    traceback (which quotes source lines) is dropped here, by construction.
    """
    filename = lineno = None
    m = _AT_RE.search(text.split("\n", 2)[0] if text.startswith("Graph break") else text[:2000])
    if m:
        filename, lineno = m.group("file"), int(m.group("line"))
    skipped = False
    rm = _REASON_RE.search(text)
    if rm:
        body = text[rm.end() :]
        for stop in (
            "\n\nUser code traceback:",
            "\nUser code traceback:",
            "\n\nStack variable source",
            "\nTraceback (most recent",
        ):
            idx = body.find(stop)
            if idx >= 0:
                body = body[:idx]
        reason = body.strip()
        skipped = reason.startswith(_UNHANDLED) or _SKIP_RE.search(text) is not None
        ends = not skipped and reason.startswith(_CANNOT_RESUME)
    else:
        sm = _SKIP_RE.search(text)
        skipped = sm is not None
        ends = False
        reason = text.split("\nThe graph break occurred", 1)[0].strip() if skipped else text.split("\n", 1)[0].strip()
    return ParsedGraphBreak(reason, graph_break_type(reason), filename, lineno, skipped, ends)


def in_loop(text: str | None) -> bool:
    """Whether torch's text says the graph break was inside a loop, so torch skipped the whole frame (GB7000)."""
    return bool(text) and (_IN_LOOP_RE.search(text or "") is not None or "/gb/gb7000.html" in (text or ""))


def explanation(reason: str | None) -> str | None:
    """torch's one-line explanation of a graph break (the ``  Explanation:`` line of its reason), if it gives one."""
    for line in (reason or "").split("\n"):
        if line.startswith("  Explanation:"):
            return line[len("  Explanation:") :].strip() or None
    return None


_HOP_CONTEXT = "Higher Order Operator:"  # the context torch adds to a break inside a higher-order op, under its type


def graph_break_type(reason: str) -> str | None:
    """torch's ``gb_type``: a line before ``  Explanation:`` in the reason, the first that torch's registry of graph
    breaks names, else the last. A break inside a higher-order op has a line of context between the type and the
    explanation (``Higher Order Operator: torch.utils.checkpoint.checkpoint``), which is not its type."""
    lines = reason.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("  Explanation:") and i > 0:
            before = [b for prev in lines[:i] if (b := prev.strip()) and not b.startswith(_HOP_CONTEXT)]
            if not before:
                return None
            known = _registry()
            return next((b for b in before if b in known), before[-1])
    return None


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, str]:
    """gb_type -> GB code, from ``torch/_dynamo/graph_break_registry.json`` (517 entries)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return {}
        path = Path(next(iter(spec.submodule_search_locations))) / "_dynamo" / "graph_break_registry.json"
        data = json.loads(path.read_text())
    except Exception:
        return {}
    out: dict[str, str] = {}
    for code, entries in data.items():
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("Gb_type"), str):
                out.setdefault(entry["Gb_type"], code)
    return out


def graph_break_code(gb_type: str | None, reason: str = "") -> str:
    """The stable registry code (``GB0039``) of a graph break, or ``other``."""
    if gb_type:
        code = _registry().get(gb_type)
        if code:
            return code
    m = _GB_URL_RE.search(reason)
    if m:
        return f"GB{m.group(1)}"
    return "other"
