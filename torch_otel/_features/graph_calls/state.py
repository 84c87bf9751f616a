"""Graph calls' live state and its hooks: the process's counters, put in front of each graph a compile installs.

:class:`GraphCallsState` is what each live pipeline makes for the feature (replay and diff have none: a log holds no
calls). It owns the table of counters (:class:`~torch_otel._features.graph_calls.counters.GraphCalls`) and the hooks its
attach rows (:data:`ROWS`) put on torch: each runs on torch's path, puts a counter in front of the graph and queues the
event that hands the compile its counter (live capture processes it off torch's path, with every other event). Its
lifecycle is the pipeline's: the counts are read (``collect``) before each scrape, every :data:`SAMPLE_S` seconds and at
exit; a forked child counts its own calls (``after_fork``); detaching puts torch's callables back.

Counting is on by default (``TORCH_OTEL_GRAPH_CALLS=off`` turns it off, except at full capture: docs/configuration.md).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ..._attach.points import AttachTarget, MethodHook, Source
from ..._core.compile_id import current_trace
from ..._core.errors import record_error
from ..._core.ranks import env_rank
from ..._core.settings import Settings
from ..feature import FeatureState, StateContext
from ..views import Observation
from .calls import NAME, CompileCalls, GraphEvent
from .counters import SAMPLE_S, GraphCalls, wrapper_codes
from .series import sampled

__all__ = ["ROWS", "GraphCallsState", "make_state"]


def _on_cpu(output_graph: Any) -> bool:
    """Whether every tensor input of the graph dynamo compiled is on the CPU: its calls can then be timed with no sync."""
    try:
        for t in output_graph.example_inputs():
            device = getattr(t, "device", None)
            if device is not None and getattr(device, "type", None) != "cpu":
                return False
    except Exception:  # noqa: BLE001 - an output graph of another shape: not timed
        return False
    return True


def _compiled_autograd_on() -> bool:
    """Whether compiled autograd is on (``torch._dynamo.compiled_autograd._enable``, or around a compiled function's
    call with ``torch._dynamo.config.compiled_autograd``): a backward compiled now runs inside its graphs. AOTAutograd
    compiles under compiled autograd's ``_disable()``, which turns its flag off for the compile: the depth of the
    ``_enable`` contexts around it still says it is on."""
    ca = sys.modules.get("torch._dynamo.compiled_autograd")
    depth = getattr(ca, "depth", 0)
    return getattr(ca, "compiled_autograd_enabled", False) is True or (type(depth) is int and depth > 0)


class GraphCallsState(FeatureState):
    """See the module. ``counting``: whether graphs are counted at all (the rows attach only then)."""

    collect_every_s = SAMPLE_S

    def __init__(self, settings: Settings, counting: bool, graphs: GraphCalls | None = None) -> None:
        self.settings = settings
        self.counting = counting
        self.graphs = GraphCalls() if graphs is None else graphs
        # where a lazily compiled backward's callable lives as its compile ends: (function on the stack, the local or
        # free variable there that holds it, its attribute), put by the CompiledBackward rows
        self.backward_holders: list[tuple[str, str, str]] = []
        self._cap: AttachTarget | None = None  # what the rows attached to: the live capture, which queues the events
        self.compiles: list[CompileCalls] = []  # what the derive step found for each compile: the metrics read them
        self._lock = threading.Lock()

    # -- the pipeline's lifecycle --------------------------------------------------------------------------------------
    def collect(self) -> Iterator[Observation]:
        """The counts read (when each graph last ran), and the series they stand at."""
        self.graphs.sample()
        compiles = self.compiles
        rank = next((str(cc.rank) for cc in reversed(compiles) if cc.rank is not None), None) or str(env_rank())
        yield from sampled(self, rank, rank in self.settings.detail_ranks)

    def after_fork(self) -> None:
        """A forked child counts its own calls of the graphs it inherited."""
        self._lock = threading.Lock()
        self.graphs.after_fork_in_child()

    # -- what the derive step tells it, and what the metrics read ---------------------------------------------------
    def add_compile(self, cc: CompileCalls) -> None:
        """A compile's graphs (the derive step's), kept for the metrics (bounded as the counters are)."""
        with self._lock:
            if len(self.compiles) < self.graphs.max_graphs:
                self.compiles.append(cc)

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

    # -- attached and detached (the rows' callbacks) ---------------------------------------------------------------
    def attached(self, cap: AttachTarget) -> None:
        """Dynamo must never trace a counter's wrapper (it would compile it as a frame of its own): its code is marked
        skipped, once. Raises where this torch cannot: the graphs are then not counted."""
        from torch._dynamo.eval_frame import skip_code

        for code in wrapper_codes():
            skip_code(code)
        self.bind(cap)

    def bind(self, cap: AttachTarget) -> None:
        """The rows attached to ``cap``: the events go to its queue, and a lazy backward's root end comes here."""
        if self._cap is not cap:
            self._cap = cap
            cap.at_root_end("entire_backward_compile", self.lazy_backward_compiled)

    def detached(self, cap: AttachTarget) -> None:
        """The counts read a last time, and torch's own callables put back where the wrappers still are."""
        cap.forget_root_end("entire_backward_compile", self.lazy_backward_compiled)
        self.graphs.sample()
        self.graphs.restore()

    def _installed(self) -> bool:
        cap = self._cap
        return cap is not None and cap.installed and self.counting

    def _queue(self, ev: GraphEvent) -> None:
        if self._cap is not None:
            self._cap.queue_event(ev)

    # -- the hooks (on torch's path: the counter goes in, the event is queued) ------------------------------------
    def install_global_hook(self, torch_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``OutputGraph.install_global_unsafe``, which installs each compiled graph as a global of its frame: the
        counter goes in front of the graph (its name is ``__compiled_fn_N``)."""
        installed = self._graph_installed

        def install_global_unsafe(output_graph: Any, name: str, value: Any) -> Any:
            return torch_fn(output_graph, name, installed(output_graph, name, value))

        return install_global_unsafe

    def _graph_installed(self, output_graph: Any, name: str, value: Any) -> Any:
        """The value dynamo installs: a compiled graph, behind its counter (a torch.export graph is never called)."""
        if not self._installed() or not callable(value):
            return value
        if not isinstance(name, str) or not name.startswith("__compiled_fn"):
            return value
        try:
            if getattr(output_graph, "export", False):
                return value
            cid, attempt = current_trace()
            graph, wrapper = self.graphs.wrap(
                value, cid, attempt, "forward", _on_cpu(output_graph), scope=output_graph.global_scope, name=name
            )
            self._queue(GraphEvent(cid, graph, attempt))
            return wrapper
        except Exception as exc:  # noqa: BLE001 - torch's graph, uncounted, never an error in the user's compile
            record_error("graph calls hook", exc)
            return value

    def backward_compiler_hook(self, torch_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``_AutogradBackwardCompiler.__init__``: a backward that comes with its forward (AOTAutograd's cache served
        both, or dynamic shapes had it compiled with its forward) has its callable from the start, and never compiles
        lazily. Compiled with compiled autograd on, it runs inside compiled autograd's graphs instead (left out of the
        counts until it runs on its own: torch_otel._features.graph_calls.calls.ran_alone)."""
        made = self._backward_compiler_made

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            torch_fn(obj, *args, **kwargs)
            made(obj)

        return __init__

    def _backward_compiler_made(self, obj: Any) -> None:
        try:
            fn = getattr(obj, "compiled_bw", None)
            if not self._installed() or fn is None or getattr(fn, "__torch_otel_graph__", False):
                return
            cid, attempt = current_trace()
            graph, wrapper = self.graphs.wrap(
                fn, cid, attempt, "backward", None, holder=obj, attr="compiled_bw", with_forward=True,
                under_compiled_autograd=_compiled_autograd_on(),
            )  # fmt: skip
            obj.compiled_bw = wrapper
            self._queue(GraphEvent(cid, graph, attempt))
        except Exception as exc:  # noqa: BLE001 - never into torch's compile
            record_error("graph calls: a backward compiled with its forward", exc)

    def lazy_backward_compiled(self) -> None:
        """A lazy backward's compile is ending (its root's end event, on its own stack; called by live capture before
        it queues the end, so the graph's event joins the compile still open): its callable is in place in the frame
        a CompiledBackward row names (``backward_holders``), and goes behind a counter before its first call."""
        if not self.backward_holders or not self._installed():
            return
        try:
            frame: FrameType | None = sys._getframe(1)
            functions = {row[0] for row in self.backward_holders}  # one look per frame at its function's name
            for _ in range(64):
                if frame is None:
                    return
                if frame.f_code.co_name not in functions:
                    frame = frame.f_back
                    continue
                for function, holder_name, attr in self.backward_holders:
                    if frame.f_code.co_name != function:
                        continue
                    holder = frame.f_locals.get(holder_name)
                    fn = getattr(holder, attr, None) if holder is not None else None
                    if fn is None or getattr(fn, "__torch_otel_graph__", False):
                        return
                    cid, attempt = current_trace()
                    graph, wrapper = self.graphs.wrap(fn, cid, attempt, "backward", None, holder=holder, attr=attr)
                    setattr(holder, attr, wrapper)
                    self._queue(GraphEvent(cid, graph, attempt))
                    return
                frame = frame.f_back
        except Exception as exc:  # noqa: BLE001 - never into torch's compile
            record_error("graph calls: a lazily compiled backward", exc)


def make_state(ctx: StateContext) -> GraphCallsState | None:
    """Live only (a log holds no calls): counting as the settings say."""
    if ctx.source != "live":
        return None
    s = ctx.settings
    return GraphCallsState(s, s.graph_calls or s.capture == "full")


def _state(cap: AttachTarget) -> GraphCallsState:
    state: GraphCallsState = cap.state(NAME)
    return state


def _counting(cap: AttachTarget) -> bool:
    state = cap.state(NAME)
    return isinstance(state, GraphCallsState) and state.counting


@dataclass(frozen=True)
class CompiledBackward(Source[AttachTarget]):
    """Where a lazily compiled backward's callable lives as its compile ends: the frame of ``function`` on the stack
    holds it in ``holder`` (a local or free variable), as ``attr``. Nothing of torch's is replaced: the state reads it
    there when the compile's root ends (torch's ``entire_backward_compile`` end, on the compile's own stack) and puts the
    counter in front of it. ``probe``: a name the module has; ``absent``: one it must not have."""

    function: str = ""
    holder: str = ""
    attr: str = "compiled_bw"
    probe: str = ""
    absent: str = ""

    def _lookup(self, mod: Any) -> Any:
        if mod is None or not hasattr(mod, self.probe) or (self.absent and hasattr(mod, self.absent)):
            return None
        return mod

    def attach(self, cap: AttachTarget) -> bool:
        import importlib

        if self._lookup(sys.modules.get(self.module) if self.lazy else importlib.import_module(self.module)) is None:
            return False
        where = (self.function, self.holder, self.attr)
        state = _state(cap)
        state.bind(cap)
        if where not in state.backward_holders:
            state.backward_holders.append(where)
        return True

    def detach(self, cap: AttachTarget) -> None:
        where = (self.function, self.holder, self.attr)
        holders = _state(cap).backward_holders
        if where in holders:
            holders.remove(where)


# The feature's rows of live capture's attach table (torch_otel._capture.attach_table walks them with its own).
ROWS: tuple[Source[AttachTarget], ...] = (
    MethodHook(
        "graph_calls",
        "how often each compiled graph ran, its first and last call (the run summary's graph calls)",
        "torch._dynamo.output_graph",
        only_if=_counting,
        owner="OutputGraph",
        attr="install_global_unsafe",  # dynamo installs each compiled graph as a global of its frame through it
        hook=lambda cap: _state(cap).install_global_hook,
        attached=lambda cap: _state(cap).attached(cap),
        detached=lambda cap: _state(cap).detached(cap),
    ),
    CompiledBackward(
        "graph_calls_lazy_backward",
        "how often each lazily compiled backward ran",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.12", None),
        lazy=True,
        variant=True,
        only_if=_counting,
        function="get_or_compile",  # _AutogradBackwardCompiler.get_or_compile returns self.compiled_bw
        holder="self",
        probe="_AutogradBackwardCompiler",
    ),
    CompiledBackward(
        "graph_calls_lazy_backward_2_10",
        "how often each lazily compiled backward ran",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.10", "2.11"),
        lazy=True,
        variant=True,
        only_if=_counting,
        function="_backward_impl",  # calls CompiledFunction.compiled_bw, a class made per graph in post_compile
        holder="CompiledFunction",
        probe="AOTDispatchAutograd",
        absent="_AutogradBackwardCompiler",
    ),
    MethodHook(
        "graph_calls_cached_backward",
        "how often a backward compiled with its forward ran (AOTAutograd's cache served it)",
        "torch._functorch._aot_autograd.runtime_wrappers",
        releases=("2.12", None),  # 2.10 and 2.11 keep it in a class made per graph, out of reach until it runs
        lazy=True,
        variant=True,
        only_if=_counting,
        owner="_AutogradBackwardCompiler",
        attr="__init__",
        hook=lambda cap: _state(cap).backward_compiler_hook,
    ),
)
