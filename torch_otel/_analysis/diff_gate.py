"""``torch-otel diff --fail-on``: the CI gate's conditions, their thresholds, and what a diff's facts flag.

:func:`parse_fail_on` reads ``--fail-on`` into a :class:`Gate`; :func:`flags` says which of a diff's facts
(:func:`torch_otel._analysis.diff_compare.compare_summaries`) pass a condition's thresholds (docs/diff.md). Plain dicts,
no torch, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.frame_names import row_where
from .._core.merge import basename as _base
from .._features.feature import Feature
from .._features.registry import conditions as conditions_of
from .._features.views import Condition

__all__ = ["CONDITIONS", "DEFAULTS", "defaults", "EXIT_GATE_FAILED", "EXIT_MISSING_PATH", "EXIT_NOTHING_PARSED", "EXIT_OK", "Gate",
           "flags", "grew", "parse_fail_on"]  # fmt: skip

# Exit status: replay's (0 done, 1 nothing could be read, 2 a missing path); 3 is replay's "not exported", unused here
EXIT_OK, EXIT_NOTHING_PARSED, EXIT_MISSING_PATH, EXIT_GATE_FAILED = 0, 1, 2, 4


# The gate's conditions on the record's own facts and their default thresholds: a time condition fails when the growth
# exceeds every threshold it has (the percentage and the seconds), so neither a small frame's relative jitter nor a long
# run's absolute jitter fails it. The defaults sit above the spread measured between identical runs (docs/diff.md, "How
# much compile time varies"). Each feature adds its own after these (``DiffView.conditions``: the caches' ``cache``).
CONDITIONS = ("time", "frame-time", "graph-breaks", "recompiles", "failures")
DEFAULTS: dict[str, tuple[float | None, float | None]] = {
    "time": (50.0, 4.0),  # the run's compile time: +50 % and +4 s (identical runs measured: up to +3.07 s)
    "frame-time": (100.0, 3.0),  # one frame's: +100 % and +3 s (identical runs measured: up to +2.33 s)
}
_UNITS = {"time": ("%", "s"), "frame-time": ("%", "s")}  # the thresholds a condition takes (none: it takes none)
_TIME_HINT = "use a percentage and/or seconds: time:20%:1s"
_ALIASES = {
    "graph-break": "graph-breaks",
    "graph_breaks": "graph-breaks",
    "recompile": "recompiles",
    "failure": "failures",
    "frame_time": "frame-time",
    "total-time": "time",
}
_THRESHOLD = re.compile(r"^(\d+(?:\.\d+)?)(%|s)$")


def _features_conditions(features: tuple[Feature, ...] | None) -> dict[str, tuple[str, Condition]]:
    """Each feature's conditions by name, with its comparison's key."""
    return {c.name: (key, c) for key, c in conditions_of(features)}


def defaults(features: tuple[Feature, ...] | None = None) -> dict[str, tuple[float | None, float | None]]:
    """Every condition's default thresholds: the record's own, then each feature's."""
    return {**DEFAULTS, **{name: c.defaults for name, (_, c) in _features_conditions(features).items()}}


@dataclass
class Gate:
    """The ``--fail-on`` conditions: name -> (percent, seconds) thresholds (None: that threshold is not used)."""

    conditions: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for name, (pct, secs) in self.conditions.items():
            th = [f"{pct:g}%" if pct is not None else "", f"{secs:g}s" if secs is not None else ""]
            parts.append(":".join([name, *(t for t in th if t)]))
        return ", ".join(parts)


def parse_fail_on(values: Iterable[str], features: tuple[Feature, ...] | None = None) -> tuple[Gate, list[str]]:
    """``--fail-on`` values -> :class:`Gate` and problems (one line each).

    Each value is a comma-separated list of conditions; ``all`` is every one with its default thresholds. A time
    condition takes thresholds after colons: ``time:10%``, ``time:2s``, ``frame-time:30%:0.5s``; ``cache:5%`` fails
    when a hit rate fell by more than 5 points.
    """
    gate = Gate()
    problems: list[str] = []
    added = _features_conditions(features)
    names = (*CONDITIONS, *added)
    aliases = {**_ALIASES, **{a: name for name, (_, c) in added.items() for a in c.aliases}}
    thresholds = defaults(features)
    units = {**_UNITS, **{name: c.units for name, (_, c) in added.items()}}
    hints = {"time": _TIME_HINT, "frame-time": _TIME_HINT, **{name: c.units_hint for name, (_, c) in added.items()}}
    for value in values:
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            name, *ths = item.split(":")
            name = aliases.get(name.lower(), name.lower())
            if name == "all":
                for c in names:
                    gate.conditions.setdefault(c, thresholds.get(c, (None, None)))
                continue
            if name not in names:
                problems.append(
                    f"--fail-on {item!r}: no such condition; use {', '.join(names)} or all (time:20%:1s sets the thresholds)"
                )
                continue
            pct, secs = thresholds.get(name, (None, None)) if not ths else (None, None)
            for th in ths:
                m = _THRESHOLD.match(th.strip())
                if m is None or m.group(2) not in units.get(name, ()):
                    hint = hints.get(name) if units.get(name) else None
                    problems.append(f"--fail-on {item!r}: {th!r} is not a threshold of {name}; " + (hint or f"{name} takes none"))
                    continue
                if m.group(2) == "%":
                    pct = float(m.group(1))
                else:
                    secs = float(m.group(1))
            gate.conditions[name] = (pct, secs)
    return gate, problems


def grew(base: float, new: float, thresholds: tuple[float | None, float | None]) -> bool:
    """Whether ``new`` exceeds ``base`` by more than every threshold given (percent of base, seconds)."""
    pct, secs = thresholds
    change = new - base
    if change <= 0 or (pct is None and secs is None):
        return False
    if pct is not None and base > 0 and 100.0 * change / base <= pct:
        return False
    return not (secs is not None and change <= secs)


def flags(facts: Mapping[str, Any], gate: Gate, features: tuple[Feature, ...] | None = None) -> list[dict[str, str]]:
    """What changed that the gate's conditions (or, with no gate, the defaults) flag: kind and one line each."""
    out: list[dict[str, str]] = []
    added = _features_conditions(features)
    every = defaults(features)
    th = gate.conditions if gate.conditions else {c: every.get(c, (None, None)) for c in (*CONDITIONS, *added)}
    t = facts["total"]
    if "time" in th and grew(t["base_s"], t["new_s"], th["time"]):
        out.append(
            {
                "kind": "time",
                "text": f"compile time grew {secs_text(t['change_s'])} ({pct_text(t['change_pct'])}): "
                f"{t['base_s']:.2f} s -> {t['new_s']:.2f} s",
            }
        )
    if "frame-time" in th:
        for f in facts["frames"]:
            if f["status"] != "gone" and grew(f["base_s"], f["new_s"], th["frame-time"]):
                out.append(
                    {
                        "kind": "frame-time",
                        "text": f"{row_where(f)} compile time grew {secs_text(f['change_s'])} ({pct_text(f['change_pct'])})",
                    }
                )
    if "graph-breaks" in th:
        for g in facts["graph_breaks"]["new"]:
            at = f" at {_base(g.get('file'))}:{g.get('line')}" if g.get("file") else ""
            out.append({"kind": "graph-breaks", "text": f"new graph break {g.get('code')} {g.get('type') or ''}".rstrip() + at})
        for g in facts["graph_breaks"]["new_ends_frame"]:
            at = f" at {_base(g.get('file'))}:{g.get('line')}" if g.get("file") else ""
            out.append(
                {"kind": "graph-breaks", "text": f"new graph break that ends its frame: {g.get('code')}{at} in {g.get('frame')}"}
            )
    if "recompiles" in th:
        for r in facts["recompiles"]["new"]:
            on = f" in {r['frame']}" if r.get("frame") else ""
            out.append({"kind": "recompiles", "text": f"new recompiles: {r['category']}{on} ({r['count']})"})
    if "failures" in th:  # a frame torch now leaves in eager: the costliest news, first
        for e in reversed(facts["eager_frames"]["new_frames"]):
            out.insert(0, {"kind": "failures", "text": f"{row_where(e)} now runs in eager: {e.get('text') or e.get('why')}"})
        for f in facts["failures"]["new"]:
            on = f" in {row_where(f)}" if f.get("function") else ""
            out.append({"kind": "failures", "text": f"new failure {f.get('type')}{on} ({f.get('count')})"})
        for h in facts["failures"]["limit_hits"]["new_frames"]:
            on = f" in {h['frame']}" if h.get("frame") else ""
            out.append({"kind": "failures", "text": f"new recompile-limit hit{on} ({h['count']})"})
    for name, (key, condition) in added.items():  # each feature's, on its comparison
        if name in th and facts.get(key) is not None:
            out.extend({"kind": name, "text": text} for text in condition.flags(facts[key], th[name]))
    return out


def secs_text(s: float) -> str:
    return f"{s:+.2f} s"


def pct_text(p: float | None) -> str:
    return "new" if p is None else ">+999%" if p > 999 else f"{p:+.0f}%"
