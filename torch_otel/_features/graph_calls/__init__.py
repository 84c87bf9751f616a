"""How often each compiled graph ran after it was compiled: a feature, declared here.

- counters: the counter in front of each graph, and the bounded table of a process's counters;
- state: the feature's live state (live capture only) and its attach rows, whose hooks put the counters in;
- calls: the event that hands a compile its graph, and its facts derived once into the record;
- trace: a span per compile, written at exit as a child of its compile's root, and how ``torch-otel diff`` reads it
  back; series: calls per frame and the compile seconds of graphs that ran at most once, collected from the state;
- summary_part: the run summary's ``graph_calls`` part, each listed compile's ``calls``, the recompiling frames'
  evidence; diff_part: its comparison in ``torch-otel diff``; page.js: its part of the HTML pages.

A ``TORCH_TRACE`` log holds no calls: a replayed compile's calls are unknown (``null``), never 0.
"""

from __future__ import annotations

from ..feature import Attach, Feature
from ..views import DiffView, MetricsView, PageView, SpanView, SummaryView
from . import diff_part, summary_part, trace
from .calls import MAX_PER_COMPILE, NAME, GraphEvent, derive
from .series import SERIES
from .state import ROWS, make_state

__all__ = ["FEATURE"]

FEATURE = Feature(
    NAME,
    GraphEvent,
    Attach(NAME, MAX_PER_COMPILE),
    hooks=ROWS,
    state=make_state,
    derive=derive,
    spans=SpanView(
        names=(trace.SPAN, *(v for k, v in vars(trace.Attributes).items() if k.isupper())),
        late_spans=(trace.SPAN,),
        write_late=trace.late_spans,
        read_late=trace.read_late,
        await_late=trace.await_late,
    ),
    metrics=MetricsView(SERIES),
    summary=SummaryView(
        NAME,
        lambda state: summary_part.CallsPart(),
        summary_part.summary_text,
        summary_part.MERGE,
        compile_facts=summary_part.compile_facts,
        finish=summary_part.finish,
        gives_way=4,  # before the caches' lines: a graph's calls matter less than why it compiled again
    ),
    diff=DiffView(NAME, diff_part.compare, diff_part.text),
    page=PageView(__name__, "page.js"),
)
