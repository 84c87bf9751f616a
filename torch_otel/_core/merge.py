"""How a JSON document's keys add up over several documents of one schema: one rule per key.

The run summary declares its merge with these (torch_otel._sinks.summary_merge.MERGE, and each feature's part of it): a job's
ranks each write one summary, and ``torch-otel diff`` reads them as one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Merge", "basename", "counts", "first", "merge_with", "num", "rows", "sum_int", "sum_known_s", "sum_s", "union"]


def num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def basename(path: Any) -> str | None:
    return re.split(r"[\\/]", path)[-1] if isinstance(path, str) and path else None


@dataclass(frozen=True)
class Merge:
    """How one key of the summary's JSON adds up over several summaries: ``add`` takes each summary's value (None
    where it has none) and returns the merged one; a ``section`` (a dict of keys) merges key by key; neither: not
    merged, for the reason ``why``. ``when_all``: merged only when every summary has the key (a summary written by an
    older torch-otel lacks it)."""

    add: Callable[[list[Any]], Any] | None = None
    when_all: bool = False
    why: str = ""
    section: Mapping[str, Merge] | None = None


def sum_int(values: list[Any]) -> int:
    return int(sum(num(v) for v in values))


def sum_s(values: list[Any]) -> float:
    return round(sum(num(v) for v in values), 6)


def sum_known_s(values: list[Any]) -> float | None:
    """Seconds every summary knows (a live run's CPU time); None if one does not."""
    return round(sum(num(v) for v in values), 6) if values and all(isinstance(v, (int, float)) for v in values) else None


def counts(values: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in values:
        for k, v in (d or {}).items():
            out[k] = out.get(k, 0) + int(num(v))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def union(values: list[Any]) -> list[Any]:
    return sorted({x for v in values for x in v or []})


def first(values: list[Any]) -> Any:
    return values[0] if values else None


def rows(key: Callable[[Mapping[str, Any]], Any], added: tuple[str, ...]) -> Callable[[list[Any]], list[dict[str, Any]]]:
    """Rows of the same ``key`` are one row: the first's, with its ``added`` fields added up."""

    def add(values: list[Any]) -> list[dict[str, Any]]:
        merged: dict[Any, dict[str, Any]] = {}
        for part in values:
            for r in part or []:
                if not isinstance(r, Mapping):
                    continue
                k = key(r)
                if k not in merged:
                    merged[k] = dict(r)
                else:
                    for c in added:
                        merged[k][c] = round(num(merged[k].get(c)) + num(r.get(c)), 6)
        return list(merged.values())

    return add


def merge_with(rules: Mapping[str, Merge], parts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``parts`` merged key by key, as ``rules`` say."""
    out: dict[str, Any] = {}
    for key, rule in rules.items():
        if rule.when_all and not all(key in p for p in parts):
            continue
        if rule.section is not None:
            out[key] = merge_with(rule.section, [v if isinstance(v, Mapping) else {} for p in parts for v in [p.get(key)]])
        elif rule.add is not None:
            out[key] = rule.add([p.get(key) for p in parts])
    return out
