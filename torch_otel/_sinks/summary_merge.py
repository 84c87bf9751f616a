"""Several runs' summaries as one: a job's ranks, one summary each (TORCH_OTEL_SUMMARY=summary-{rank}.json).

The summary's JSON has one owner, torch_otel._sinks.summary: what :meth:`RunSummary.to_dict` writes is declared here
once more, with how it adds up over ranks, and tests/fast/test_summary_schema.py fails on a key written without a rule.
A key that cannot add up (one run's picture, one run's time span) says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.merge import Merge, basename, counts, first, merge_with, num, rows, sum_int, sum_known_s, sum_s, union
from .._features.feature import Feature
from .._features.registry import features_or_default
from .summary import SCHEMA_VERSION, SLOWEST

__all__ = ["MERGE", "Merge", "merge_rules", "merge_summaries"]


def _frame_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r.get("function"), basename(r.get("file")), r.get("line"), r.get("call_site"))


def _recompiling_frames(values: list[Any]) -> list[dict[str, Any]]:
    frames = rows(_frame_key, ("recompiles", "compiles", "limit_hits", "cost_s"))(values)
    by_cat: dict[tuple[Any, ...], dict[str, int]] = {}
    for part in values:
        for f in part or []:
            k = _frame_key(f)
            for c, n in (f.get("by_category") or {}).items():
                by_cat.setdefault(k, {})[c] = by_cat.setdefault(k, {}).get(c, 0) + int(num(n))
    keeps = {_frame_key(f) for part in values for f in part or [] if f.get("keeps_recompiling")}
    for f in frames:
        f["by_category"] = by_cat.get(_frame_key(f), {})
        if "keeps_recompiling" in f:  # on any rank
            f["keeps_recompiling"] = _frame_key(f) in keeps
    return sorted(frames, key=lambda f: -num(f.get("cost_s")))


def _slowest(values: list[Any]) -> list[dict[str, Any]]:
    kept = [dict(r) for v in values for r in v or [] if isinstance(r, Mapping)]
    return sorted(kept, key=lambda r: -num(r.get("duration_s")))[:SLOWEST]


# The summary's own keys; each feature declares its part's (torch_otel._features: ``summary.merge``).
MERGE: dict[str, Merge] = {
    "schema_version": Merge(lambda values: SCHEMA_VERSION),
    "source": Merge(first),
    "compiles": Merge(sum_int),
    "by_kind": Merge(counts),
    "wall_s": Merge(sum_s),
    "cpu_s": Merge(sum_known_s),
    "cpu_child_processes_s": Merge(sum_known_s),
    "first_to_last_s": Merge(why="the ranks compiled at the same time: each run's span is its own"),
    "phases": Merge(rows(lambda r: r.get("name"), ("count", "total_s", "self_s"))),
    "frames": Merge(rows(_frame_key, ("compiles", "total_s"))),
    "slowest": Merge(_slowest),
    "recompiles": Merge(
        section={
            "total": Merge(sum_int),
            "by_category": Merge(counts),
            "top_reasons": Merge(rows(lambda r: (r.get("category"), r.get("reason")), ("count",))),
            "user_contexts": Merge(rows(lambda r: r.get("context"), ("count",)), when_all=True),
        }
    ),
    "graph_breaks": Merge(
        section={
            "total": Merge(sum_int),
            "unhandled": Merge(sum_int),
            "ends_frame": Merge(sum_int),
            "by_code": Merge(rows(lambda r: (r.get("code"), r.get("type")), ("count",))),
            "by_location": Merge(
                rows(lambda r: (r.get("code"), basename(r.get("file")), r.get("line"), r.get("frame")), ("count",)),
                when_all=True,
            ),
            "ends_frame_by_location": Merge(
                rows(lambda r: (r.get("code"), basename(r.get("file")), r.get("line"), r.get("frame")), ("count",)),
                when_all=True,
            ),
        }
    ),
    "cache": Merge(rows(lambda r: (r.get("cache"), r.get("location"), r.get("result")), ("count",))),
    "failures": Merge(
        section={
            "total": Merge(sum_int),
            "by_type": Merge(counts),
            "by_frame": Merge(
                rows(
                    lambda r: (r.get("type"), r.get("function"), basename(r.get("file")), r.get("line"), r.get("call_site")),
                    ("count",),
                ),
                when_all=True,
            ),
        }
    ),
    "recompile_limit_hits": Merge(sum_int),
    "eager_fallbacks": Merge(sum_int),
    "eager_frames": Merge(rows(_frame_key, ("compiles",)), when_all=True),
    "runtime": Merge(section={"records": Merge(sum_int), "total_s": Merge(sum_s)}),
    "tree": Merge(why="the picture of one run's slowest compiles"),
    "recompiling_frames": Merge(_recompiling_frames, when_all=True),
    "ranks": Merge(union),
    "torch_versions": Merge(union),
}


def merge_rules(features: tuple[Feature, ...] | None = None) -> dict[str, Merge]:
    """How every key of the summary adds up: :data:`MERGE`, and each added feature's part (its ``summary.merge``)."""
    return {**MERGE, **{k.summary.key: k.summary.merge for k in features_or_default(features) if k.summary is not None}}


def merge_summaries(parts: list[Mapping[str, Any]], features: tuple[Feature, ...] | None = None) -> dict[str, Any]:
    """Several runs' summaries (``to_dict()``, one per rank of a job) as one, key by key as :func:`merge_rules` say."""
    return merge_with(merge_rules(features), [p for p in parts if isinstance(p, Mapping)])
