"""Every point where live capture attaches to torch: one row each, in one table.

As tlparse's ``default_parsers()`` lists its parsers, :func:`rows` lists the live capture's sources (the row types:
torch_otel._attach.points): its own (:data:`CORE`, :data:`ROOT_HOOKS`) and each feature's, whose hooks are the
feature's own (torch_otel._features). :class:`~torch_otel._capture.live_capture.LiveCapture` walks the table
(torch_otel._attach.attaching).

A row whose attach point this torch lacks is skipped, and the capture says once, in one line, what this release cannot
give (:func:`~torch_otel._attach.attaching.lacking_line`). Rows on modules torch imports lazily (inductor, torch.export,
the mega-cache) attach once the module is imported; a point missing there is reported then, in one line too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from .._attach.attaching import report_lacking_row
from .._attach.points import (
    AttachTarget,
    CountersRead,
    FunctionHook,
    Hookable,
    LoggerHook,
    ObjectHook,
    RecordFields,
    Source,
    StaticMethodHook,
    StructuredTraceHook,
)
from .._attach.releases import in_releases as _in_releases
from .._features.feature import Feature
from .._features.registry import hooks_of

__all__ = ["CORE", "ROOT_HOOKS", "Capture", "doctor_rows", "report_lacking", "rows", "survey"]


class Capture(AttachTarget, Protocol):
    """What the rows of :data:`CORE` and :data:`ROOT_HOOKS` attach and read, beside what every row does: the live capture (:class:`torch_otel._capture.live_capture.LiveCapture`).

    Each row names the capture's hook by a function of the capture (``lambda cap: cap._gb_handler``), so mypy
    checks every name in the table against this protocol, and the capture against it where it attaches the table:
    a misspelt hook fails the type check and ``tests/fast``, never a user's run.
    """

    # the hooks the table attaches
    def _record_chromium_event(self, event: dict[str, Any]) -> None: ...

    def _log_compilation_event(self, metrics: Any) -> None: ...

    def _recompilation_reasons(self, *args: Any, **kwargs: Any) -> Any: ...

    def _log_collective_schedule(self, nodes: Any) -> None: ...

    def _dump_collective_schedule(self, schedule: Any) -> None: ...

    def _create_debug_dir(self, folder_name: str) -> str | None: ...

    @property
    def _gb_handler(self) -> logging.Handler: ...

    @property
    def _trace_handler(self) -> logging.Handler: ...

    def _direct_trace_structured(self, torch_fn: Callable[..., None]) -> Callable[..., None] | None: ...

    @property
    def _ca_miss_handler(self) -> logging.Handler: ...

    @property
    def _warning_hook(self) -> Hookable: ...

    @property
    def _torch_export_hook(self) -> Hookable: ...

    @property
    def _mega_cache_hook(self) -> Hookable: ...


GRAPH_BREAK_LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.convert_frame.__graph_breaks",
    "torch._dynamo.exc.__graph_breaks",
)
TRACE_LOGGER = "torch.__trace"
CA_VERBOSE_LOGGER = "torch._dynamo.compiled_autograd.__compiled_autograd_verbose"
INDUCTOR_DEBUG = "torch._inductor.debug"
WARNING_LOGGERS = ("torch._dynamo", "torch._inductor")


# Live capture's own rows. Order matters only for attaching: phases first, so a compile is never seen half-hooked.
CORE: tuple[Source[Capture], ...] = (
    FunctionHook(
        "chromium_events",
        "compile phases (the child spans) and the phase metric",
        "torch._dynamo.utils",  # imported there by name from torch._utils_internal
        attrs=(("record_chromium_event_internal", lambda cap: cap._record_chromium_event),),
    ),
    FunctionHook(
        "compilation_metrics",
        "each compile's CompilationMetrics: durations, failures, recompile reason, cache counts",
        "torch._dynamo.utils",
        levels=frozenset({"default"}),  # full capture reads the same record from torch.__trace
        attrs=(("log_compilation_event", lambda cap: cap._log_compilation_event),),
    ),
    FunctionHook(
        "recompile_reasons",
        "every cache entry's guard failure on a recompile (torch's metrics keep the first)",
        "torch._dynamo.convert_frame",  # imported there by name from torch._dynamo.guards
        levels=frozenset({"default"}),
        attrs=(("get_and_maybe_log_recompilation_reasons", lambda cap: cap._recompilation_reasons),),
    ),
    LoggerHook(
        "graph_break_logs",
        "graph-break events with their reason and user line",
        "logging",
        levels=frozenset({"default"}),  # full capture reads them from torch.__trace
        reattach=True,
        loggers=GRAPH_BREAK_LOGGERS,
        handler=lambda cap: cap._gb_handler,
        lower=True,
        quiet=True,
        registry_name="graph_breaks",
    ),
    StructuredTraceHook(
        "trace_records",
        "every structured record torch traces (full capture: artifacts, graph breaks, metrics)",
        "logging",
        levels=frozenset({"full"}),
        reattach=True,
        loggers=(TRACE_LOGGER,),
        handler=lambda cap: cap._trace_handler,
        lower=True,
        # while that handler is the only one: each record handed over by torch's trace_structured, with no logging
        function="torch._logging._internal.trace_structured",
        direct=lambda cap: cap._direct_trace_structured,
    ),
    LoggerHook(
        "compiled_autograd_misses",
        "why compiled autograd compiled a new graph (with TORCH_LOGS=compiled_autograd_verbose)",
        "logging",
        loggers=(CA_VERBOSE_LOGGER,),
        handler=lambda cap: cap._ca_miss_handler,
        registry_name="compiled_autograd_verbose",
    ),
    ObjectHook(
        "compile_warnings",
        "torch's compile warnings as log records (when a logger provider is given)",
        "logging",
        only_if=lambda cap: bool(cap.warnings),
        # a link in logging's record factory, for WARNING_LOGGERS: no handler on torch's loggers (torch's
        # logging tests count a record once per handler on them), nothing torch prints changes
        obj=lambda cap: cap._warning_hook,
        probe=("getLogRecordFactory", "setLogRecordFactory"),
    ),
    RecordFields(
        "cache_counts",
        "FX graph and AOTAutograd cache hits and misses (torch_compile_cache_requests_total)",
        "torch._dynamo.utils",
        releases=("2.11", None),  # 2.10's CompilationMetrics has no local cache counts
        owner="CompilationMetrics",
        fields=(
            "inductor_fx_local_cache_hit_count",
            "inductor_fx_local_cache_miss_count",
            "aotautograd_local_cache_hit_count",
            "aotautograd_local_cache_miss_count",
        ),
    ),
    CountersRead(
        "compiled_autograd_counters",
        "compiled autograd's captures and compiles counters",
        "torch._dynamo.utils",
    ),
    FunctionHook(
        "collective_schedule",
        "each inductor graph's collective schedule (rank divergence)",
        INDUCTOR_DEBUG,
        lazy=True,
        attrs=(
            ("log_collective_schedule", lambda cap: cap._log_collective_schedule),
            ("_dump_collective_schedule", lambda cap: cap._dump_collective_schedule),
        ),
    ),
    StaticMethodHook(
        "inductor_debug_dirs",
        "inductor's debug directory on the compile (TORCH_COMPILE_DEBUG=1)",
        INDUCTOR_DEBUG,
        lazy=True,
        owner="DebugContext",
        attr="create_debug_dir",
        hook=lambda cap: cap._create_debug_dir,
    ),
    # the features' rows come here (torch_otel._features: each feature's ``hooks``)
)

# After the features' rows: the hook objects that find torch's names only as their module is imported
ROOT_HOOKS: tuple[Source[Capture], ...] = (
    ObjectHook(
        "export",
        "torch.export and draft_export as traces of their own",
        "torch.export._trace",
        obj=lambda cap: cap._torch_export_hook,
        probe=("_export",),
    ),
    ObjectHook(
        "mega_cache",
        "compiles served from torch.compiler.load_cache_artifacts",
        "torch.compiler._cache",
        obj=lambda cap: cap._mega_cache_hook,
        probe=("CacheArtifactManager",),
    ),
)


def rows(features: tuple[Feature, ...] | None = None) -> tuple[Source[Any], ...]:
    """The whole table: live capture's own rows, each feature's (as the features' registry stands), the root hooks."""
    return (*CORE, *hooks_of(features), *ROOT_HOOKS)


def report_lacking(name: str) -> None:
    """A row whose attach point turned out missing once its module was imported (lazy rows, and the export and
    mega-cache hooks, which find torch's names only then): its one line, once per row."""
    report_lacking_row(next(s for s in rows() if s.name == name))


def survey(version: str | None = None) -> list[dict[str, Any]]:
    """Each row with whether this torch has it: for ``torch-otel doctor`` and the release matrix's table.

    Imports the modules the rows name (inductor and torch.export included): not for a training process.
    """
    if version is None:
        import torch

        version = str(torch.__version__)
    out = []
    for src in rows():
        out.append(
            {
                "name": src.name,
                "gives": src.gives,
                "levels": sorted(src.levels),
                "releases": src.releases,
                "expected": _in_releases(version, src.releases),
                "present": src.present(),
                "variant": src.variant,
            }
        )
    return out


def _range_words(releases: tuple[str | None, str | None]) -> str:
    first, last = releases
    if first and last:
        return f"torch {first}" if first == last else f"torch {first} to {last}"
    if first:
        return f"torch {first} and later"
    return f"torch {last} and earlier" if last else "every torch"


def doctor_rows(version: str | None = None) -> list[dict[str, Any]]:
    """:func:`survey`'s rows, each with what ``torch-otel doctor`` says of it in a user's words, without the row's
    id: ``status`` (``yes``: it works on this torch; ``no``: this torch has not what it reads, by design; ``MISSING``:
    this torch should have it and does not; ``covered``: another release range's way to what a row that works here
    gives, not shown) and ``says`` (what it gives, and why not where it does not work)."""
    rows = survey(version)
    for r in rows:
        full_only = "default" not in r["levels"] and "full capture" not in r["gives"]
        what = r["gives"] + (" (with TORCH_OTEL_CAPTURE=full)" if full_only else "")
        if r["expected"] and r["present"]:
            r["status"], r["says"] = "yes", what
        elif r["expected"]:
            r["status"] = "MISSING"
            r["says"] = f"{what}: this torch should have what it reads and does not; the rest is captured (please report it)"
        elif r["variant"] and any(o is not r and o["gives"] == r["gives"] and o["expected"] for o in rows):
            r["status"], r["says"] = "covered", f"{what}, as {_range_words(r['releases'])} gives it"
        else:
            r["status"], r["says"] = "no", f"{what}: not on this torch (only on {_range_words(r['releases'])})"
    return rows
