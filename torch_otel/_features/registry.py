"""The features added to the record's own, one row each: every pipeline's assembler and sinks read this table.

A new kind is a module of this folder declaring its :class:`~torch_otel._features.feature.Feature`, and a row here; the
parser's tables (torch_otel._parse.records) turn torch's records into its events, and live capture's attach table
(torch_otel._capture.sources) taps torch for them where it needs a new point. The assembler, the derive step and the
sinks take ``features`` as a parameter defaulting to this table, read as they are made.
"""

from __future__ import annotations

from . import cache_lookups, graph_calls
from .feature import Feature, Series

FEATURES: tuple[Feature, ...] = (cache_lookups.KIND, graph_calls.KIND)


def features_or_default(features: tuple[Feature, ...] | None) -> tuple[Feature, ...]:
    """``features``, else this table as it is now (a test adds a kind to it through the table alone)."""
    return FEATURES if features is None else features


def series_of(features: tuple[Feature, ...] | None = None) -> tuple[Series, ...]:
    """The metric series the features declare."""
    return tuple(s for k in features_or_default(features) if k.metrics is not None for s in k.metrics.series)
