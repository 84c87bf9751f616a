"""Graph calls' counters: how often each compiled graph ran, counted as it runs, and the bounded table of them.

torch records nothing per call of a compiled graph. As a compile installs its graph (dynamo's ``__compiled_fn_N``, and
a lazily compiled backward's callable), the feature's hooks (torch_otel._features.graph_calls.state) put a counting
wrapper in front of it (:meth:`GraphCalls.wrap`). A call then costs one Python frame and an integer increment: no lock,
no object that outlives the call, no clock read (the first call reads the clock once; a graph whose inputs are all on
the CPU also times one call in :data:`TIME_EVERY`, which needs no device sync there). A count may lag the truth when
threads call one graph at once (an increment can be lost between its read and its write), never exceed it.

When a graph last ran is read by sampling the counts (:meth:`GraphCalls.sample`: every :data:`SAMPLE_S` seconds,
before each scrape and at exit), so ``last_ns`` is when a count was last seen to have grown.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..._core.compile_id import CompileId

__all__ = ["MAX_GRAPHS", "SAMPLE_S", "TIME_EVERY", "Counted", "FixedGraph", "Graph", "GraphCalls", "wrapper_codes"]


MAX_GRAPHS = 10_000  # counters a process keeps (each 1.2 kB with its wrapper, 0.6 kB after); past it, graphs run uncounted


TIME_EVERY = 16  # a CPU graph's calls 2, 18, 34, ... are timed (the first call is often a graph's slowest)
SAMPLE_S = 10.0  # how often live capture reads the counts: the resolution of "last ran"


_time_ns = time.time_ns
_perf_ns = time.perf_counter_ns


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
        "under_compiled_autograd",
        "_cells",
        "_wrapper",
        "_restore",
        "seen",
        "last_ns",
        "last_after_ns",
        "_base",
        "__weakref__",
    )

    def __init__(
        self,
        compile_id: CompileId | None,
        attempt: int,
        pass_: str,
        timed: bool,
        with_forward: bool = False,
        under_compiled_autograd: bool = False,
    ) -> None:
        self.compile_id = compile_id
        self.attempt = attempt
        self.pass_ = pass_
        self.timed = timed
        self.with_forward = with_forward  # a backward that came with its forward's compile (a cache hit, dynamic shapes)
        # compiled with compiled autograd on: compiled autograd traces the backward into its own graphs (``!N/...``),
        # so it runs there, never as this graph (it is counted only if it runs with compiled autograd off)
        self.under_compiled_autograd = under_compiled_autograd
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
    """A graph's counts as a trace wrote them at exit (``torch-otel diff`` of a traces file): no counter behind."""

    calls: int
    first_ns: int | None = None
    last_call_ns: int | None = None
    timed_calls: int = 0
    run_ns: int = 0
    pass_: str = "forward"
    with_forward: bool = False
    under_compiled_autograd: bool = False


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

    @property
    def under_compiled_autograd(self) -> bool: ...


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
        self.sampled_ns: int | None = None

    def __len__(self) -> int:
        return len(self.graphs)

    def clear(self) -> None:
        """Forget every counter (a new bridge counts its own compiles' graphs)."""
        with self._lock:
            self.graphs = []
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
        under_compiled_autograd: bool = False,
    ) -> tuple[Graph | None, Callable[..., Any]]:
        """``fn`` behind a counter, and the counter; ``(None, fn)`` past the bound. ``timed``: None for a backward,
        which is timed when its forward is. Where it lives (a global ``name`` of ``scope``, or ``holder.attr``) is
        where :meth:`restore` puts ``fn`` back. ``under_compiled_autograd``: a backward compiled with compiled autograd
        on (:attr:`Graph.under_compiled_autograd`)."""
        key = str(compile_id)
        with self._lock:
            if len(self.graphs) >= self.max_graphs:
                self.not_counted += 1
                return None, fn
            if timed is None:
                timed = self._timed.get(key, False)
            elif pass_ == "forward" and len(self._timed) < self.max_graphs:
                self._timed[key] = timed
            g = Graph(compile_id, attempt, pass_, timed, with_forward, under_compiled_autograd)
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
