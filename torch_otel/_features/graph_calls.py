"""How often each compiled graph ran after it was compiled: a kind of event declared in one place.

torch records nothing per call of a compiled graph. Live capture counts the calls itself: as a compile installs its
graph (dynamo's ``__compiled_fn_N``, and a lazily compiled backward's callable), the attach table
(torch_otel._capture.sources) puts a counting wrapper in front of it (:meth:`GraphCalls.wrap`). A call then costs one
Python frame and an integer increment: no lock, no object that outlives the call, no clock read (the first call reads
the clock once; a graph whose inputs are all on the CPU also times one call in :data:`TIME_EVERY`, which needs no
device sync there). A count may lag the truth when threads call one graph at once (an increment can be lost between
its read and its write), never exceed it.

Here, once each:

- the counter (:class:`Graph`), its wrappers, and the bounded table of a process's counters (:class:`GraphCalls`):
  when it last ran is read by sampling the counts (:meth:`GraphCalls.sample`, every :data:`SAMPLE_S` seconds, before
  each scrape and at exit), so ``last_ns`` is when a count was last seen to have grown;
- the event that hands a compile its graph (:class:`GraphEvent`), how it joins its compile, and its facts derived
  once into the record (:class:`CompileCalls`: the graph's compile, its calls read when asked);
- what the sinks show: a span per compile written at exit as a child of the compile's root (torch_otel._sinks.late_spans),
  and how ``torch-otel diff`` reads it back; calls per frame and the compile seconds of graphs that ran at most once
  as metrics, read from the counters; the run summary's ``graph_calls`` part (calls per compiled graph, compile
  seconds per call, the compiles that never paid off).

A ``TORCH_TRACE`` log holds no calls: a replayed compile's calls are unknown (``null``), never 0.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .._core.compile_id import CompileId
from .._core.merge import Merge, basename, merge_with, num, sum_int, sum_s
from .._model.record import CompileRecord
from .feature import Attach, Feature, LateSpan, MetricsView, Observation, Series, SpanView, SummaryView

NAME = "graph_calls"  # the kind's key on the record, and the run summary's
PASSES = ("forward", "backward")
MAX_GRAPHS = 10_000  # counters a process keeps (each 1.2 kB with its wrapper, 0.6 kB after); past it, graphs run uncounted
MAX_PER_COMPILE = 64  # graphs one compile installs (DDP's buckets each have a backward)
TIME_EVERY = 16  # a CPU graph's calls 2, 18, 34, ... are timed (the first call is often a graph's slowest)
SAMPLE_S = 10.0  # how often live capture reads the counts: the resolution of "last ran"
AT_MOST = (0, 1, 10, 100)  # the run summary's shares: compile time in graphs that ran at most N times
DEAD_CALLS = 1  # a compile whose graphs ran at most once (the call that compiled them) never paid off

_time_ns = time.time_ns
_perf_ns = time.perf_counter_ns


# -- the counter ---------------------------------------------------------------------------------------------------


def _counting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind a counter of its calls (and the time of its first)."""
    n = 0
    first = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal n, first
        n += 1
        if n == 1:
            first = _time_ns()
        return fn(*args, **kwargs) if kwargs else fn(*args)  # torch calls a graph with positional arguments

    return counted


def _counting_timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind a counter of its calls, timing one call in :data:`TIME_EVERY` (a CPU graph: no sync needed)."""
    n = 0
    first = 0
    timed = 0
    run_ns = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal n, first, timed, run_ns
        n += 1
        if n % TIME_EVERY != 2:
            if n == 1:
                first = _time_ns()
            return fn(*args, **kwargs) if kwargs else fn(*args)  # torch calls a graph with positional arguments
        t0 = _perf_ns()
        out = fn(*args, **kwargs)
        run_ns += _perf_ns() - t0
        timed += 1
        return out

    return counted


def wrapper_codes() -> tuple[Any, ...]:
    """The wrappers' code objects: dynamo must never trace them (live capture marks them skipped, once)."""
    return (_counting(print).__code__, _counting_timed(print).__code__)


class Graph:
    """One compiled graph's counter: its calls, its first call, and (a CPU graph) the time of its timed calls.

    The wrapper torch calls holds the counts in its closure; this reads them through the closure's cells and holds
    neither the wrapper nor torch's graph (a graph torch evicts is freed, its counts stay readable here). ``last_ns``
    is the time of the latest sample that saw the count grow (:meth:`GraphCalls.sample`); ``last_after_ns`` the
    sample before it: the graph last ran between the two.
    """

    __slots__ = (
        "compile_id",
        "attempt",
        "pass_",
        "timed",
        "with_forward",
        "_cells",
        "_wrapper",
        "_restore",
        "seen",
        "last_ns",
        "last_after_ns",
        "_base",
        "__weakref__",
    )

    def __init__(self, compile_id: CompileId | None, attempt: int, pass_: str, timed: bool, with_forward: bool = False) -> None:
        self.compile_id = compile_id
        self.attempt = attempt
        self.pass_ = pass_
        self.timed = timed
        self.with_forward = with_forward  # a backward loaded with its forward's compile (a cache hit): not compiled lazily
        self._cells: dict[str, Any] = {}
        self._wrapper: weakref.ref[Any] | None = None
        self._restore: tuple[Any, ...] | None = None  # where torch's callable goes back on uninstrument
        self.seen = 0  # the count at the latest sample
        self.last_ns: int | None = None
        self.last_after_ns: int | None = None
        self._base = 0  # a forked child's count starts from what the parent had counted

    def _read(self, name: str) -> int:
        cell = self._cells.get(name)
        try:
            v = cell.cell_contents if cell is not None else 0
        except ValueError:  # an empty cell
            return 0
        return v if isinstance(v, int) else 0

    @property
    def calls(self) -> int:
        return max(0, self._read("n") - self._base)

    @property
    def first_ns(self) -> int | None:
        return (self._read("first") or None) if self.calls else None

    @property
    def timed_calls(self) -> int:
        return self._read("timed")

    @property
    def run_ns(self) -> int:
        return self._read("run_ns")

    def sample(self, now_ns: int) -> None:
        n = self.calls
        if n > self.seen:
            self.last_after_ns = self.last_ns
            self.last_ns = now_ns
        self.seen = n

    @property
    def last_call_ns(self) -> int | None:
        """When it last ran, at the latest: its first call if it ran once, else the sample that saw it grow last."""
        n = self.calls
        if n == 0:
            return None
        if n == 1:
            return self.first_ns
        return self.last_ns


@dataclass(frozen=True, slots=True)
class FixedGraph:
    """A graph's counts as a trace wrote them at exit (``torch-otel diff`` of an exported trace): no counter behind."""

    calls: int
    first_ns: int | None = None
    last_call_ns: int | None = None
    timed_calls: int = 0
    run_ns: int = 0
    pass_: str = "forward"
    with_forward: bool = False


class Counted(Protocol):
    """What a compile's facts read of each of its graphs (:class:`Graph`, or :class:`FixedGraph` read from a trace)."""

    @property
    def calls(self) -> int: ...

    @property
    def first_ns(self) -> int | None: ...

    @property
    def last_call_ns(self) -> int | None: ...

    @property
    def timed_calls(self) -> int: ...

    @property
    def run_ns(self) -> int: ...


class GraphCalls:
    """A process's counters, at most ``max_graphs`` (each kept after torch evicts its graph, for the summary).

    :meth:`wrap` is called on torch's thread as a compile installs a graph; :meth:`sample` reads the counts;
    :meth:`restore` puts torch's callables back (uninstrument); :meth:`after_fork_in_child` makes a forked child count
    its own calls from zero. ``clock`` is the time the samples are dated with.
    """

    def __init__(self, max_graphs: int = MAX_GRAPHS, clock: Callable[[], int] = time.time_ns) -> None:
        self.max_graphs = max_graphs
        self.clock = clock
        self.graphs: list[Graph] = []
        self.not_counted = 0  # graphs past the bound
        self._lock = threading.Lock()
        self._timed: dict[str, bool] = {}  # a forward's compile id -> whether it is timed (its backward follows it)
        self.compiles: list[CompileCalls] = []  # what the derive step found for each compile: the metrics read them
        self.sampled_ns: int | None = None

    def __len__(self) -> int:
        return len(self.graphs)

    def clear(self) -> None:
        """Forget every counter (a new bridge counts its own compiles' graphs)."""
        with self._lock:
            self.graphs = []
            self.compiles = []
            self._timed.clear()
            self.not_counted = 0
            self.sampled_ns = None

    def wrap(
        self,
        fn: Callable[..., Any],
        compile_id: CompileId | None,
        attempt: int,
        pass_: str,
        timed: bool | None,
        *,
        scope: dict[str, Any] | None = None,
        name: str | None = None,
        holder: Any = None,
        attr: str | None = None,
        with_forward: bool = False,
    ) -> tuple[Graph | None, Callable[..., Any]]:
        """``fn`` behind a counter, and the counter; ``(None, fn)`` past the bound. ``timed``: None for a backward,
        which is timed when its forward is. Where it lives (a global ``name`` of ``scope``, or ``holder.attr``) is
        where :meth:`restore` puts ``fn`` back."""
        key = str(compile_id)
        with self._lock:
            if len(self.graphs) >= self.max_graphs:
                self.not_counted += 1
                return None, fn
            if timed is None:
                timed = self._timed.get(key, False)
            elif pass_ == "forward" and len(self._timed) < self.max_graphs:
                self._timed[key] = timed
            g = Graph(compile_id, attempt, pass_, timed, with_forward)
            self.graphs.append(g)
        wrapper = (_counting_timed if timed else _counting)(fn)
        if getattr(fn, "_boxed_call", False):  # AOTAutograd calls a boxed backward with its argument list
            wrapper._boxed_call = True  # type: ignore[attr-defined]
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        wrapper.__torch_otel_graph__ = True  # type: ignore[attr-defined]
        g._cells = {k: c for k, c in zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=False) if k != "fn"}
        if scope is not None and name is not None:
            g._restore = ("global", scope, name)
        elif holder is not None and attr is not None:
            g._restore = ("attr", weakref.ref(holder), attr)

        def forget(_ref: Any, g: Graph = g) -> None:  # torch freed the graph: nothing to put back
            g._restore = None

        g._wrapper = weakref.ref(wrapper, forget)
        return g, wrapper

    def sample(self, now_ns: int | None = None) -> None:
        """Read every count: a count that grew since the last sample dates the graph's last run (at the latest)."""
        now = self.clock() if now_ns is None else now_ns
        for g in list(self.graphs):
            g.sample(now)
        self.sampled_ns = now

    def add_compile(self, cc: CompileCalls) -> None:
        with self._lock:
            if len(self.compiles) < self.max_graphs:
                self.compiles.append(cc)

    def restore(self) -> int:
        """Put torch's own callables back where the wrappers are still installed (uninstrument); how many."""
        done = 0
        for g in list(self.graphs):
            wrapper = g._wrapper() if g._wrapper is not None else None
            where, g._restore = g._restore, None
            if wrapper is None or where is None:
                continue
            fn = getattr(wrapper, "__wrapped__", None)
            try:
                if where[0] == "global":
                    _, scope, name = where
                    if scope.get(name) is wrapper:
                        scope[name] = fn
                        done += 1
                else:
                    holder = where[1]()
                    if holder is not None and getattr(holder, where[2], None) is wrapper:
                        setattr(holder, where[2], fn)
                        done += 1
            except Exception:  # noqa: BLE001, S110 - torch's object changed shape: leave it counting
                pass
        return done

    def after_fork_in_child(self) -> None:
        """A forked child counts its own calls: the parent's counts so far are its base."""
        self._lock = threading.Lock()
        for g in self.graphs:
            g._base = g._read("n")
            g.seen = 0
            g.last_ns = g.last_after_ns = None
            for k in ("first", "timed", "run_ns"):
                cell = g._cells.get(k)
                if cell is not None:
                    cell.cell_contents = 0

    # -- what the metrics read --------------------------------------------------------------------------------------
    def frames(self, limit: int) -> dict[tuple[str, str], int]:
        """Calls per (frame, pass) over every compile the derive step saw: the first ``limit`` frames compiled under
        their own name, the rest as ``other`` (a bounded label)."""
        out: dict[tuple[str, str], int] = {}
        named: dict[str, None] = {}
        for cc in list(self.compiles):
            frame = cc.frame
            if frame not in named:
                if len(named) < limit:
                    named[frame] = None
                else:
                    frame = "other"
            for pass_, n in cc.calls_by_pass().items():
                out[(frame, pass_)] = out.get((frame, pass_), 0) + n
        return out

    def dead_compile_s(self) -> float:
        """Compile seconds of the compiles whose graphs ran at most once so far."""
        return sum(cc.compile_ns for cc in list(self.compiles) if cc.dead()) / 1e9


GRAPHS = GraphCalls()  # the process's counters: live capture's default


# -- the event, and the facts derived once into the record ---------------------------------------------------------


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
    graphs that came with a frame's compile (served from a cache: no lazy compile of their own). ``uncounted``: the
    compile installed a graph past the bound (its calls are unknown).
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

    @property
    def pass_(self) -> str:
        return "backward" if self.kind == "backward" else "forward"

    def calls(self) -> int | None:
        """How many times the compile's code ran: its graphs' most (the graphs of one frame compile run together)."""
        if self.uncounted or not self.graphs:
            return None
        return max(g.calls for g in self.graphs)

    def backward_calls(self) -> int | None:
        return max(g.calls for g in self.with_forward) if self.with_forward else None

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
        return _earliest(self.graphs)

    def last_ns(self) -> int | None:
        return _latest(self.graphs)

    def timing(self) -> tuple[int, int]:
        """(calls timed, their run time in ns) over its graphs."""
        return sum(g.timed_calls for g in self.graphs), sum(g.run_ns for g in self.graphs)


def derive(rec: CompileRecord, part: GraphCalls | None) -> None:
    """The compile's graphs of its last attempt (one restarted after installing a graph never runs that one):
    ``rec.derived[NAME]``; and the live counters' table learns it, for the metrics."""
    events: list[GraphEvent] = rec.attached.get(NAME) or []
    if not events:
        return
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
    )
    rec.derived[NAME] = cc
    if part is not None:
        part.add_compile(cc)


def compile_calls(rec: CompileRecord) -> CompileCalls | None:
    """The record's graphs and calls (None: it installed no graph, or its calls are not known, as on replay)."""
    found = rec.derived.get(NAME)
    return found if isinstance(found, CompileCalls) else None


# -- the spans' view: one span per compile at exit, a child of its root; and how diff reads it back -----------------

SPAN = "torch.compile.graph_calls"


class Attributes:
    """The ``torch.compile.graph_calls`` span's attributes. Its start is the graph's first call, its end when it last
    ran (at the latest: when a count was last seen to have grown)."""

    CALLS = "torch.compile.graph.calls"
    PASS = "torch.compile.graph.pass"
    GRAPHS = "torch.compile.graph.count"
    BACKWARD_CALLS = "torch.compile.graph.backward_calls"
    COMPILE_S_PER_CALL = "torch.compile.graph.compile_s_per_call"
    RUN_S_MEAN = "torch.compile.graph.run_s_mean"
    TIMED_CALLS = "torch.compile.graph.timed_calls"
    LAST_CALL_AFTER = "torch.compile.graph.last_call_after_unix_nano"


def late_spans(cc: Any) -> list[LateSpan]:
    """A compile's calls as one span (see :class:`Attributes`); none for a compile whose calls are not known."""
    if not isinstance(cc, CompileCalls):
        return []
    n = cc.calls()
    if n is None:
        return []
    a_ = Attributes
    a: dict[str, Any] = {a_.CALLS: n, a_.PASS: cc.pass_}
    if len(cc.graphs) > 1:
        a[a_.GRAPHS] = len(cc.graphs)
    b = cc.backward_calls()
    if b is not None:
        a[a_.BACKWARD_CALLS] = b
    if n:
        a[a_.COMPILE_S_PER_CALL] = round(cc.compile_ns / 1e9 / n, 9)
    timed, run_ns = cc.timing()
    if timed:
        a[a_.TIMED_CALLS] = timed
        a[a_.RUN_S_MEAN] = round(run_ns / timed / 1e9, 9)
    after = [g.last_after_ns for g in cc.graphs if isinstance(g, Graph) and g.last_after_ns is not None]
    if n > 1 and after:
        a[a_.LAST_CALL_AFTER] = max(after)
    start = cc.first_ns() or cc.end_ns
    end = cc.last_ns() or start
    return [(SPAN, a, start, max(start, end))]


def await_late(rec: CompileRecord) -> None:
    """A frame or backward compile read back from a trace: its calls are unknown until its calls span comes."""
    if rec.kind in ("frame", "backward"):
        code = rec.code
        rec.derived[NAME] = CompileCalls(
            rec.id_str, rec.kind, frame_of(rec.compile_id), code.function, code.file, code.line, rec.duration_ns,
            rec.root.end_ns or rec.root.start_ns, rec.rank,
        )  # fmt: skip


def read_late(name: str, a: Mapping[str, Any], start_ns: int, end_ns: int, rec: CompileRecord) -> None:
    """An exported ``torch.compile.graph_calls`` span back into its compile's record (torch-otel diff)."""
    if name != SPAN:
        return
    cc = rec.derived.get(NAME)
    if not isinstance(cc, CompileCalls):
        await_late(rec)
        cc = rec.derived.get(NAME)
        if not isinstance(cc, CompileCalls):
            return
    a_ = Attributes
    n = a.get(a_.CALLS)
    if not isinstance(n, int) or isinstance(n, bool):
        return
    timed = a.get(a_.TIMED_CALLS)
    mean = a.get(a_.RUN_S_MEAN)
    timed_n = timed if isinstance(timed, int) and not isinstance(timed, bool) else 0
    run_ns = int(num(mean) * 1e9 * timed_n)
    cc.graphs = (FixedGraph(n, start_ns if n else None, end_ns if n else None, timed_n, run_ns, cc.pass_),)
    b = a.get(a_.BACKWARD_CALLS)
    if isinstance(b, int) and not isinstance(b, bool):
        cc.with_forward = (FixedGraph(b, pass_="backward", with_forward=True),)


# -- the metrics' view: read from the counters -----------------------------------------------------------------------

DETAIL_FRAMES = 32  # frames with a label of their own on a detail rank
FURTHER_FRAMES = 4  # and on any other rank (the fleet's series budget: docs/metrics.md)

SERIES = (
    Series(
        "torch_compile_graph_calls",
        "counter",
        "Calls of compiled graphs since they were compiled, by frame (tlparse's frame id: the first 32 frames on a "
        "detail rank, 4 on the others, then other) and pass (forward: dynamo's graph; backward: AOTAutograd's).",
        ("rank", "frame", "pass"),
    ),
    Series(
        "torch_compile_dead_compile_seconds",
        "gauge",
        "Compile seconds of the compiles whose graphs ran at most once so far (the call that compiled them): "
        "recompiles that did not pay off (docs/metrics.md).",
        ("rank",),
        "s",
    ),
)


def sampled_view(graphs: GraphCalls) -> Callable[[str, bool], Iterator[Observation]]:
    def sampled(rank: str, detail: bool) -> Iterator[Observation]:
        """What the counters stand at now (counters as totals: the metrics sink adds their growth)."""
        if not graphs.compiles:
            return
        for (frame, pass_), n in sorted(graphs.frames(DETAIL_FRAMES if detail else FURTHER_FRAMES).items()):
            yield "torch_compile_graph_calls", (rank, frame, pass_), n, None
        yield "torch_compile_dead_compile_seconds", (rank,), round(graphs.dead_compile_s(), 6), None

    return sampled


# -- the run summary's view: its ``graph_calls`` part --------------------------------------------------------------

MAX_COMPILES = MAX_GRAPHS  # compiles the part keeps
MAX_FRAMES = 50  # frames listed
MAX_FRAME_GRAPHS = 32  # graphs listed per frame
MAX_DEAD = 20  # compiles listed among those that never paid off

FrameKey = tuple[str, str | None, int | None]


def _s(ns: float) -> float:
    return round(ns / 1e9, 6)


def _t(ns: int | None) -> float | None:
    return round(ns / 1e9, 3) if ns else None


def _frame_key(cc: CompileCalls) -> FrameKey:
    if cc.function is not None and cc.file is not None:
        return (cc.function, cc.file, cc.line)
    return (f"({'torch.compile.backward' if cc.kind == 'backward' else 'torch.compile'})", None, None)


class CallsPart:
    """A run's compiles and the calls of their graphs, read when the summary is written (bounded)."""

    def __init__(self, max_compiles: int = MAX_COMPILES) -> None:
        self.max_compiles = max_compiles
        self.kept: list[CompileCalls] = []
        self.more = 0  # compiles with graphs past the bound

    def add(self, record: CompileRecord) -> None:
        cc = compile_calls(record)
        if cc is None:
            return
        if len(self.kept) < self.max_compiles:
            self.kept.append(cc)
        else:
            self.more += 1

    def to_dict(self, facts: Mapping[str, Any]) -> Any:
        known = [cc for cc in self.kept if cc.calls() is not None]
        if not known and not any(cc.uncounted for cc in self.kept):
            return None  # no compile of this run had its calls counted (replay, counting off, a trace without them)
        all_s = num(facts.get("wall_s"))
        rows: dict[tuple[str, str], dict[str, Any]] = {}  # (id, kind) -> graph row, the ranks' calls added up
        frames: dict[FrameKey, list[tuple[str, str]]] = {}

        def row(k: tuple[str, str], cc: CompileCalls) -> dict[str, Any]:
            r = rows.get(k)
            if r is None:
                r = rows[k] = {"id": k[0], "kind": k[1], "calls": 0, "compile_s": 0.0, "timed_calls": 0,
                               "run_s_total": 0.0, "first_call": None, "last_call": None}  # fmt: skip
                frames.setdefault(_frame_key(cc), []).append(k)
            return r

        for cc in known:
            r = row((cc.compile_id, cc.kind), cc)
            timed, run_ns = cc.timing()
            r["calls"] += cc.calls() or 0
            r["compile_s"] = round(r["compile_s"] + cc.compile_ns / 1e9, 6)
            r["timed_calls"] += timed
            r["run_s_total"] = round(r["run_s_total"] + run_ns / 1e9, 9)
            _dates(r, cc.first_ns(), cc.last_ns())
            b = cc.backward_calls()
            if b is not None:  # a backward compiled with its forward (dynamic shapes, or a cache that served both):
                # a graph of its own, as a lazily compiled one is; its compile time is in its forward's
                rb = row((cc.compile_id, "backward"), cc)
                rb["calls"] += b
                rb["with_forward"] = True
                bt = [(g.timed_calls, g.run_ns) for g in cc.with_forward]
                rb["timed_calls"] += sum(t for t, _ in bt)
                rb["run_s_total"] = round(rb["run_s_total"] + sum(n for _, n in bt) / 1e9, 9)
                _dates(rb, _earliest(cc.with_forward), _latest(cc.with_forward))
        for r in rows.values():
            _finish_row(r)
        out_frames = []
        for (fn, path, line), keys in frames.items():
            graphs = sorted((rows[k] for k in keys), key=lambda r: _id_order(r["id"], r["kind"]))
            out_frames.append(
                {
                    "function": fn,
                    "file": path,
                    "line": line,
                    "compiles": len(graphs),
                    "calls": sum(r["calls"] for r in graphs if r["kind"] != "backward"),
                    "compile_s": round(sum(r["compile_s"] for r in graphs), 6),
                    "dead": sum(1 for r in graphs if r["calls"] <= DEAD_CALLS),
                    "dead_compile_s": round(sum(r["compile_s"] for r in graphs if r["calls"] <= DEAD_CALLS), 6),
                    "graphs": graphs[:MAX_FRAME_GRAPHS],
                    "more_graphs": max(0, len(graphs) - MAX_FRAME_GRAPHS),
                }
            )
        out_frames.sort(key=lambda f: (-f["compile_s"], str(f["function"])))
        dead = sorted((dict(r, **_where(frames, k)) for k, r in rows.items() if r["calls"] <= DEAD_CALLS),
                      key=lambda r: (-r["compile_s"], _id_order(r["id"], r["kind"])))  # fmt: skip
        return {
            "graphs": len(rows),
            "uncounted": sum(1 for cc in self.kept if cc.calls() is None) + self.more,
            "calls": sum(r["calls"] for r in rows.values()),
            "compile_s": round(sum(r["compile_s"] for r in rows.values()), 6),
            "ran_at_most": [_at_most(rows.values(), n, all_s) for n in AT_MOST],
            "dead": dead[:MAX_DEAD],
            "frames": out_frames[:MAX_FRAMES],
        }


def _dates(r: dict[str, Any], first_ns: int | None, last_ns: int | None) -> None:
    first, last = _t(first_ns), _t(last_ns)
    r["first_call"] = first if r["first_call"] is None or (first and first < r["first_call"]) else r["first_call"]
    r["last_call"] = last if r["last_call"] is None or (last and last > r["last_call"]) else r["last_call"]


def _earliest(graphs: tuple[Counted, ...]) -> int | None:
    firsts = [f for g in graphs if (f := g.first_ns) is not None]
    return min(firsts) if firsts else None


def _latest(graphs: tuple[Counted, ...]) -> int | None:
    lasts = [t for g in graphs if (t := g.last_call_ns) is not None]
    return max(lasts) if lasts else None


def _where(frames: Mapping[FrameKey, list[tuple[str, str]]], k: tuple[str, str]) -> dict[str, Any]:
    for (fn, path, line), keys in frames.items():
        if k in keys:
            return {"function": fn, "file": path, "line": line}
    return {}


def _id_order(cid: Any, kind: Any) -> tuple[Any, ...]:
    parts = [int(p) if p.isdigit() else p for p in str(cid).replace("!", "").split("/")]
    return (*[(0, p) if isinstance(p, int) else (1, p) for p in parts], 0 if kind == "frame" else 1, str(kind))


def _finish_row(r: dict[str, Any]) -> dict[str, Any]:
    """The per-call figures of a graph row, from its sums (after a merge too)."""
    n = int(num(r.get("calls")))
    # a backward compiled with its forward has no compile time of its own (it is in its forward's)
    r["compile_s_per_call"] = round(num(r.get("compile_s")) / n, 9) if n and not r.get("with_forward") else None
    timed = int(num(r.get("timed_calls")))
    r["run_s_mean"] = round(num(r.get("run_s_total")) / timed, 9) if timed else None
    return r


def _at_most(rows: Any, n: int, all_s: float) -> dict[str, Any]:
    picked = [r for r in rows if r["calls"] <= n]
    s = round(sum(r["compile_s"] for r in picked), 6)
    return {"calls": n, "compiles": len(picked), "compile_s": s, "of_compile_s": round(all_s, 6),
            "share": round(s / all_s, 4) if all_s else 0.0}  # fmt: skip


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _short(fn: Any, path: Any, line: Any) -> str:
    b = basename(path)
    return f"{fn} ({b}:{line if line is not None else '?'})" if b else str(fn)


def _ids(rows: list[Mapping[str, Any]]) -> str:
    ids = [str(r["id"]) for r in rows]
    return ids[0] if len(ids) == 1 else f"{ids[0]} to {ids[-1]}" if len(ids) > 2 else " and ".join(ids)


def summary_text(facts: Mapping[str, Any], width: int) -> list[str]:
    """The summary's lines: calls in all, the compiles that never paid off and their share, the frames that cost most."""
    c = facts.get(NAME)
    if not isinstance(c, Mapping) or not c.get("graphs"):
        return []
    at_most = {r["calls"]: r for r in c.get("ran_at_most") or []}
    once = at_most.get(1) or {}
    out = [
        f"graph calls: {c['graphs']} compiled graph{'s' if c['graphs'] != 1 else ''} ran {c['calls']:,} times; {once.get('compiles', 0)} ran at most once: "
        f"{num(once.get('compile_s')):.2f} s of compiling ({num(once.get('share')):.0%} of all compile time)"
    ]
    shares = " / ".join(f"{num(at_most[n].get('share')):.0%}" for n in AT_MOST if n in at_most)
    out.append(f"  share of compile time in graphs that ran at most {' / '.join(str(n) for n in AT_MOST)} times: {shares}")
    for f in (c.get("frames") or [])[:2]:
        graphs = [g for g in f.get("graphs") or [] if g.get("kind") != "backward"]
        dead = int(num(f.get("dead")))
        head = f"  {_short(f['function'], f['file'], f['line'])}: {f['compile_s']:.2f} s compiling" + (
            f", {dead} graph{'s' if dead != 1 else ''} ran at most once ({num(f.get('dead_compile_s')):.2f} s)" if dead else ""
        )
        listed = ", ".join(
            f"{g['id']} {g['calls']:,}" + (f" ({g['compile_s_per_call']:.2g})" if g.get("compile_s_per_call") else "")
            for g in graphs[:8]
        )
        more = len(graphs) - 8 + int(num(f.get("more_graphs")))
        out.append(_cut(head, width))
        out.append(_cut(f"    calls per graph (compile s per call): {listed}" + (f" (+{more} more)" if more > 0 else ""), width))
    return out


def _merge_frames(values: list[Any]) -> list[dict[str, Any]]:
    """Frames of several ranks' summaries as one: their graphs by id, calls and compile seconds added up."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in values:
        for f in part or []:
            if not isinstance(f, Mapping):
                continue
            k = (f.get("function"), basename(f.get("file")), f.get("line"))
            m = merged.setdefault(k, {**dict(f), "graphs": [], "more_graphs": 0, "compiles": 0, "calls": 0,
                                      "compile_s": 0.0, "dead": 0, "dead_compile_s": 0.0})  # fmt: skip
            m["more_graphs"] += int(num(f.get("more_graphs")))
            by_id = {(g["id"], g["kind"]): g for g in m["graphs"]}
            for g in f.get("graphs") or []:
                gk = (g.get("id"), g.get("kind"))
                if gk in by_id:
                    _add_rows(by_id[gk], g)
                else:
                    by_id[gk] = dict(g)
                    m["graphs"].append(by_id[gk])
    out = []
    for m in merged.values():
        graphs = sorted((_finish_row(g) for g in m["graphs"]), key=lambda r: _id_order(r["id"], r["kind"]))
        m["graphs"] = graphs[:MAX_FRAME_GRAPHS]
        m["more_graphs"] += max(0, len(graphs) - MAX_FRAME_GRAPHS)
        m["compiles"] = len(graphs)
        m["calls"] = sum(int(num(g["calls"])) for g in graphs if g.get("kind") != "backward")
        m["compile_s"] = round(sum(num(g["compile_s"]) for g in graphs), 6)
        m["dead"] = sum(1 for g in graphs if num(g["calls"]) <= DEAD_CALLS)
        m["dead_compile_s"] = round(sum(num(g["compile_s"]) for g in graphs if num(g["calls"]) <= DEAD_CALLS), 6)
        out.append(m)
    return sorted(out, key=lambda f: (-f["compile_s"], str(f["function"])))[:MAX_FRAMES]


def _add_rows(into: dict[str, Any], g: Mapping[str, Any]) -> None:
    for k in ("calls", "timed_calls", "backward_calls"):
        if k in g or k in into:
            into[k] = int(num(into.get(k)) + num(g.get(k)))
    for k in ("compile_s", "run_s_total"):
        into[k] = round(num(into.get(k)) + num(g.get(k)), 9)
    firsts = [v for v in (into.get("first_call"), g.get("first_call")) if isinstance(v, (int, float))]
    lasts = [v for v in (into.get("last_call"), g.get("last_call")) if isinstance(v, (int, float))]
    into["first_call"] = min(firsts) if firsts else None
    into["last_call"] = max(lasts) if lasts else None


def _merge_at_most(values: list[Any]) -> list[dict[str, Any]]:
    by_n: dict[Any, dict[str, Any]] = {}
    for part in values:
        for r in part or []:
            if isinstance(r, Mapping):
                m = by_n.setdefault(
                    r.get("calls"), {"calls": r.get("calls"), "compiles": 0, "compile_s": 0.0, "of_compile_s": 0.0}
                )
                m["compiles"] += int(num(r.get("compiles")))
                m["compile_s"] = round(m["compile_s"] + num(r.get("compile_s")), 6)
                m["of_compile_s"] = round(m["of_compile_s"] + num(r.get("of_compile_s")), 6)
    for m in by_n.values():
        m["share"] = round(m["compile_s"] / m["of_compile_s"], 4) if m["of_compile_s"] else 0.0
    return [by_n[n] for n in sorted(by_n, key=lambda n: num(n))]


def _merge_dead(values: list[Any]) -> list[dict[str, Any]]:
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in values:
        for r in part or []:
            if not isinstance(r, Mapping):
                continue
            k = (r.get("id"), r.get("kind"), r.get("function"), basename(r.get("file")), r.get("line"))
            if k in merged:
                _add_rows(merged[k], r)
            else:
                merged[k] = dict(r)
    rows = [_finish_row(r) for r in merged.values()]
    return sorted(rows, key=lambda r: (-num(r.get("compile_s")), _id_order(r.get("id"), r.get("kind"))))[:MAX_DEAD]


SECTION = {
    "graphs": Merge(sum_int),
    "uncounted": Merge(sum_int),
    "calls": Merge(sum_int),
    "compile_s": Merge(sum_s),
    "ran_at_most": Merge(_merge_at_most),
    "dead": Merge(_merge_dead),
    "frames": Merge(_merge_frames),
}


def _merge_part(values: list[Any]) -> dict[str, Any] | None:
    """The ranks' parts key by key; None when no rank counted its calls (a replayed job)."""
    parts = [v for v in values if isinstance(v, Mapping)]
    return merge_with(SECTION, parts) if parts else None


MERGE = Merge(_merge_part)


# -- the kind ------------------------------------------------------------------------------------------------------


def make_kind(graphs: GraphCalls) -> Feature:
    """The kind, reading ``graphs`` for its sampled metrics (a test passes its own table)."""
    return Feature(
        NAME,
        GraphEvent,
        Attach(NAME, MAX_PER_COMPILE),
        derive=derive,
        spans=SpanView(
            lambda rec, fmt: [],
            None,
            (SPAN, *(v for k, v in vars(Attributes).items() if k.isupper())),
            late_spans=(SPAN,),
            write_late=late_spans,
            read_late=read_late,
            await_late=await_late,
        ),
        metrics=MetricsView(SERIES, lambda rec, rank: (), sampled_view(graphs)),
        summary=SummaryView(NAME, CallsPart, summary_text, MERGE),
    )


KIND = make_kind(GRAPHS)

__all__ = [
    "GRAPHS",
    "KIND",
    "NAME",
    "CompileCalls",
    "FixedGraph",
    "Graph",
    "GraphCalls",
    "GraphEvent",
    "compile_calls",
    "frame_of",
    "late_spans",
    "make_kind",
    "wrapper_codes",
]
