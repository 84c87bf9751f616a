"""The start-up's live state: it adopts the recorder the process started with, and shows its result.

:class:`StartupState` is what a live pipeline makes for the feature (replay and diff have none: a ``TORCH_TRACE`` log
holds only the compile). It hands the recorder each compile as it finishes (the compile phase is torch's own record
of it), and once the start-up is done (its second step timed, or its end at ready or exit) it works the figures out
once, when the pipeline next collects its states (off the program's thread: live capture's tick, once the compiles
queued before it were processed; a scrape of ``/metrics``; a flush; shutdown), and writes:

- **the start-up's trace**: a root span ``torch.startup`` from the process's start to the end, with each phase's
  intervals as child spans (``torch.startup.<phase>``, the longest 256), a compile's linked to that compile's trace;
  the rank and host are on the resource, as for the compile traces;
- **its series** (:data:`SERIES`), collected with every other state's.

A forked child reports no start-up of its own (the recorder stops in it), and never its parent's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from typing import Any

from ..._core.errors import record_error
from ..._core.ranks import env_rank
from ..feature import FeatureState, StateContext
from ..views import Observation, Series
from . import recorder as _recorder
from .attribution import PHASES, Startup, _num, compile_span

__all__ = ["NAME", "ROOT", "SERIES", "SPANS", "StartupState", "make_state", "read_root"]

NAME = "startup"

SERIES = (
    Series(
        "torch_startup_phase_seconds",
        "gauge",
        "Seconds of this process's start-up (from the process's start to its first step, first token or ready) in each "
        "phase, and the rest as phase=unattributed: they add up to torch_startup_first_step_seconds (docs/startup.md).",
        ("rank", "phase"),
        "s",
    ),
    Series(
        "torch_startup_first_step_seconds",
        "gauge",
        "Seconds from this process's start to the end of its start-up; end says what ended it (step, forward, ready, "
        "or exit: the program ended first).",
        ("rank", "end"),
        "s",
    ),
)

ROOT = "torch.startup"
SPANS = (  # every span and attribute name the trace writes (docs/span-model.md names each)
    ROOT,
    "torch.startup.<phase>",
    "torch.startup.end",
    "torch.startup.first_step_s",
    "torch.startup.second_step_s",
    "torch.startup.unattributed_s",
    "torch.startup.phase.<phase>_s",
    "torch.startup.process_start",
    "torch.startup.interpreter",
    "torch.startup.cache.hits",
    "torch.startup.cache.saved_s",
    "torch.startup.phase",
    "torch.startup.label",
    "torch.startup.self_s",
    "torch.startup.link",
)


class StartupState(FeatureState):
    """See the module: ``rec`` is the process's recorder (torch_otel._features.startup.recorder)."""

    def __init__(self, ctx: StateContext, rec: Any) -> None:
        self.ctx = ctx
        self.rec = rec
        self.result: Startup | None = None
        self.ids: tuple[int, int] | None = None  # the start-up trace's root, for the series' exemplars
        self.child = False  # a forked child: its parent's start-up is not its own
        self._lock = threading.Lock()

    # -- the pipeline's lifecycle --------------------------------------------------------------------------------------
    def on_finish(self, record: Any) -> None:
        if self.result is not None:
            return  # the start-up is worked out: a later compile is not part of it (the recorder turns away the rest)
        span = compile_span(record)
        if span is not None:
            self.rec.add_compile(span)

    def collect(self) -> Iterator[Observation]:
        st = self.publish()
        if st is None:
            return
        rank = str(st.rank if st.rank is not None else env_rank())
        yield "torch_startup_first_step_seconds", (rank, st.end), round(st.first_step_s, 6), self.ids
        for phase, s in st.phases.items():
            if s > 0:
                yield "torch_startup_phase_seconds", (rank, phase), round(s, 6), None
        yield "torch_startup_phase_seconds", (rank, "unattributed"), round(st.unattributed_s, 6), None

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self.child = True
        self.result = None

    # -- the result ------------------------------------------------------------------------------------------------
    def publish(self) -> Startup | None:
        """The start-up's figures, worked out once it is done (None before, in a forked child, or when off), and its
        trace written then."""
        if self.child:
            return None
        with self._lock:
            if self.result is None and self.rec.state == "done":
                try:
                    self.result = self.rec.startup()
                    self._write_trace(self.result)
                except Exception as exc:  # noqa: BLE001 - never into the program
                    record_error("start-up result", exc)
            return self.result

    def _write_trace(self, st: Startup) -> None:
        tracer = self.ctx.tracer
        if tracer is None:
            return
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

        from ..._otel.ids import own_ids, private_random

        t0 = int(self.rec.started_unix_ns)

        def at(s: float) -> int:
            return t0 + round(s * 1e9)

        attrs: dict[str, Any] = {
            "torch.startup.end": st.end,
            "torch.startup.first_step_s": round(st.first_step_s, 6),
            "torch.startup.unattributed_s": round(st.unattributed_s, 6),
            "torch.startup.process_start": st.process_start,
            "torch.startup.interpreter": st.interpreter,
            "torch.startup.cache.hits": st.cache.hits,
            "torch.startup.cache.saved_s": st.cache.saved_s,
        }
        if st.second_step_s is not None:
            attrs["torch.startup.second_step_s"] = round(st.second_step_s, 6)
        for phase, s in st.phases.items():
            attrs[f"torch.startup.phase.{phase}_s"] = round(s, 6)
        with nullcontext() if own_ids(tracer) else private_random():
            root = tracer.start_span(ROOT, context=Context(), kind=SpanKind.INTERNAL, attributes=attrs, start_time=t0)
            if not root.is_recording():
                return
            ctx = root.get_span_context()
            self.ids = (ctx.trace_id, ctx.span_id)
            parent = trace.set_span_in_context(root)
            for p in st.spans:
                links = []
                if p.trace_id and p.span_id:
                    sc = SpanContext(p.trace_id, p.span_id, False, TraceFlags(TraceFlags.SAMPLED))
                    links.append(Link(sc, {"torch.startup.link": "compile"}))
                child = tracer.start_span(
                    f"{ROOT}.{p.phase}",
                    context=parent,
                    kind=SpanKind.INTERNAL,
                    attributes={
                        "torch.startup.phase": p.phase,
                        "torch.startup.label": p.label,
                        "torch.startup.self_s": round(p.self_s, 6),
                    },
                    links=links,
                    start_time=at(p.start_s),
                )
                child.end(end_time=at(p.end_s))
            root.end(end_time=at(st.first_step_s))


def read_root(attrs: Mapping[str, Any], resource: Mapping[str, Any], start_ns: int, end_ns: int) -> dict[str, Any] | None:
    """A ``torch.startup`` root read back from a traces file (``torch-otel diff``): the summary's ``startup`` as far as
    the root says it (the phases, the rest, the end, the cache's hits and savings; not the imports' packages)."""
    first = attrs.get("torch.startup.first_step_s")
    if not isinstance(first, (int, float)) or isinstance(first, bool):
        return None

    def num(key: str) -> float:
        return _num(attrs.get(key))

    second = attrs.get("torch.startup.second_step_s")
    rank = resource.get("torch.distributed.rank")
    return Startup.from_dict(
        {
            "first_step_s": float(first),
            "end": str(attrs.get("torch.startup.end") or "exit"),
            "phases": {p: num(f"torch.startup.phase.{p}_s") for p in PHASES},
            "unattributed_s": num("torch.startup.unattributed_s"),
            "second_step_s": float(second) if isinstance(second, (int, float)) else None,
            "started_unix_s": start_ns / 1e9,
            "process_start": str(attrs.get("torch.startup.process_start") or "proc"),
            "interpreter": str(attrs.get("torch.startup.interpreter") or "interpreter"),
            "cache": {"hits": int(num("torch.startup.cache.hits")), "saved_s": num("torch.startup.cache.saved_s")},
            "rank": rank if isinstance(rank, int) else None,
        }
    ).to_dict()


def make_state(ctx: StateContext) -> StartupState | None:
    """The live pipeline's state, adopting the process's recorder (None: replay, diff, or no recorder:
    ``TORCH_OTEL_STARTUP=off``)."""
    if ctx.source != "live":
        return None
    rec = _recorder.current()
    if rec is None or rec.state in ("forked", "off"):
        return None
    return StartupState(ctx, rec)
