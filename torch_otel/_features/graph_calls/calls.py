"""Graph calls' event and the facts derived once into the record: a compile's graphs, and what their calls bought.

The event (:class:`GraphEvent`) hands a compile the counter of a graph it installed; the derive step (:func:`derive`)
keeps the graphs of the compile's last attempt as :class:`CompileCalls` in ``record.derived``, whose calls are read
when asked (the counts go on after the compile). A ``TORCH_TRACE`` log holds no calls: a replayed compile's calls are
unknown (``None``), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._core.compile_id import CompileId
from ..._core.paths import library_call_site
from ..._model.record import CompileRecord
from .counters import Counted, Graph

__all__ = [
    "DEAD_CALLS",
    "MAX_PER_COMPILE",
    "NAME",
    "CompileCalls",
    "GraphEvent",
    "compile_calls",
    "derive",
    "earliest",
    "frame_of",
    "latest",
    "ran_alone",
]


NAME = "graph_calls"  # the kind's key on the record, and the run summary's
PASSES = ("forward", "backward")


MAX_PER_COMPILE = 64  # graphs one compile installs (DDP's buckets each have a backward)


DEAD_CALLS = 1  # a compile whose graphs ran at most once (the call that compiled them) never paid off


@dataclass(slots=True)
class GraphEvent:
    """A compile installed a graph (``graph``: its counter; None: past the bound, so not counted)."""

    compile_id: CompileId | None
    graph: Graph | None
    attempt: int = 0
    rank: int | None = None
    ts_ns: int | None = None


def frame_of(compile_id: CompileId | None) -> str:
    """A compile's frame as tlparse names it: ``0`` for ``0/3``, ``!1/0`` for ``!1/0/2``."""
    if compile_id is None or compile_id.frame_id is None:
        return "-"
    ca = f"!{compile_id.compiled_autograd_id}/" if compile_id.compiled_autograd_id is not None else ""
    return f"{ca}{compile_id.frame_id}"


@dataclass(slots=True)
class CompileCalls:
    """One compile's graphs and what its calls bought: derived once into the record, the counts read when asked.

    ``graphs`` are the compile's own (a frame's forward graphs, a lazy backward's graph); ``with_forward`` the backward
    graphs that came with a frame's compile (served from a cache, or compiled with it under dynamic shapes: no lazy
    compile of their own; one compiled with compiled autograd on is left out until it runs, :func:`ran_alone`).
    ``uncounted``: the compile installed a graph past the bound (its calls are unknown).
    """

    compile_id: str
    kind: str
    frame: str
    function: str | None
    file: str | None
    line: int | None
    compile_ns: int
    end_ns: int
    rank: int | None = None
    graphs: tuple[Counted, ...] = ()
    with_forward: tuple[Counted, ...] = ()
    uncounted: bool = False
    called_from: str | None = None  # a library's frame: the user's call site (the run summary keys its frames by it)

    @property
    def pass_(self) -> str:
        return "backward" if self.kind == "backward" else "forward"

    def calls(self) -> int | None:
        """How many times the compile's code ran: its graphs' most (the graphs of one frame compile run together)."""
        if self.uncounted or not self.graphs:
            return None
        return max(g.calls for g in self.graphs)

    def backward_calls(self) -> int | None:
        """How many times the backward that came with the compile ran; None: none came, or none runs as a graph."""
        own = ran_alone(self.with_forward)
        return max(g.calls for g in own) if own else None

    def calls_by_pass(self) -> dict[str, int]:
        out: dict[str, int] = {}
        n = self.calls()
        if n is not None:
            out[self.pass_] = n
        b = self.backward_calls()
        if b is not None:
            out["backward"] = out.get("backward", 0) + b
        return out

    def dead(self) -> bool:
        n = self.calls()
        return n is not None and n <= DEAD_CALLS

    def first_ns(self) -> int | None:
        return earliest(self.graphs)

    def last_ns(self) -> int | None:
        return latest(self.graphs)

    def timing(self) -> tuple[int, int]:
        """(calls timed, their run time in ns) over its graphs."""
        return sum(g.timed_calls for g in self.graphs), sum(g.run_ns for g in self.graphs)


def derive(rec: CompileRecord, state: Any) -> None:
    """The compile's graphs of its last attempt (one restarted after installing a graph never runs that one):
    ``rec.derived[NAME]``; and the live state (torch_otel._features.graph_calls.state) learns it, for the metrics."""
    events: list[GraphEvent] = rec.attached.get(NAME) or []
    if not events:
        return
    if rec.fail_type is not None or (rec.metrics or {}).get("has_guarded_code") is False:
        return  # a graph its backend made before the compile failed (a constraint mark_dynamic broke): never installed
    top = max(ev.attempt for ev in events)
    mine = [ev for ev in events if ev.attempt == top]
    graphs = [ev.graph for ev in mine if ev.graph is not None]
    code = rec.code
    cc = CompileCalls(
        rec.id_str,
        rec.kind,
        frame_of(rec.compile_id),
        code.function,
        code.file,
        code.line,
        rec.duration_ns,
        rec.root.end_ns if rec.root.end_ns is not None else rec.root.start_ns,
        rec.rank,
        graphs=tuple(g for g in graphs if not g.with_forward),
        with_forward=tuple(g for g in graphs if g.with_forward),
        uncounted=any(ev.graph is None for ev in mine),
        called_from=library_call_site(code.file, rec.call_site),
    )
    rec.derived[NAME] = cc
    if state is not None:
        state.add_compile(cc)


def compile_calls(rec: CompileRecord) -> CompileCalls | None:
    """The record's graphs and calls (None: it installed no graph, or its calls are not known, as on replay)."""
    found = rec.derived.get(NAME)
    return found if isinstance(found, CompileCalls) else None


def ran_alone(graphs: tuple[Counted, ...]) -> tuple[Counted, ...]:
    """The backwards that came with their forward and run as graphs of their own. Under compiled autograd none does:
    compiled autograd traces each AOT backward into its own graphs (the ``!N/...`` compiles, counted with their calls),
    and its lazy backwards never compile. So a backward compiled with compiled autograd on that never ran is no graph
    that ran 0 times (nor a compile that never paid off): it is left out, as the lazy ones are. One that ran (compiled
    autograd was off by then) is counted."""
    return tuple(g for g in graphs if g.calls or not g.under_compiled_autograd)


def earliest(graphs: tuple[Counted, ...]) -> int | None:
    firsts = [f for g in graphs if (f := g.first_ns) is not None]
    return min(firsts) if firsts else None


def latest(graphs: tuple[Counted, ...]) -> int | None:
    lasts = [t for g in graphs if (t := g.last_call_ns) is not None]
    return max(lasts) if lasts else None
