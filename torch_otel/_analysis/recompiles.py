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

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.categories import REASON_CHARS, recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.errors import logger
from .._core.paths import in_installed_package
from .._core.text import cut, cut_middle, shorten_reason, wrap
from .._model.record import CompileRecord, Sink

__all__ = [
    "DYNAMIC_SHAPES_URL",
    "FrameContext",
    "Hint",
    "NEAR",
    "NEAR_LIMIT_WORDS",
    "RECOMPILATION_URL",
    "FrameRecompiles",
    "Guard",
    "NearLimitWarning",
    "RecompilingFrames",
    "advise",
    "hint_lines",
    "hints_for",
    "keeps_recompiling",
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
    # the number of keyword arguments: "len(kwargs) == 6" (a generate loop's prefill and decode pass different ones)
    ("kwargs", re.compile(r"^len\((?:L\[')?kwargs(?:'\])?\) == (?P<exp>\d+)")),
    # an int argument specialised to its value: "n == 3" (dynamo appends "  # source line  # file:line in f")
    ("int", re.compile(r"^(?:L\[')?(?P<name>[A-Za-z_]\w*)(?:'\])? == (?P<exp>-?\d+)\s*(?:#.*)?$")),
)
# Guards whose failure names only the value the cache entry was compiled for ("n == 3", "len(kwargs) == 6"), not the
# new one. A recompile's reason names the newest entry's value, so each new value is named by the next recompile, and
# the value the last recompile compiled for by none: it is counted as one more ("took 6 values", not 5).
EXPECTED_ONLY = frozenset({"int", "kwargs"})
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
    unnamed: int = 0  # values no reason names: the one the latest recompile compiled for (see EXPECTED_ONLY)


def guard_line(g: Mapping[str, Any], show_values: bool = True) -> str:
    """A guard's values in words: "dim 0 of input 'x' took 5 values: 8, 16, 24, 32, 40"."""
    kind, name, dim = g.get("kind"), g.get("input"), g.get("dim")
    values = [str(v) for v in g.get("values") or []]
    unnamed = int(g.get("unnamed_values") or 0)
    n = len(values) + int(g.get("more_values") or 0) + unnamed
    what = {
        "size": f"dim {dim} of input '{name}'",
        "stride": f"the stride of dim {dim} of input '{name}'",
        "dtype": f"the dtype of input '{name}'",
        "rank": f"the number of dimensions of input '{name}'",
        "requires_grad": f"requires_grad of input '{name}'",
        "int": f"int argument '{name}'",
        "kwargs": "the number of keyword arguments",
        "global_state": "torch's global state",
    }.get(str(kind), f"input '{name}'")
    if kind == "dispatch":  # torch's words kept: a device, or grad mode (no_grad against inference_mode), changed
        return f"input '{name}': dispatch key set mismatch (its device or grad mode changed)"
    if kind == "global_state":
        return f"torch's global state changed: {', '.join(values) or '?'}"
    if kind == "requires_grad":
        values = ["True" if v == "1" else "False" for v in values]
    shown = values[:SHOWN_VALUES]
    left = n - len(shown) - unnamed
    listed = ", ".join(shown) + (f", ... ({left} more)" if left > 0 else "")
    if unnamed:  # torch's reasons name a value once a later call replaces it: the newest is named by none
        listed += ", and the newest, which no reason names"
    if not show_values or not values:
        return f"{what} took {n} values (not shown: they may be data; capture payloads to see them)"
    return f"{what} took {n} values: {listed}"


# -- hints: what stops a frame's recompiles, each drawn from one guard torch reported as failing ------------------

_KWARG = re.compile(r"^kwargs\['([A-Za-z_]\w*)'\]$")
_RESUME = "torch_dynamo_resume_in_"  # dynamo's resume functions: their inputs are the original function's locals


@dataclass(frozen=True, slots=True)
class FrameContext:
    """What a hint needs to know of its frame: the code, the user's call site, who called it, automatic dynamic."""

    function: str | None = None
    file: str | None = None
    call_site: str | None = None  # "train.py:42", where known
    called_directly: bool = False  # the user's code called the compiled code (no library frame between them)
    automatic_dynamic: bool | None = None  # torch's automatic dynamic shapes for this frame's compiles (None: unknown)

    @property
    def library(self) -> bool:
        return in_installed_package(self.file)

    @property
    def resume(self) -> bool:
        return (self.function or "").startswith(_RESUME)


@dataclass(frozen=True, slots=True)
class Hint:
    """What stops a frame's recompiles, drawn from one guard torch reported as failing; or why no hint is given.

    ``fix`` is None where no change is known to be safe: ``why`` then says what the reason is and why no hint is given.
    ``where`` says where the change is made: ``call_site`` (on what the caller passes, before the call),
    ``compile`` (``torch.compile``'s arguments or torch's config), or ``none``. ``evidence`` holds what else supports
    the hint (for example what the recompiles it would have saved cost); it is empty unless something adds to it.
    """

    guard: str  # the reported guard's line it is drawn from
    fix: str | None
    why: str
    where: str = "none"
    link: str | None = None
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "guard": self.guard,
            "fix": self.fix,
            "why": self.why,
            "where": self.where,
            "link": self.link,
            "evidence": list(self.evidence),
        }


def _reachable(name: str, ctx: FrameContext) -> str | None:
    """The name by which the caller reaches the input torch names, or None where only the frame's own code does.

    A resume function's inputs are its original function's locals; a library's frame that the user's code did not
    call itself gets its tensors from the library; an attribute or an element of an argument is built inside.
    """
    if ctx.resume:
        return None
    direct = ctx.called_directly or not ctx.library
    kw = _KWARG.match(name)
    if kw and direct:
        return kw.group(1)
    if _PLAIN_NAME.match(name) and direct:
        return name
    return None


def _n(g: Mapping[str, Any]) -> int:
    return len(g.get("values") or []) + int(g.get("more_values") or 0) + int(g.get("unnamed_values") or 0)


def _at(ctx: FrameContext) -> str:
    return f" at {ctx.call_site}" if ctx.call_site else ""


_NO_HINT = "; no hint is given"


def _numbers(values: list[str], g: Mapping[str, Any]) -> str:
    """``6 and 2``; where no reason names the newest, ``6 and another number of``."""
    named = " and ".join(values)
    if not named:
        return "different numbers of"
    return f"{', '.join(values)} and another number of" if g.get("unnamed_values") else named


def _compile_hint(line: str, what: str) -> Hint:
    return Hint(
        line,
        "automatic dynamic shapes back on: no dynamic=False, automatic_dynamic_shapes = True",
        f"automatic dynamic shapes were off for this frame (torch.compile(..., dynamic=False), or "
        f"torch._dynamo.config.automatic_dynamic_shapes = False), so each new {what} compiled again. With them on (the "
        f"default), torch compiles a {what} that changed as dynamic after one recompile, in this frame and every other",
        "compile",
        DYNAMIC_SHAPES_URL,
    )


def hints_for(g: Mapping[str, Any], ctx: FrameContext, repeated: bool) -> list[Hint]:
    """The hints for one guard torch reported as failing (``guards`` of :meth:`RecompilingFrames.to_dict`).

    ``repeated``: the frame keeps recompiling (this guard failed more than once, or the frame is near or at its
    recompile limit). A hint never marks a dimension torch specializes (a size of 0 or 1: where automatic dynamic
    shapes were off, it turns them back on, which shares one graph among the other sizes), names only what the caller
    passes (else says the fix belongs at the call site), and where no change is known to be safe says so.
    """
    kind, name, dim = g.get("kind"), str(g.get("input")), g.get("dim")
    line = str(g.get("line") or guard_line(g))
    values = [str(v) for v in g.get("values") or []]
    auto = ctx.automatic_dynamic
    target = _reachable(name, ctx)
    at = _at(ctx)
    if kind == "size":
        if any(v in ("0", "1") for v in values):
            special = "0" if "0" in values else "1"
            if auto is False:  # the rule is mark_dynamic's: automatic dynamic shapes never raise, and share the rest
                comp = _compile_hint(line, "size")
                why = (
                    f"{comp.why}. Sizes 0 and 1 still compile a graph each (torch specializes them: dim {dim} of "
                    f"'{name}' took {special}), so the recompiles fall but do not stop; marking the dimension dynamic "
                    "instead would raise ConstraintViolationError"
                )
                return [Hint(comp.guard, comp.fix, why, comp.where, comp.link)]
            return [
                Hint(
                    line,
                    None,
                    f"torch specializes sizes 0 and 1 (dim {dim} of '{name}' took {special}): a call "
                    "with that size compiles its own graph; marking the dimension dynamic would raise "
                    "ConstraintViolationError" + _NO_HINT,
                    "none",
                    DYNAMIC_SHAPES_URL,
                )
            ]
        if not repeated and auto is not False:
            return [
                Hint(
                    line,
                    None,
                    f"automatic dynamic shapes made dim {dim} of '{name}' dynamic at this recompile: new sizes compile no "
                    "more; nothing to fix",
                    "none",
                    DYNAMIC_SHAPES_URL,
                )
            ]
        out: list[Hint] = []
        if target is not None:
            out.append(
                Hint(
                    line,
                    f"torch._dynamo.maybe_mark_dynamic({target}, {dim})",
                    f"on the tensor passed as '{target}', before the call{at}: dim {dim} is then compiled as dynamic from "
                    "the first call, once for every size (maybe_mark_dynamic never raises where the code specializes the "
                    "dimension; mark_dynamic does)",
                    "call_site",
                    DYNAMIC_SHAPES_URL,
                )
            )
        if auto is False:
            comp = _compile_hint(line, "size")
            out = [comp, *out] if ctx.library or target is None else [*out, comp]
        if not out:
            out.append(
                Hint(
                    line,
                    None,
                    (
                        f"'{name}' is built inside {'a library' if ctx.library else 'the function'}, not passed by the "
                        f"caller: the fix belongs at the call site{at}. "
                        if target is None
                        else ""
                    )
                    + f"Automatic dynamic shapes were on, yet dim {dim} kept recompiling: code specializes it "
                    "(TORCH_LOGS=+dynamic says where)" + _NO_HINT,
                    "call_site" if target is None else "none",
                    DYNAMIC_SHAPES_URL,
                )
            )
        return out
    if kind == "int":
        if not repeated and auto is not False:
            return [
                Hint(
                    line,
                    None,
                    f"automatic dynamic shapes made int argument '{name}' a symbol at this recompile: new values compile "
                    "no more; nothing to fix",
                    "none",
                    RECOMPILATION_URL,
                )
            ]
        if auto is False:
            return [
                Hint(
                    line,
                    "torch.compile(..., dynamic=True)",
                    f"the int argument '{name}' then compiles as a symbol, once for every value (automatic dynamic shapes "
                    "were off for this frame, so each value compiled again)",
                    "compile",
                    RECOMPILATION_URL,
                )
            ]
        return [
            Hint(
                line,
                None,
                f"automatic dynamic shapes were on, yet int argument '{name}' kept recompiling: code specializes it "
                "(it decides control flow or a shape)" + _NO_HINT,
                "none",
                RECOMPILATION_URL,
            )
        ]
    if kind in ("dtype", "requires_grad", "rank"):
        change = {
            "dtype": ("in one dtype (cast it before the call)", "a dtype cannot be dynamic: each dtype compiles its own graph"),
            "requires_grad": (
                "with the same requires_grad on every call",
                "requires_grad is guarded: each setting compiles its own graph",
            ),
            "rank": ("with one number of dimensions", "dynamic shapes do not cover a change in the number of dimensions"),
        }[str(kind)]
        if target is None:
            return [
                Hint(
                    line,
                    None,
                    f"{change[1]}; '{name}' is built inside {'a library' if ctx.library else 'the function'}, not passed by "
                    f"the caller: the fix belongs at the call site{at}" + _NO_HINT,
                    "call_site",
                    RECOMPILATION_URL,
                )
            ]
        return [Hint(line, f"pass '{target}' {change[0]}", f"{change[1]}; before the call{at}", "call_site", RECOMPILATION_URL)]
    if kind == "kwargs":
        who = (
            "the calls are the user's: the fix belongs at the call site" + at + " (pass the same keyword arguments)"
            if ctx.called_directly or not ctx.library
            else "the calls are made by library code (a generate loop's prefill and decode pass different ones): one "
            "graph per set is expected"
        )
        return [
            Hint(
                line,
                None,
                f"the function was called with {_numbers(values, g)} keyword arguments: each "
                f"set compiles its own graph; {who}" + _NO_HINT,
                "call_site",
                RECOMPILATION_URL,
            )
        ]
    return [Hint(line, None, f"torch-otel knows no change that is safe for this guard{_NO_HINT}", "none", RECOMPILATION_URL)]


def advise(
    guards: Sequence[Mapping[str, Any]], ctx: FrameContext, pressed: bool = False, reasons: Sequence[str] = ()
) -> list[Hint]:
    """The hints for a frame's reported guards, most failures first (``guards`` as :meth:`RecompilingFrames.to_dict`
    writes them). A guard is taken as repeating when it failed more than once, or the frame is ``pressed`` (near or
    at its recompile limit). A frame whose reasons name no guard torch-otel reads gets one hint saying so."""
    out: list[Hint] = []
    for g in guards:
        for h in hints_for(g, ctx, pressed or int(g.get("failures") or 0) >= 2):
            if all(h.fix is None or h.fix != x.fix for x in out):
                out.append(h)
    if not guards:
        top = reasons[0] if reasons else "no reason"
        out.append(
            Hint(
                top,
                None,
                f"torch's reason does not name a guard torch-otel reads ({top}){_NO_HINT}",
                "none",
                RECOMPILATION_URL,
            )
        )
    return out


@dataclass(slots=True)
class FrameRecompiles:
    """One frame's recompiles: by category, the guards torch reported as failing and their values, its place against
    the limit, and what its compiles cost."""

    compiles: int = 0
    recompiles: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    reasons: dict[tuple[str, str], int] = field(default_factory=dict)  # (category, text) -> count, bounded
    guards: dict[tuple[str, str | None, int | None], _GuardValues] = field(default_factory=dict)
    unparsed: int = 0  # reported reasons naming no guard torch-otel reads
    entries: int = 0  # the most compiles of this frame torch's cache held (its cache_size + 1)
    limit: int | None = None
    limit_hits: int = 0
    near: bool = False
    automatic_dynamic: bool | None = None
    ranks: set[int] = field(default_factory=set)
    cost_ns: int = 0  # the compile time of its compiles (their backwards' included) since it was followed
    call_site: str | None = None
    called_directly: bool = False


def _site(rec: CompileRecord) -> str | None:
    site = rec.call_site
    if site is None or not site.file:
        return None
    return f"{os.path.basename(site.file)}:{site.line if site.line is not None else '?'}"


class RecompilingFrames:
    """Per frame: its recompiles and what they say. Bounded (frames, guards, values).

    A frame is keyed as the run summary keys it (function, file, line, and for a library's frame the user's call site:
    two models compiled through one library wrapper are two frames). Only the reason torch reported for each
    recompile (``CompilationMetrics.recompile_reason``: the newest cache entry's failed guard) is read for guards and
    hints; the other entries' failures (``recompile_reasons``) say nothing about what changed this time.
    """

    def __init__(self, capture_payloads: bool = False, max_frames: int = MAX_FRAMES) -> None:
        self.capture_payloads = capture_payloads
        self.max_frames = max_frames
        self.frames: dict[tuple[Any, ...], FrameRecompiles] = {}

    def add(self, rec: CompileRecord, key: tuple[Any, ...]) -> None:
        if rec.kind == "backward":  # what the frame's recompiles cost includes their backwards
            f = self.frames.get(key)
            if f is not None:
                f.cost_ns += rec.duration_ns
            return
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
        f.cost_ns += rec.duration_ns
        if f.call_site is None:
            f.call_site = _site(rec)
        f.called_directly = f.called_directly or rec.called_directly
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
        text = (text if self.capture_payloads else scrub_guard_text(text))[:REASON_CHARS]  # whole in the JSON
        if (category, text) in f.reasons or len(f.reasons) < 20:
            f.reasons[(category, text)] = f.reasons.get((category, text), 0) + 1
        g = parse_guard(reason)
        if g is None:
            f.unparsed += 1
            return
        gk = (g.kind, g.name, g.dim)
        gv = f.guards.get(gk)
        if gv is None:
            if len(f.guards) >= MAX_GUARDS:
                return
            gv = f.guards[gk] = _GuardValues(g.kind, g.name, g.dim)
        gv.failures += 1
        if g.kind in EXPECTED_ONLY:
            gv.unnamed = 1  # until a later failure names it, the value this recompile compiled for is unnamed
        for v in g.values:
            if v in gv.values:
                continue
            if len(gv.values) < MAX_VALUES:
                gv.values.append(v)
            else:
                gv.more += 1

    def to_dict(self) -> list[dict[str, Any]]:
        """The frames that recompiled, the costliest first: the facts, the guards' lines and the hints."""
        out = []
        for key, f in sorted(self.frames.items(), key=lambda kv: (-kv[1].cost_ns, -kv[1].recompiles, str(kv[0][0]))):
            fn, path, line = key[0], key[1], key[2]
            guards = []
            for g in sorted(f.guards.values(), key=lambda g: -g.failures):
                shown = self.capture_payloads or g.kind != "int"  # an int's values may be data: counted, not shown
                d: dict[str, Any] = {
                    "kind": g.kind,
                    "input": g.name,
                    "dim": g.dim,
                    "values": _sort_values(list(g.values)) if shown else [],
                    "more_values": g.more + (0 if shown else len(g.values)),
                    "unnamed_values": g.unnamed,
                    "failures": g.failures,
                }
                d["line"] = guard_line(d, shown)
                guards.append(d)
            left = None if f.limit is None else max(0, f.limit - f.entries)
            status = (
                "hit" if f.limit_hits else "unknown" if f.limit is None else "near" if left is not None and left <= NEAR else "ok"
            )
            pressed = bool(f.limit_hits) or status == "near"
            keeps = pressed or any(g["failures"] >= 2 for g in guards) or f.unparsed >= 2
            ctx = FrameContext(fn, path, f.call_site, f.called_directly, f.automatic_dynamic)
            reasons = sorted(f.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            hints = advise(guards, ctx, pressed, [f"{c}: {t}" for (c, t), _ in reasons[:1]])
            fixes = [h.to_dict() for h in hints if h.fix]
            unclear = next((h.why for h in hints if not h.fix), None)
            stopped = None
            if not keeps and f.recompiles:
                stopped = (
                    "automatic dynamic shapes: each changed dimension became dynamic after one recompile"
                    if guards and all(g["kind"] in ("size", "int") for g in guards) and f.automatic_dynamic is not False
                    else "each recompile was for another guard, and none came back"
                )
            out.append(
                {
                    "function": fn,
                    "file": path,
                    "line": line,
                    "call_site": f.call_site,
                    "compiles": f.compiles,
                    "recompiles": f.recompiles,
                    "cost_s": round(f.cost_ns / 1e9, 6),
                    "by_category": dict(sorted(f.by_category.items(), key=lambda kv: -kv[1])),
                    "top_reasons": [{"category": c, "reason": t, "count": n} for (c, t), n in reasons[:3]],
                    "cache_entries": f.entries or None,
                    "limit": f.limit,
                    "left_before_limit": left,
                    "limit_hits": f.limit_hits,
                    "limit_status": status,
                    "automatic_dynamic": f.automatic_dynamic,
                    "keeps_recompiling": keeps,
                    "stopped_by": stopped,
                    "guards": guards,
                    "hints": [h.to_dict() for h in hints],
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
        fixes = [h for h in f.get("hints") or f.get("fixes") or [] if isinstance(h, Mapping) and h.get("fix")]
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


def keeps_recompiling(f: Mapping[str, Any]) -> bool:
    """Whether a frame (a row of :meth:`RecompilingFrames.to_dict`) keeps recompiling: a guard torch reported failed
    more than once, or the frame is near or at its recompile limit. A summary without the key (an older torch-otel's)
    says by its counts."""
    k = f.get("keeps_recompiling")
    if isinstance(k, bool):
        return k
    return (f.get("recompiles") or 0) >= 2 or bool(f.get("limit_hits")) or f.get("limit_status") == "near"


def limit_words(f: Mapping[str, Any], short: bool = False) -> str:
    """How close a frame is to the recompile limit, in words (its compiles: frame compiles, the entries the limit
    counts; their backwards are not among them)."""
    limit, entries, hits = f.get("limit"), f.get("cache_entries"), f.get("limit_hits") or 0
    if limit is None:
        return "hit the recompile limit (runs in eager)" if hits else "limit unknown (the log does not say)"
    if hits:
        return f"hit the recompile limit ({limit}): runs in eager"
    left = f.get("left_before_limit")
    if short:
        return f"{left} more before eager" + (" (near)" if left is not None and left <= NEAR else "")
    return f"{entries or '?'} of {limit} frame compiles, {left} more before eager" + (
        " (near)" if left is not None and left <= NEAR else ""
    )


def hint_lines(f: Mapping[str, Any], width: int, indent: str = "    ") -> list[str]:
    """A frame's guard and its first hint: the fix and torch's page, or why no hint is given (a summary without
    ``hints``, an older torch-otel's, by its ``fixes`` and ``unclear``)."""
    out: list[str] = []
    guards = f.get("guards") or []
    hints = [h for h in f.get("hints") or [] if isinstance(h, Mapping)]
    if not hints:
        hints = [{**x, "where": x.get("where") or "call_site"} for x in f.get("fixes") or []]
        if not hints and f.get("unclear"):
            hints = [{"fix": None, "why": f["unclear"], "guard": guards[0]["line"] if guards else None}]
    first = hints[0] if hints else None
    line = (first or {}).get("guard") or (guards[0]["line"] if guards else None)
    if line:
        lead = f"{indent}torch's reason: "
        out.append(lead + shorten_reason(line, max(20, width - len(lead))))
    if first is None:
        return out
    if first.get("fix"):
        site = f.get("call_site")
        at = f" (before the call at {site})" if first.get("where") == "call_site" and site else ""
        out.append(cut(f"{indent}fix{at}: {first['fix']}", width))
        if first.get("link"):
            out.append(cut(f"{indent}  {first['link']}", width))
    else:
        out.extend(wrap(f"{indent}no hint: {first.get('why')}", width, 3, indent + "  "))
    return out


def frame_lines(frames: list[Mapping[str, Any]], width: int, room: int, where: Any, most: int | None = None) -> list[str]:
    """The frames that keep recompiling, the costliest first, in at most ``room`` lines (``most`` frames at most): each
    frame, the guard torch reported, and its fix and torch's page, or why no hint is given. ``where(row)`` names a
    frame. Frames left out are counted on a line of their own ("(2 more: ...)"), and the costliest frame is never
    left out: past ``room`` if it must."""
    shown = [f for f in frames if keeps_recompiling(f)]
    if not shown:
        return []
    out = [f"frames that keep recompiling: {len(shown)} (the costliest first)"]
    for i, f in enumerate(shown):
        cost = f" ({f['cost_s']:.2f} s)" if isinstance(f.get("cost_s"), (int, float)) else ""
        head = f": {f['recompiles']} recompiles{cost}, {limit_words(f, short=True)}"
        block = [f"  {cut_middle(where(f), max(20, width - 2 - len(head)), 24)}{head}", *hint_lines(f, width)]
        block = [cut(b, width) for b in block]
        if f.get("evidence"):  # whole: its last words are the fix it names
            block.extend(wrap(f"    evidence: {f['evidence']['line']}", width, 3, "      "))
        pointer = 0 if i == len(shown) - 1 else 1  # room for the line that counts the frames after it
        if i and ((most is not None and i >= most) or len(out) + len(block) + pointer > room):
            out.append(f"  ({len(shown) - i} more: --json or the HTML page lists them)")
            break
        out.extend(block)
    return out


class NearLimitWarning(Sink):
    """Live: one line when a frame comes within :data:`NEAR` recompiles of the limit (once per frame: the record says),
    with the hint drawn from the guard torch reported, as the run summary gives it."""

    def on_finish(self, record: CompileRecord) -> None:
        if not record.recompile_limit_near:
            return
        code = record.code
        where = f"{code.function or '?'} ({code.file or '?'}:{code.line if code.line is not None else '?'})"
        left = (record.recompile_limit or 0) - (record.frame_recompiles or 0) - 1
        reason = record.recompile_reason or (record.recompile_reasons[0] if record.recompile_reasons else "")
        g = parse_guard(reason) if reason else None
        why = f"; last reason: {shorten_reason(scrub_guard_text(strip_recompile_prefix(reason)), 160)}" if reason else ""
        fix = ""
        if g is not None:
            d: dict[str, Any] = {"kind": g.kind, "input": g.name, "dim": g.dim, "values": list(g.values), "failures": 2}
            d["line"] = guard_line(d)
            ctx = FrameContext(
                code.function, code.file, _site(record), record.called_directly, automatic_dynamic_of(record.metrics)
            )
            hint = next(iter(hints_for(d, ctx, True)), None)
            if hint is not None and hint.fix:
                fix = f"; {hint.fix} would stop it" + (
                    f" (before the call at {ctx.call_site})" if hint.where == "call_site" and ctx.call_site else ""
                )
            elif hint is not None:
                fix = f"; no hint: {hint.why[:200]}"
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
