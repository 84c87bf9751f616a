"""Your own feature: a fact of your own on every compile, with the bridge's own lifecycle, live and on replay.

A feature is a plugin the bridge's pipeline owns: what it reads of each compile, the facts it derives once before any
sink sees the compile, its live state, and its views (events on the compile's root span, metric series, its part of
the run summary, log records, its comparison in ``torch-otel diff``, its part of the HTML pages). The bridge's own
features (graph calls, cache lookups, the start-up) are made of exactly these parts. docs/extending.md shows one
written and installed as a package.

Its hooks are rows of live capture's attach table (:class:`FunctionHook`, :class:`MethodHook`,
:class:`StaticMethodHook`: a function or method of a library replaced by one that calls the feature's state, attached
and put back with the bridge's own, each never raising into the caller); its summary's merge over ranks is a
:class:`Merge` (``sum_int``, ``num``).

A feature is a module that declares one :class:`Feature` as ``FEATURE``. The bridge loads it:

- installed as a package, with an entry point in the group ``torch_otel.features`` naming that module: every
  ``torch-otel run``, ``import torch_otel.auto``, ``opentelemetry-instrument``, ``torch_otel.instrument()``,
  ``torch-otel replay`` and ``torch-otel diff`` in that environment (``TORCH_OTEL_FEATURES`` chooses among them);
- or with :func:`register` in the program, before the bridge starts.

One that cannot be imported, or declares no ``Feature``, is one counted line, and is left out. What a feature's
functions raise is caught, counted and logged once; it never reaches torch.

This interface is provisional: it may change in a minor release, and each change is named in the changelog. What
a feature reads of a compile is :class:`CompileRecord`'s fields that docs/extending.md lists.
"""

from __future__ import annotations

from ._attach.points import AttachTarget, FunctionHook, MethodHook, Source, StaticMethodHook
from ._core.merge import Merge, num, sum_int
from ._features.feature import Attach, Feature, FeatureState, ParseRows, StateContext
from ._features.registry import GROUP, REGISTERED
from ._features.views import (
    Condition,
    DiffView,
    LogView,
    MetricsView,
    Observation,
    PageView,
    Series,
    SpanEvent,
    SpanView,
    SummaryPart,
    SummaryView,
    Text,
)
from ._model.record import CompileRecord

__all__ = [
    "GROUP",
    "Attach",
    "AttachTarget",
    "CompileRecord",
    "Condition",
    "DiffView",
    "Feature",
    "FeatureState",
    "FunctionHook",
    "LogView",
    "Merge",
    "MethodHook",
    "MetricsView",
    "Observation",
    "PageView",
    "ParseRows",
    "Series",
    "SpanEvent",
    "Source",
    "SpanView",
    "StateContext",
    "StaticMethodHook",
    "SummaryPart",
    "SummaryView",
    "Text",
    "num",
    "register",
    "sum_int",
]


def register(module: str) -> None:
    """Add the feature that ``module`` (its dotted name) declares as ``FEATURE``, in this process, before the bridge
    starts (``torch_otel.instrument()``; under ``torch-otel run``, before torch is imported) or a replay runs. Twice is
    once. The module is imported when the bridge first reads its features.

    Raises ``TypeError`` for a name that is not a module's, and ``RuntimeError`` once the bridge has started: its
    pipeline, its metric series and its summary are made with the features it started with.
    """
    if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
        raise TypeError(f"register() takes a module's dotted name, as 'my_package.my_feature'; got {module!r}")
    from ._pipeline.bridge import is_instrumented

    if is_instrumented():
        raise RuntimeError(
            f"torch_otel.features.register({module!r}) came after the bridge started: register features before "
            "torch_otel.instrument(), or install the feature as a package (entry point group torch_otel.features)"
        )
    if module not in REGISTERED:
        REGISTERED.append(module)
