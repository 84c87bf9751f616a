"""The start-up, from the process's start to its first step or first token: every second in one phase, or the rest.
A feature, declared here, with no event of torch's: its hooks, its state and its views alone.

- :mod:`.begin`: its first code, called by the entry points as the process starts (the registry's
  ``starts_with_process``), and ``torch_otel.ready()``;
- :mod:`.recorder`: the recorder, live: the process's start, the hooks' machinery, the end;
- :mod:`.targets`: what it hooks in torch (and safetensors, transformers), and what each hook does;
- :mod:`.attribution`: the figures (a timeline in, a :class:`~.attribution.Startup` out, the JSON contract's
  ``startup``);
- :mod:`.text`: the lead line, a job's merge over its ranks, two start-ups compared;
- :mod:`.state`: the live state that adopts the recorder, the start-up's trace and its series;
- :mod:`.parts`: its part of the run summary and of ``torch-otel diff``; ``page.js``: its part of the HTML pages.
"""

from __future__ import annotations

from ..feature import Feature
from ..views import DiffView, MetricsView, PageView, SpanView, SummaryView
from . import parts
from .state import NAME, ROOT, SERIES, SPANS, make_state, read_root

__all__ = ["FEATURE"]

FEATURE = Feature(
    NAME,
    state=make_state,
    spans=SpanView(names=SPANS, own_roots=(ROOT,), read_own=read_root),
    metrics=MetricsView(SERIES),
    summary=SummaryView(
        NAME,
        parts.StartupPart,
        parts.text_body,
        parts.MERGE,
        head=parts.head,
        gives_way=2,
        optional=True,
    ),
    page=PageView(__name__, "page.js"),
    diff=DiffView(
        NAME, parts.compare_part, parts.text, per_rank=parts.per_rank, notes=parts.notes, conditions=(parts.CONDITION,)
    ),
)
