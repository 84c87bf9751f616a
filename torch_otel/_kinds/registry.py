"""The kinds added to the record's own, one row each: every pipeline's assembler and sinks read this table.

A new kind is a module of this folder declaring its :class:`~torch_otel._kinds.kind.Kind`, and a row here; the
parser's tables (torch_otel._parse.records) turn torch's records into its events, and live capture's attach table
(torch_otel._capture.sources) taps torch for them where it needs a new point. The assembler, the derive step and the
sinks take ``kinds`` as a parameter defaulting to this table, read as they are made.
"""

from __future__ import annotations

from . import cache_lookups, graph_calls
from .kind import Kind, Series

KINDS: tuple[Kind, ...] = (cache_lookups.KIND, graph_calls.KIND)


def kinds_or_default(kinds: tuple[Kind, ...] | None) -> tuple[Kind, ...]:
    """``kinds``, else this table as it is now (a test adds a kind to it through the table alone)."""
    return KINDS if kinds is None else kinds


def series_of(kinds: tuple[Kind, ...] | None = None) -> tuple[Series, ...]:
    """The metric series the kinds declare."""
    return tuple(s for k in kinds_or_default(kinds) if k.metrics is not None for s in k.metrics.series)
