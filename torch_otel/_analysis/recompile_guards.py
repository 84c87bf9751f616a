"""What torch says about a recompile: the guard that failed, parsed; the recompile limit a compile ran under.

torch's recompile reasons are one guard failure per cached entry that did not match
(``tensor 'x' size mismatch at index 0. expected 8, actual 16``): :func:`parse_guard` reads one into a :class:`Guard`
(what it checks, the input, the dimension, the values), and :func:`guard_line` says a guard's values over a frame's
compiles in words ("dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40").

A dynamic graph's size range is a guard too (``2 <= x.size()[1]``, ``2 <= x.size()[1] <= 128``, ``x.size()[0] <= 8``:
the bounds of a size symbol, as torch's ``ShapeEnv.produce_guards_verbose`` writes them, torch/fx/experimental/
symbolic_shapes.py, "Every symbol must be within its value range"). Its failure names the range, not the size that
fell outside it: a lower bound of 2 is torch's 0/1 specialization, so the size was 0 or 1 (:func:`range_bounds`).

The recompile limit (``torch._dynamo.config.recompile_limit``, 8 by default) is read from each compile's
``CompilationMetrics.dynamo_config`` (torch logs it with every compile, so a replay knows it too), else from the
live config; else it is unknown. A frame's compiles so far are torch's ``cache_size`` (the entries the limit
counts), which the assembler derives onto the record (``frame_recompiles``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.categories import strip_recompile_prefix

__all__ = [
    "ACCUMULATED",
    "EXPECTED_ONLY",
    "NEAR",
    "Guard",
    "accumulated_limit_of",
    "automatic_dynamic_of",
    "guard_line",
    "limit_label",
    "limit_raises_of",
    "live_recompile_limit",
    "parse_guard",
    "range_bounds",
    "recompile_limit_of",
]
NEAR = 2  # a frame within this many recompiles of the limit is near it
MAX_VALUES = 64  # distinct values kept per guard (more are counted)
SHOWN_VALUES = 8  # values written in a guard's line

# torch's TensorGuards (torch/csrc/dynamo/guards.cpp) and its global-state guard, torch 2.10 to 2.15
_TENSOR = r"tensor '(?P<name>.+?)' "
_GUARDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("size", re.compile(_TENSOR + r"size mismatch at index (?P<dim>\d+)\. expected (?P<exp>-?\d+), actual (?P<act>-?\d+)")),
    ("stride", re.compile(_TENSOR + r"stride mismatch at index (?P<dim>\d+)\. expected (?P<exp>-?\d+), actual (?P<act>-?\d+)")),
    ("dtype", re.compile(_TENSOR + r"dtype mismatch\. expected (?P<exp>[\w.]+), actual (?P<act>[\w.]+)")),
    ("rank", re.compile(_TENSOR + r"rank mismatch\. expected (?P<exp>\d+), actual (?P<act>\d+)")),
    ("requires_grad", re.compile(_TENSOR + r"requires_grad mismatch\. expected requires_grad=(?P<exp>[01])")),
    ("dispatch", re.compile(_TENSOR + r"dispatch key set mismatch")),
    ("global_state", re.compile(r"GLOBAL_STATE changed: (?P<exp>\w+)")),
    # the number of keyword arguments: "len(kwargs) == 6" (a generate loop's prefill and decode pass different ones)
    ("kwargs", re.compile(r"^len\((?:L\[')?kwargs(?:'\])?\) == (?P<exp>\d+)")),
    # an int argument specialised to its value: "n == 3" (dynamo appends "  # source line  # file:line in f")
    ("int", re.compile(r"^(?:L\[')?(?P<name>[A-Za-z_]\w*)(?:'\])? == (?P<exp>-?\d+)\s*(?:#.*)?$")),
    # a dynamic size's range (torch/fx/experimental/symbolic_shapes.py, produce_guards_verbose: "2 <= x.size()[1]",
    # "2 <= x.size()[1] <= 128", "x.size()[0] <= 8", each with "  # source line"; torch before strip_local_scope: L['x'])
    (
        "size_range",
        re.compile(r"^(?:(?P<lo>-?\d+) <= )?(?P<name>\S+?)\.size\(\)\[(?P<dim>\d+)\](?: <= (?P<hi>-?\d+))?(?=\s*(?:[#;]|$))"),
    ),
)
SPECIALIZED_LOW = 2  # the lower bound torch gives a dynamic size (sizes 0 and 1 are specialized: constants)
# Guards whose failure names only the value the cache entry was compiled for ("n == 3", "len(kwargs) == 6"), not the
# new one. A recompile's reason names the newest entry's value, so each new value is named by the next recompile, and
# the value the last recompile compiled for by none: it is counted as one more ("took 6 values", not 5).
EXPECTED_ONLY = frozenset({"int", "kwargs"})
_LIMIT_RE = re.compile(r'"(?:recompile_limit|cache_size_limit)": (\d+)')
_AUTO_DYNAMIC_RE = re.compile(r'"automatic_dynamic_shapes": (true|false)')
_FAIL_ON_LIMIT_RE = re.compile(r'"fail_on_recompile_limit_hit": (true|false)')
_LOCAL = re.compile(r"^L\['([A-Za-z_]\w*)'\]$")
_LOCAL_SCOPE = re.compile(r"L\[\s*['\"](.*?)['\"]\s*\]")  # torch's strip_local_scope: L['x'] -> x
_RANGE = re.compile(r"^(-?\d*)\.\.(-?\d*)$")


@dataclass(frozen=True, slots=True)
class Guard:
    """One guard failure, parsed: what it checks, the input it is about, the dimension, and the values it saw."""

    check: str  # size, size_range, stride, dtype, rank, requires_grad, dispatch, global_state, int, kwargs
    name: str | None = None  # the input, as torch names its source ("x", "self.weight")
    dim: int | None = None
    # expected first, then actual (what torch's text gives); a size_range's: its range, "2..", "2..128", "..8" (torch
    # names the range the size fell outside, not the size)
    values: tuple[str, ...] = ()


def range_bounds(value: object) -> tuple[int | None, int | None]:
    """A size_range guard's value, ``"2..128"``, as its bounds: ``(2, 128)``; ``"2.."``: ``(2, None)``."""
    m = _RANGE.match(str(value))
    if m is None:
        return None, None
    return (int(m.group(1)) if m.group(1) else None), (int(m.group(2)) if m.group(2) else None)


def parse_guard(reason: str) -> Guard | None:
    """``tensor 'x' size mismatch at index 0. expected 8, actual 16`` -> ``Guard('size', 'x', 0, ('8', '16'))``;
    ``2 <= x.size()[1]  # ...`` -> ``Guard('size_range', 'x', 1, ('2..',))``."""
    text = strip_recompile_prefix(reason)
    for check, pattern in _GUARDS:
        m = pattern.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        if check == "size_range":
            lo, hi = groups.get("lo"), groups.get("hi")
            if lo is None and hi is None:  # no bound: not a range guard
                continue
            return Guard(check, _LOCAL_SCOPE.sub(r"\1", groups["name"]), int(groups["dim"]), (f"{lo or ''}..{hi or ''}",))
        name = groups.get("name")
        local = _LOCAL.match(name or "")
        if local:
            name = local.group(1)
        dim = int(groups["dim"]) if groups.get("dim") is not None else None
        values = tuple(v for v in (groups.get("exp"), groups.get("act")) if v is not None)
        if check == "requires_grad" and values:  # torch names only the expected one: the other is its opposite
            values = (values[0], "1" if values[0] == "0" else "0")
        return Guard(check, name, dim, values)
    return None


def recompile_limit_of(metrics: Mapping[str, Any] | None) -> int | None:
    """The recompile limit a compile ran under, from its ``CompilationMetrics.dynamo_config`` (None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _LIMIT_RE.search(config)
    return int(m.group(1)) if m else None


_ACCUMULATED_RE = re.compile(r'"accumulated_(?:recompile|cache_size)_limit": (\d+)')
ACCUMULATED = "accumulated_recompile_limit"  # the limit on every cache entry of a code object (torch 2.1 on)


def limit_label(name: object) -> str:
    """A limit's name (a summary row's ``limit_name``) in words: ``recompile limit``, ``accumulated recompile limit``."""
    return "accumulated recompile limit" if name == ACCUMULATED else "recompile limit"


def accumulated_limit_of(metrics: Mapping[str, Any] | None) -> int | None:
    """The limit on all of a code object's cache entries, whatever objects they were for (``accumulated_recompile_limit``;
    256 by default), from its ``dynamo_config`` (None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _ACCUMULATED_RE.search(config)
    return int(m.group(1)) if m else None


def automatic_dynamic_of(metrics: Mapping[str, Any] | None) -> bool | None:
    """Whether automatic dynamic shapes were on for a compile (its ``dynamo_config``; None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _AUTO_DYNAMIC_RE.search(config)
    return None if m is None else m.group(1) == "true"


def limit_raises_of(metrics: Mapping[str, Any] | None) -> bool | None:
    """Whether the compile ran under ``fail_on_recompile_limit_hit``: at the limit torch raises into the caller, nothing
    runs in eager (its ``dynamo_config``; None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _FAIL_ON_LIMIT_RE.search(config)
    return None if m is None else m.group(1) == "true"


def live_recompile_limit() -> int | None:
    """``torch._dynamo.config.recompile_limit`` of this process, without importing anything (None: not loaded)."""
    config = sys.modules.get("torch._dynamo.config")
    try:
        value = getattr(config, "recompile_limit", None) if config is not None else None
    except Exception:  # noqa: BLE001 - torch's config module is torch's: never fail the caller
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sort_values(values: list[str]) -> list[str]:
    try:
        return sorted(values, key=int)
    except ValueError:
        return values  # in the order seen


@dataclass(slots=True)
class GuardValues:
    check: str
    name: str | None
    dim: int | None
    values: list[str] = field(default_factory=list)  # distinct, in the order seen
    more: int = 0  # distinct values past MAX_VALUES
    failures: int = 0  # reasons that named this guard
    unnamed: int = 0  # values no reason names: the one the latest recompile compiled for (see EXPECTED_ONLY)


def guard_line(g: Mapping[str, Any], show_values: bool = True) -> str:
    """A guard's values in words: "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"."""
    check, name, dim = g.get("kind"), g.get("input"), g.get("dim")
    values = [str(v) for v in g.get("values") or []]
    unnamed = int(g.get("unnamed_values") or 0)
    n = len(values) + int(g.get("more_values") or 0) + unnamed
    what = {
        "size": f"dim {dim} of input '{name}'",
        "size_range": f"dim {dim} of input '{name}'",
        "stride": f"the stride of dim {dim} of input '{name}'",
        "dtype": f"the dtype of input '{name}'",
        "rank": f"the number of dimensions of input '{name}'",
        "requires_grad": f"requires_grad of input '{name}'",
        "int": f"int argument '{name}'",
        "kwargs": "the number of keyword arguments",
        "global_state": "torch's global state",
    }.get(str(check), f"input '{name}'")
    if check == "dispatch":  # torch's words kept: a device, or grad mode (no_grad against inference_mode), changed
        return f"input '{name}': dispatch key set mismatch (its device or grad mode changed)"
    if check == "global_state":
        return f"torch's global state changed: {', '.join(values) or '?'}"
    if check == "size_range":
        return range_line(str(what), values)
    if check == "requires_grad":
        values = ["True" if v == "1" else "False" for v in values]
    shown = values[:SHOWN_VALUES]
    left = n - len(shown) - unnamed
    listed = ", ".join(shown) + (f", ... ({left} more)" if left > 0 else "")
    if unnamed:  # torch's reasons name a value once a later call replaces it: the newest is named by none
        listed += ", and the newest, which no reason names"
    if not show_values or not values:
        return f"{what} took {n} values (not shown: they may be data; capture payloads to see them)"
    return f"{what} took {n} values: {listed}"


def range_line(what: str, values: list[str]) -> str:
    """A size_range guard in words: "dim 1 of input 'x': a size of 0 or 1 fell below the dynamic graph's range 2..
    (torch specializes sizes 0 and 1)"."""
    bounds = [range_bounds(v) for v in values]
    special = any(lo == SPECIALIZED_LOW for lo, _ in bounds)
    note = " (torch specializes sizes 0 and 1)" if special else ""
    if len(bounds) != 1:
        return f"{what}: sizes fell outside the dynamic graphs' ranges {', '.join(values) or '?'}{note}"
    (lo, hi), rng = bounds[0], values[0]
    if hi is None:
        size = "a size of 0 or 1" if special else "a size"
        return f"{what}: {size} fell below the dynamic graph's range {rng}{note}"
    if lo is None:
        return f"{what}: a size fell above the dynamic graph's range {rng}"
    size = f"a size of 0 or 1, or above {hi}," if special else "a size"
    return f"{what}: {size} fell outside the dynamic graph's range {rng}{note}"
