"""Frames that keep recompiling: the guard that keeps failing, how close the frame is to the limit, and the fix.

torch's recompile reasons are one guard failure per cached entry that did not match
(``tensor 'x' size mismatch at index 0. expected 8, actual 16``). Read over a frame's compiles, they say which
input and dimension took which values ("dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"), and, where the
reason makes it clear, the change that stops the recompiles: ``torch._dynamo.mark_dynamic(x, 0)`` for a tensor
dimension, ``dynamic=True`` for an int argument. Where the reason does not say, :func:`advise` says so and
guesses nothing.

The recompile limit (``torch._dynamo.config.recompile_limit``, 8 by default) is read from each compile's
``CompilationMetrics.dynamo_config`` (torch logs it with every compile, so a replay knows it too), else from the
live config; else it is unknown. A frame's compiles so far are torch's ``cache_size`` (the entries the limit
counts), which the assembler derives onto the record (``frame_recompiles``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.categories import recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.errors import logger
from .._model.record import CompileRecord, Sink

__all__ = [
    "DYNAMIC_SHAPES_URL",
    "NEAR",
    "NEAR_LIMIT_WORDS",
    "RECOMPILATION_URL",
    "FrameRecompiles",
    "Guard",
    "NearLimitWarning",
    "RecompilingFrames",
    "advise",
    "live_recompile_limit",
    "parse_guard",
    "recompile_limit_of",
]

# torch's own pages: the one its recompile-limit warning names, and the dynamic shapes guide (mark_dynamic, dynamic=)
RECOMPILATION_URL = "https://docs.pytorch.org/docs/stable/compile/programming_model.recompilation.html"
DYNAMIC_SHAPES_URL = "https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html"
NEAR = 2  # a frame within this many recompiles of the limit is near it
NEAR_LIMIT_WORDS = "before torch._dynamo.config.recompile_limit"  # in the live warning line of such a frame
MAX_FRAMES = 1000  # frames whose recompiles are followed
MAX_GUARDS = 16  # distinct guards per frame
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
    # an int argument specialised to its value: "n == 3" (dynamo appends "  # source line  # file:line in f")
    ("int", re.compile(r"^(?:L\[')?(?P<name>[A-Za-z_]\w*)(?:'\])? == (?P<exp>-?\d+)\s*(?:#.*)?$")),
)
_LIMIT_RE = re.compile(r'"(?:recompile_limit|cache_size_limit)": (\d+)')
_AUTO_DYNAMIC_RE = re.compile(r'"automatic_dynamic_shapes": (true|false)')
_PLAIN_NAME = re.compile(r"^[A-Za-z_]\w*$")
_LOCAL = re.compile(r"^L\['([A-Za-z_]\w*)'\]$")


@dataclass(frozen=True, slots=True)
class Guard:
    """One guard failure, parsed: its kind, the input it is about, the dimension, and the values it saw."""

    kind: str  # size, stride, dtype, rank, requires_grad, dispatch, global_state, int
    name: str | None = None  # the input, as torch names its source ("x", "self.weight")
    dim: int | None = None
    values: tuple[str, ...] = ()  # expected first, then actual (what torch's text gives)


def parse_guard(reason: str) -> Guard | None:
    """``tensor 'x' size mismatch at index 0. expected 8, actual 16`` -> ``Guard('size', 'x', 0, ('8', '16'))``."""
    text = strip_recompile_prefix(reason)
    for kind, pattern in _GUARDS:
        m = pattern.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        name = groups.get("name")
        local = _LOCAL.match(name or "")
        if local:
            name = local.group(1)
        dim = int(groups["dim"]) if groups.get("dim") is not None else None
        values = tuple(v for v in (groups.get("exp"), groups.get("act")) if v is not None)
        if kind == "requires_grad" and values:  # torch names only the expected one: the other is its opposite
            values = (values[0], "1" if values[0] == "0" else "0")
        return Guard(kind, name, dim, values)
    return None


def recompile_limit_of(metrics: Mapping[str, Any] | None) -> int | None:
    """The recompile limit a compile ran under, from its ``CompilationMetrics.dynamo_config`` (None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _LIMIT_RE.search(config)
    return int(m.group(1)) if m else None


def automatic_dynamic_of(metrics: Mapping[str, Any] | None) -> bool | None:
    """Whether automatic dynamic shapes were on for a compile (its ``dynamo_config``; None: not logged)."""
    config = (metrics or {}).get("dynamo_config")
    if not isinstance(config, str):
        return None
    m = _AUTO_DYNAMIC_RE.search(config)
    return None if m is None else m.group(1) == "true"


def live_recompile_limit() -> int | None:
    """``torch._dynamo.config.recompile_limit`` of this process, without importing anything (None: not loaded)."""
    config = sys.modules.get("torch._dynamo.config")
    try:
        value = getattr(config, "recompile_limit", None) if config is not None else None
    except Exception:  # noqa: BLE001 - torch's config module is torch's: never fail the caller
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sort_values(values: list[str]) -> list[str]:
    try:
        return sorted(values, key=int)
    except ValueError:
        return values  # in the order seen


@dataclass(slots=True)
class _GuardValues:
    kind: str
    name: str | None
    dim: int | None
    values: list[str] = field(default_factory=list)  # distinct, in the order seen
    more: int = 0  # distinct values past MAX_VALUES
    failures: int = 0  # reasons that named this guard


def guard_line(g: Mapping[str, Any], show_values: bool = True) -> str:
    """A guard's values in words: "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"."""
    kind, name, dim = g.get("kind"), g.get("input"), g.get("dim")
    values = [str(v) for v in g.get("values") or []]
    n = len(values) + int(g.get("more_values") or 0)
    what = {
        "size": f"dim {dim} of input '{name}'",
        "stride": f"the stride of dim {dim} of input '{name}'",
        "dtype": f"the dtype of input '{name}'",
        "rank": f"the number of dimensions of input '{name}'",
        "requires_grad": f"requires_grad of input '{name}'",
        "int": f"int argument '{name}'",
        "global_state": "torch's global state",
    }.get(str(kind), f"input '{name}'")
    if kind == "dispatch":
        return f"the device or dispatch keys of input '{name}' changed"
    if kind == "global_state":
        return f"torch's global state changed: {', '.join(values) or '?'}"
    if kind == "requires_grad":
        values = ["True" if v == "1" else "False" for v in values]
    shown = values[:SHOWN_VALUES]
    listed = ", ".join(shown) + (f", ... ({n - len(shown)} more)" if n > len(shown) else "")
    if not show_values or not values:
        return f"{what} took {n} values (not shown: they may be data; capture payloads to see them)"
    return f"{what} took {n} values: {listed}"


def advise(guards: Sequence[Mapping[str, Any]], automatic_dynamic: bool | None = None) -> tuple[list[dict[str, str]], str | None]:
    """The changes that stop a frame's recompiles, where torch's reasons make them clear; else why it is unclear.

    Returns ``(fixes, unclear)``: each fix is ``{"fix", "why", "link"}``; ``unclear`` names what no fix covers.
    """
    fixes: list[dict[str, str]] = []
    unclear: list[str] = []
    sizes = [g for g in guards if g.get("kind") == "size" and len(g.get("values") or []) + int(g.get("more_values") or 0) > 1]
    auto = (
        " Automatic dynamic shapes were off for this frame (torch.compile(dynamic=False), or "
        "torch._dynamo.config.automatic_dynamic_shapes = False), so each new size compiled again."
        if automatic_dynamic is False
        else ""
    )
    for g in sizes:
        name = str(g.get("input"))
        target = name if _PLAIN_NAME.match(name) else f"<the tensor torch names {name!r}>"
        fixes.append(
            {
                "fix": f"torch._dynamo.mark_dynamic({target}, {g.get('dim')})",
                "why": f"before the call: dim {g.get('dim')} of '{name}' is then compiled once for every size.{auto}",
                "link": DYNAMIC_SHAPES_URL,
            }
        )
    if len(sizes) >= 3:
        fixes.append(
            {
                "fix": "torch.compile(..., dynamic=True)",
                "why": f"{len(sizes)} dimensions change: dynamic=True compiles every dimension as dynamic from the start.",
                "link": DYNAMIC_SHAPES_URL,
            }
        )
    ints = [g for g in guards if g.get("kind") == "int" and len(g.get("values") or []) + int(g.get("more_values") or 0) > 1]
    if ints:
        names = ", ".join(f"'{g.get('input')}'" for g in ints)
        fixes.append(
            {
                "fix": "torch.compile(..., dynamic=True)",
                "why": f"the int argument{'s' if len(ints) > 1 else ''} {names} then compile{'' if len(ints) > 1 else 's'} "
                f"as a symbol, once for every value (or pass it as a tensor).{auto}",
                "link": RECOMPILATION_URL,
            }
        )
    for g in guards:
        kind, name = g.get("kind"), str(g.get("input"))
        if kind == "dtype":
            fixes.append(
                {
                    "fix": f"pass '{name}' in one dtype (cast it before the call)",
                    "why": "a dtype cannot be dynamic: each dtype compiles its own graph.",
                    "link": RECOMPILATION_URL,
                }
            )
        elif kind == "requires_grad":
            fixes.append(
                {
                    "fix": f"pass '{name}' with the same requires_grad on every call",
                    "why": "requires_grad is guarded: each setting compiles its own graph.",
                    "link": RECOMPILATION_URL,
                }
            )
        elif kind == "rank":
            fixes.append(
                {
                    "fix": f"pass '{name}' with one number of dimensions",
                    "why": "dynamic shapes do not cover a change in the number of dimensions.",
                    "link": DYNAMIC_SHAPES_URL,
                }
            )
        elif kind in ("stride", "dispatch", "global_state"):
            unclear.append(guard_line(g))
    if not guards:
        unclear.append("torch's reasons name no guard torch-otel reads")
    fixes = [f for i, f in enumerate(fixes) if f["fix"] not in {x["fix"] for x in fixes[:i]}]
    return fixes, ("torch's reason does not say which change stops it: " + "; ".join(unclear)) if unclear else None


@dataclass(slots=True)
class FrameRecompiles:
    """One frame's recompiles: by category, the guards that failed and their values, and its place against the limit."""

    compiles: int = 0
    recompiles: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    reasons: dict[tuple[str, str], int] = field(default_factory=dict)  # (category, text) -> count, bounded
    guards: dict[tuple[str, str | None, int | None], _GuardValues] = field(default_factory=dict)
    unparsed: int = 0  # reasons naming no guard torch-otel reads
    entries: int = 0  # the most compiles of this frame torch's cache held (its cache_size + 1)
    limit: int | None = None
    limit_hits: int = 0
    near: bool = False
    automatic_dynamic: bool | None = None
    ranks: set[int] = field(default_factory=set)


class RecompilingFrames:
    """Per frame (function, file, line): its recompiles and what they say. Bounded (frames, guards, values)."""

    def __init__(self, capture_payloads: bool = False, max_frames: int = MAX_FRAMES) -> None:
        self.capture_payloads = capture_payloads
        self.max_frames = max_frames
        self.frames: dict[tuple[str, str | None, int | None], FrameRecompiles] = {}

    def add(self, rec: CompileRecord, key: tuple[str, str | None, int | None]) -> None:
        if rec.kind != "frame":
            return
        reason = rec.recompile_reason or (rec.recompile_reasons[0] if rec.recompile_reasons else None)
        limit_hit = rec.recompile_limit_hit
        f = self.frames.get(key)
        if f is None:
            if not (reason or limit_hit) or len(self.frames) >= self.max_frames:
                return  # a frame is followed from its first recompile
            f = self.frames[key] = FrameRecompiles()
            cid = rec.compile_id
            f.compiles = cid.frame_compile_id if cid is not None and cid.frame_compile_id else 0  # the ones before
        f.compiles += 1
        if rec.rank is not None and len(f.ranks) < 64:
            f.ranks.add(rec.rank)
        if rec.recompile_limit is not None:
            f.limit = rec.recompile_limit
        if rec.frame_recompiles is not None and not limit_hit:
            f.entries = max(f.entries, rec.frame_recompiles + 1)
        auto = automatic_dynamic_of(rec.metrics)
        if auto is not None:
            f.automatic_dynamic = auto if f.automatic_dynamic is None else (f.automatic_dynamic and auto)
        f.near = f.near or rec.recompile_limit_near
        if limit_hit:
            f.limit_hits += 1
            if rec.recompile_limit is not None:
                f.entries = max(f.entries, rec.recompile_limit)
        if not reason:
            return
        f.recompiles += 1
        category = recompile_category(reason)
        f.by_category[category] = f.by_category.get(category, 0) + 1
        text = strip_recompile_prefix(reason)
        text = (text if self.capture_payloads else scrub_guard_text(text))[:200]
        if (category, text) in f.reasons or len(f.reasons) < 20:
            f.reasons[(category, text)] = f.reasons.get((category, text), 0) + 1
        for r in rec.recompile_reasons or [reason]:
            g = parse_guard(r)
            if g is None:
                f.unparsed += 1
                continue
            gk = (g.kind, g.name, g.dim)
            gv = f.guards.get(gk)
            if gv is None:
                if len(f.guards) >= MAX_GUARDS:
                    continue
                gv = f.guards[gk] = _GuardValues(g.kind, g.name, g.dim)
            gv.failures += 1
            for v in g.values:
                if v in gv.values:
                    continue
                if len(gv.values) < MAX_VALUES:
                    gv.values.append(v)
                else:
                    gv.more += 1

    def to_dict(self) -> list[dict[str, Any]]:
        """The frames that recompiled, most recompiles first: the facts, the guards' lines and the fixes."""
        out = []
        for (fn, path, line), f in sorted(self.frames.items(), key=lambda kv: (-kv[1].recompiles, -kv[1].limit_hits, kv[0][0])):
            guards = []
            for g in sorted(f.guards.values(), key=lambda g: -g.failures):
                shown = self.capture_payloads or g.kind != "int"  # an int's values may be data: counted, not shown
                d: dict[str, Any] = {
                    "kind": g.kind,
                    "input": g.name,
                    "dim": g.dim,
                    "values": _sort_values(list(g.values)) if shown else [],
                    "more_values": g.more + (0 if shown else len(g.values)),
                    "failures": g.failures,
                }
                d["line"] = guard_line(d, shown)
                guards.append(d)
            fixes, unclear = advise(guards, f.automatic_dynamic)
            if not guards and f.recompiles:
                top = max(f.reasons.items(), key=lambda kv: kv[1])[0] if f.reasons else ("other", "")
                unclear = f"torch's reason does not say which change stops it: {top[0]}: {top[1]}"
            left = None if f.limit is None else max(0, f.limit - f.entries)
            status = (
                "hit" if f.limit_hits else "unknown" if f.limit is None else "near" if left is not None and left <= NEAR else "ok"
            )
            reasons = sorted(f.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            out.append(
                {
                    "function": fn,
                    "file": path,
                    "line": line,
                    "compiles": f.compiles,
                    "recompiles": f.recompiles,
                    "by_category": dict(sorted(f.by_category.items(), key=lambda kv: -kv[1])),
                    "top_reasons": [{"category": c, "reason": t, "count": n} for (c, t), n in reasons[:3]],
                    "cache_entries": f.entries or None,
                    "limit": f.limit,
                    "left_before_limit": left,
                    "limit_hits": f.limit_hits,
                    "limit_status": status,
                    "automatic_dynamic": f.automatic_dynamic,
                    "guards": guards,
                    "fixes": fixes,
                    "unclear": unclear,
                    "ranks": sorted(f.ranks),
                }
            )
        return out


def add_call_evidence(frames: list[dict[str, Any]], graph_calls: Mapping[str, Any] | None) -> None:
    """Each recompiling frame's evidence from its graphs' calls (a live run's summary): the graphs that ran at most
    once, what compiling them cost, and the fix that would have saved it: ``frame["evidence"]``."""
    if not isinstance(graph_calls, Mapping):
        return
    by_frame = {
        (g.get("function"), _basename(g.get("file")), g.get("line")): g
        for g in graph_calls.get("frames") or []
        if isinstance(g, Mapping)
    }
    for f in frames:
        calls = by_frame.get((f.get("function"), _basename(f.get("file")), f.get("line")))
        graphs = [g for g in (calls or {}).get("graphs") or [] if isinstance(g, Mapping) and g.get("kind") == "frame"]
        once = [g for g in graphs if isinstance(g.get("calls"), int) and g["calls"] <= 1]
        if not once:
            continue
        ids = [str(g.get("id")) for g in once]
        named = _named(ids)
        cost = sum(float(g.get("compile_s") or 0) for g in once)
        fixes = f.get("fixes") or []
        line = (
            f"graph{'s' if len(ids) > 1 else ''} {named} ran {'at most once each' if len(ids) > 1 else 'at most once'} "
            f"and cost {cost:.2f} s of compiling" + (f": {fixes[0]['fix']} would have saved it" if fixes else "")
        )
        f["evidence"] = {"ran_once": len(ids), "of": len(graphs), "ids": ids[:64], "compile_s": round(cost, 6), "line": line}


def _named(ids: list[str]) -> str:
    """``0/1``, ``0/1 and 0/3``, ``0/1 to 0/7`` (every graph between), or ``0/1, 0/3, 0/5`` (at most 4 named)."""
    if len(ids) <= 2:
        return " and ".join(ids)
    try:
        numbers = [int(i.rsplit("/", 1)[1]) for i in ids]
        frames = {i.rsplit("/", 1)[0] for i in ids}
    except (IndexError, ValueError):
        numbers, frames = [], set()
    if len(frames) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{ids[0]} to {ids[-1]}"
    return ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")


def _basename(path: Any) -> str | None:
    return re.split(r"[\\/]", path)[-1] if isinstance(path, str) and path else None


def limit_words(f: Mapping[str, Any]) -> str:
    """How close a frame is to the recompile limit, in words."""
    limit, entries, hits = f.get("limit"), f.get("cache_entries"), f.get("limit_hits") or 0
    if limit is None:
        return "hit the recompile limit (runs in eager)" if hits else "limit unknown (the log does not say)"
    if hits:
        return f"hit the recompile limit ({limit}): runs in eager"
    left = f.get("left_before_limit")
    return f"{entries or '?'} of {limit} compiles, {left} more before eager" + (
        " (near)" if left is not None and left <= NEAR else ""
    )


def frame_lines(frames: list[Mapping[str, Any]], width: int, room: int, where: Any) -> list[str]:
    """The frames that keep recompiling, in at most ``room`` lines: each frame, its guard, its fix and torch's page."""
    shown = [f for f in frames if (f.get("recompiles") or 0) >= 2 or f.get("limit_hits") or f.get("limit_status") == "near"]
    if not shown or room < 2:
        return []
    out = [f"frames that keep recompiling: {len(shown)}"]
    for i, f in enumerate(shown):
        block = [f"  {_cut(where(f['function'], f['file'], f['line']), 48)}: {f['recompiles']} recompiles, {limit_words(f)}"]
        for g in (f.get("guards") or [])[:1]:
            block.append(f"    {g['line']}")
        fixes = f.get("fixes") or []
        if fixes:
            block.append(f"    fix: {fixes[0]['fix']}")
            block.append(f"      {fixes[0]['link']}")
        if f.get("evidence"):
            block.append(f"    evidence: {f['evidence']['line']}")
        elif f.get("unclear"):
            block.append(f"    {f['unclear']}")
        block = [_cut(b, width) for b in block]
        if len(out) + len(block) > room:
            if len(out) + 1 <= room and i:
                out.append(f"  ({len(shown) - i} more: --json or the HTML page lists them)")
            break
        out.extend(block)
    return out if len(out) > 1 else []


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class NearLimitWarning(Sink):
    """Live: one line when a frame comes within :data:`NEAR` recompiles of the limit (once per frame: the record says)."""

    def on_finish(self, record: CompileRecord) -> None:
        if not record.recompile_limit_near:
            return
        code = record.code
        where = f"{code.function or '?'} ({code.file or '?'}:{code.line if code.line is not None else '?'})"
        left = (record.recompile_limit or 0) - (record.frame_recompiles or 0) - 1
        reason = record.recompile_reason or (record.recompile_reasons[0] if record.recompile_reasons else "")
        g = parse_guard(reason) if reason else None
        why = f"; last reason: {scrub_guard_text(strip_recompile_prefix(reason))[:160]}" if reason else ""
        fix = f"; torch._dynamo.mark_dynamic({g.name}, {g.dim}) would stop it" if g and g.kind == "size" else ""
        try:
            n = record.frame_recompiles or 0
            logger.warning(
                "%s: %d recompile%s so far, %d more " + NEAR_LIMIT_WORDS + " (%d) sends it to eager%s%s",
                where,
                n,
                "" if n == 1 else "s",
                max(0, left),
                record.recompile_limit or 0,
                why,
                fix,
            )
        except Exception:  # noqa: BLE001 - logging itself failed
            pass
