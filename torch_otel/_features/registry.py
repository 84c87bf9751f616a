"""The features, one row each: every pipeline, its assembler, its sinks, the parser's tables and live capture's attach
table read this table, and nothing above it names a feature.

A new feature is a module (or a package) of this folder declaring its
:class:`~torch_otel._features.feature.Feature`, and a row here. Everything that reads the features takes them as a
parameter defaulting to this table, read as it stands when it is called or made (a test adds a feature through its
row alone).
"""

from __future__ import annotations

from typing import Any

from .._attach.points import Source
from . import cache_lookups, graph_calls
from .feature import ArtifactHandler, Feature, InstantHandler
from .views import Condition, Series

__all__ = ["FEATURES", "conditions", "features_or_default", "hooks_of", "parse_artifacts", "parse_instants", "series_of"]

FEATURES: tuple[Feature, ...] = (cache_lookups.FEATURE, graph_calls.FEATURE)


def features_or_default(features: tuple[Feature, ...] | None) -> tuple[Feature, ...]:
    """``features``, else this table as it is now."""
    return FEATURES if features is None else features


def series_of(features: tuple[Feature, ...] | None = None) -> tuple[Series, ...]:
    """The metric series the features declare."""
    return tuple(s for f in features_or_default(features) if f.metrics is not None for s in f.metrics.series)


def hooks_of(features: tuple[Feature, ...] | None = None) -> tuple[Source[Any], ...]:
    """The features' rows of live capture's attach table."""
    return tuple(row for f in features_or_default(features) for row in f.hooks)


def parse_instants(features: tuple[Feature, ...] | None = None) -> tuple[tuple[str, InstantHandler], ...]:
    """torch's instant events that are a feature's, by name prefix, each with its handler."""
    return tuple(row for f in features_or_default(features) for row in f.parse.instants)


def parse_artifacts(features: tuple[Feature, ...] | None = None) -> dict[str, ArtifactHandler | None]:
    """The artifacts whose payload a feature keeps, by name, each with its handler (None: an ``ArtifactEvent``)."""
    return {name: handler for f in features_or_default(features) for name, handler in f.parse.artifacts}


def conditions(features: tuple[Feature, ...] | None = None) -> tuple[tuple[str, Condition], ...]:
    """The gate's conditions the features add (``torch-otel diff --fail-on``), each with its comparison's key."""
    return tuple((f.diff.key, c) for f in features_or_default(features) if f.diff is not None for c in f.diff.conditions)
