"""The public extension point: :class:`Sink`, a receiver of your own, and :class:`Compile`, the record it receives.

``torch_otel.Sink`` and ``torch_otel.Compile`` (with ``Phase``, ``GraphBreak`` and ``CacheRequests``) are the public
names; this module is where they are defined. Everything else of the package is private: the compile record the
bridge's own sinks read, the pipeline, the features and the parser can change in any release.

A :class:`Compile` is a frozen, typed record of one finished compile, versioned by :data:`SCHEMA_VERSION`: a field
that changes meaning or goes away is a new version; new fields are not (docs/extending.md lists them). A sink gets each
compile once, off torch's path (the bridge's worker thread, after the compile ended); whatever it raises is caught,
counted (``torch_otel.internal_error_count()``) and logged once, and never reaches torch.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SCHEMA_VERSION", "CacheRequests", "Compile", "GraphBreak", "Phase", "Sink"]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a compile, as torch timed it (``dynamo``'s ``bytecode_tracing``, ``inductor_compile``, ...), with
    the phases nested in it."""

    name: str
    start_unix_nano: int
    end_unix_nano: int
    children: tuple[Phase, ...] = ()


@dataclass(frozen=True, slots=True)
class GraphBreak:
    """A graph break: torch's graph-break registry code (``GB0025``), its type, where it is in the user's code, and
    what it did: ``handled`` (torch split the frame there), ``ends_frame`` (the rest of the frame ran in eager); a
    break neither handled nor ending its frame failed its compile (the frame runs in eager)."""

    code: str
    type: str | None
    file: str | None
    line: int | None
    handled: bool
    ends_frame: bool


@dataclass(frozen=True, slots=True)
class CacheRequests:
    """How often a compile asked one of torch's caches (``fx_graph``, ``aot_autograd``), where (``local``,
    ``remote``) and with what result (``hit``, ``miss``, ...), as torch counted it."""

    cache: str
    location: str
    result: str
    count: int


@dataclass(frozen=True, slots=True)
class Compile:
    """One finished compile (schema :data:`SCHEMA_VERSION`; docs/extending.md says each field).

    ``id`` is torch's compile id as tlparse writes it (``0/1``; ``-`` where torch gave none); ``kind`` is ``frame``,
    ``backward``, ``compiled_autograd``, ``export``, ``precompile``, ``aot_inductor`` or ``runtime``; ``status`` is
    ``ok`` or ``error``, with ``error_type`` torch's ``fail_type`` (``Incomplete``: cut short). ``duration_s`` is
    torch's own duration where it records one (a frame's, a lazy backward's), else the root phase's; ``phases`` are the
    root phase's children. ``recompile_reason`` is scrubbed of literal values unless ``TORCH_OTEL_CAPTURE_PAYLOADS``
    is on. ``trace_id`` and ``span_id`` (hex, as OTLP writes them) name the compile's trace, None where it has none
    (traces off, or its sampler dropped it). ``torch_metrics`` holds the numbers and flags of torch's
    ``CompilationMetrics`` for it: torch's own fields, which come and go with torch's releases.
    """

    schema_version: int
    id: str
    kind: str
    attempt: int
    rank: int | None
    status: str
    error_type: str | None
    start_unix_nano: int
    end_unix_nano: int
    duration_s: float
    function: str | None
    file: str | None
    line: int | None
    call_site: str | None
    recompile_reason: str | None
    graph_breaks: tuple[GraphBreak, ...]
    cache_requests: tuple[CacheRequests, ...]
    phases: tuple[Phase, ...]
    trace_id: str | None
    span_id: str | None
    torch_version: str | None
    process_id: int | None
    torch_metrics: Mapping[str, int | float | bool]

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able data, field by field."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(value: Any) -> Any:
    if isinstance(value, (Phase, GraphBreak, CacheRequests)):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


class Sink(abc.ABC):
    """A receiver of your own for every finished compile: a file, a database, an experiment tracker.

    Give it to ``torch_otel.instrument(sinks=[...])``, or install it as a package with an entry point in the group
    ``torch_otel.sinks`` (``torch-otel run``, ``import torch_otel.auto`` and ``opentelemetry-instrument`` load it with
    no change to your code; docs/extending.md). The bridge calls :meth:`on_compile` once per compile, off torch's path,
    then :meth:`force_flush` on ``torch_otel.force_flush()`` and :meth:`shutdown` once as it stops, within its shutdown
    timeout. What a method raises is caught, counted and logged once; it never reaches torch or the other sinks.
    """

    @abc.abstractmethod
    def on_compile(self, record: Compile) -> None:
        """A compile ended: its record."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Deliver what it holds, within ``timeout_millis``; True when done in time."""
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:  # noqa: B027 - optional, empty by design
        """Deliver what it holds and let go (the bridge calls it once)."""
