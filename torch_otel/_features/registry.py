"""The features, one row each: every pipeline, its assembler, its sinks, the parser's tables, live capture's attach
table and the entry points read this table, and nothing above it names a feature.

A new feature is a package (or a module) of this folder declaring its
:class:`~torch_otel._features.feature.Feature` as ``FEATURE``, and a :class:`Row` here. Everything that reads the
features takes them as a parameter defaulting to :func:`features`, the table as it stands when it is called (a test
adds a feature through its row alone).

Reading this module imports no feature: the entry points read it in every process ``torch-otel run`` starts, to start
the features whose live state begins with the process (:func:`start_process`), and a process that never compiles
imports nothing more of the package. A feature is imported when :func:`features` is first asked for it.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing is not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .._attach.points import Source
    from .feature import ArtifactHandler, Feature, InstantHandler
    from .views import Condition, Series

__all__ = [
    "GROUP",
    "REGISTERED",
    "ROWS",
    "Row",
    "conditions",
    "features",
    "features_or_default",
    "hooks_of",
    "installed",
    "outside",
    "own",
    "parse_artifacts",
    "parse_instants",
    "ready",
    "series_of",
    "start_process",
]


class Row:
    """One feature: ``module``, the module (or package) that declares it as ``FEATURE`` (``.name``: of this folder).

    ``starts_with_process``: for a feature whose live state begins with the process, before torch is imported (a
    start-up's hooks), the module (same rule) whose ``start(env)`` the entry points call at process start
    (``torch-otel run``'s sitecustomize, ``import torch_otel.auto``, ``opentelemetry-instrument``,
    ``torch_otel.instrument()``), importing nothing else of the feature. Its state, made later by the bridge's
    pipeline, adopts what was started."""

    __slots__ = ("module", "starts_with_process")

    def __init__(self, module: str, starts_with_process: str | None = None) -> None:
        self.module = module
        self.starts_with_process = starts_with_process

    def _key(self) -> tuple[str, str | None]:
        return self.module, self.starts_with_process

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Row) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Row({self.module!r}, starts_with_process={self.starts_with_process!r})"


ROWS: tuple[Row, ...] = (
    Row(".cache_lookups"),
    Row(".graph_calls"),
    Row(".startup", starts_with_process=".startup.begin"),
)

# Features from outside the package (torch_otel.features, docs/extending.md): the modules registered in code, in order,
# and those of the installed packages' entry points (group GROUP), found once per process when first asked for.
GROUP = "torch_otel.features"
REGISTERED: list[str] = []
_installed: tuple[Row, ...] | None = None
_loaded: dict[tuple[Row, ...], tuple[Feature, ...]] = {}  # the features of each table, imported once
_started: set[str] = set()  # the modules whose start(env) this process ran


def features() -> tuple[Feature, ...]:
    """The features of :data:`ROWS` as it stands, each imported from its module, then those from outside the package:
    the modules registered in code (:data:`REGISTERED`) and the installed packages' (:func:`installed`)."""
    rows = ROWS
    if REGISTERED or _installed != ():
        rows = (*rows, *(Row(m) for m in REGISTERED), *installed())
    return _of(rows)


def own() -> tuple[Feature, ...]:
    """The bridge's own features: those of :data:`ROWS`."""
    return _of(ROWS)


def _of(rows: tuple[Row, ...]) -> tuple[Feature, ...]:
    got = _loaded.get(rows)
    if got is None:
        got = _loaded[rows] = _load(rows)
    return got


def _load(rows: tuple[Row, ...]) -> tuple[Feature, ...]:
    """Each row's feature. One from outside the package that cannot be imported, is not a ``Feature`` or takes a name
    already taken is left out, with one line that says why (the bridge's own are never left out)."""
    from .._core.errors import record_error, warn_once

    out: list[Feature] = []
    names: set[str] = set()
    for row in rows:
        if row in ROWS:
            feature = importlib.import_module(row.module, __package__).FEATURE
        else:
            got, problem, exc = outside(row, names)
            if exc is not None:
                record_error(f"feature {row.module}", exc)
                continue
            if got is None:
                warn_once(
                    f"feature-shape:{row.module}",
                    "the module %s %s: declare one torch_otel.features.Feature of a name of its own as FEATURE "
                    "(docs/extending.md); it is left out",
                    row.module,
                    problem,
                )
                continue
            feature = got
        names.add(feature.name)
        out.append(feature)
    return tuple(out)


def outside(row: Row, taken: set[str]) -> tuple[Feature | None, str | None, Exception | None]:
    """A feature from outside the package: its ``FEATURE``, or None with why (one phrase) and the exception raised
    importing it, if one was. ``taken``: the names of the features before it."""
    from .feature import Feature

    try:
        feature = getattr(importlib.import_module(row.module), "FEATURE", None)
    except Exception as exc:  # noqa: BLE001 - a broken feature never breaks the user's program
        return None, f"cannot be imported: {type(exc).__name__}: {exc}", exc
    if not isinstance(feature, Feature):
        return None, "declares no FEATURE", None
    if feature.name in taken:
        return None, "takes a name already taken", None
    return feature, None, None


def installed() -> tuple[Row, ...]:
    """The features installed as packages: their entry points (group ``torch_otel.features``, each naming the module
    that declares its ``FEATURE``), those ``TORCH_OTEL_FEATURES`` chooses (unset or ``all``: every one; ``none``:
    none; else names, comma-separated). Read once per process; never raises."""
    global _installed
    if _installed is None:
        _installed = _find_installed()
    return _installed


def _find_installed() -> tuple[Row, ...]:
    import os

    from .._core.entry_points import chosen
    from .._core.settings import entry_point_names

    names = entry_point_names(os.environ.get("TORCH_OTEL_FEATURES"))
    if names == ():
        return ()
    return tuple(Row(ep.module) for ep in chosen(GROUP, "TORCH_OTEL_FEATURES", names))


def start_process(env: Mapping[str, str]) -> None:
    """Start, once per process, the live state of each feature that begins with the process (:class:`Row`): each entry
    point calls this, and the first call starts them. Never raises: an error is counted and logged once, and the
    program runs on."""
    for row in ROWS:
        if row.starts_with_process is None or row.starts_with_process in _started:
            continue
        _started.add(row.starts_with_process)
        try:
            importlib.import_module(row.starts_with_process, __package__).start(env)
        except Exception as exc:  # noqa: BLE001 - the user's program must start whatever happens here
            from .._core.errors import record_error

            record_error(f"{row.module} at process start", exc)


def ready() -> None:
    """The program says it is ready (``torch_otel.ready()``): each feature started with the process hears it (its start
    module's ``ready()``). Never raises."""
    for module in sorted(_started):
        try:
            fn = getattr(importlib.import_module(module, __package__), "ready", None)
            if fn is not None:
                fn()
        except Exception as exc:  # noqa: BLE001 - the user's program goes on whatever happens here
            from .._core.errors import record_error

            record_error(f"{module}.ready", exc)


def features_or_default(chosen: tuple[Feature, ...] | None) -> tuple[Feature, ...]:
    """The features ``chosen``, else the table as it is now."""
    return features() if chosen is None else chosen


def series_of(chosen: tuple[Feature, ...] | None = None) -> tuple[Series, ...]:
    """The metric series the features declare."""
    return tuple(s for f in features_or_default(chosen) if f.metrics is not None for s in f.metrics.series)


def hooks_of(chosen: tuple[Feature, ...] | None = None) -> tuple[Source[Any], ...]:
    """The features' rows of live capture's attach table."""
    return tuple(row for f in features_or_default(chosen) for row in f.hooks)


def parse_instants(chosen: tuple[Feature, ...] | None = None) -> tuple[tuple[str, InstantHandler], ...]:
    """torch's instant events that are a feature's, by name prefix, each with its handler."""
    return tuple(row for f in features_or_default(chosen) for row in f.parse.instants)


def parse_artifacts(chosen: tuple[Feature, ...] | None = None) -> dict[str, ArtifactHandler | None]:
    """The artifacts whose payload a feature keeps, by name, each with its handler (None: an ``ArtifactEvent``)."""
    return {name: handler for f in features_or_default(chosen) for name, handler in f.parse.artifacts}


def conditions(chosen: tuple[Feature, ...] | None = None) -> tuple[tuple[str, Condition], ...]:
    """The gate's conditions the features add (``torch-otel diff --fail-on``), each with its comparison's key."""
    return tuple((f.diff.key, c) for f in features_or_default(chosen) if f.diff is not None for c in f.diff.conditions)
