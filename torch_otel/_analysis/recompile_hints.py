"""What stops a frame's recompiles: hints, each drawn from one guard torch reported as failing.

Where the reason makes it clear, the change that stops the recompiles: ``torch._dynamo.mark_dynamic(x, 0)`` for a
tensor dimension, ``dynamic=True`` for an int argument. Where the reason does not say, :func:`advise` says so and
guesses nothing. A hint names only what the caller passes (else it says the fix belongs at the call site).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.paths import in_installed_package
from .recompile_guards import SPECIALIZED_LOW, guard_line, range_bounds

__all__ = ["DYNAMIC_SHAPES_URL", "RECOMPILATION_URL", "FrameContext", "Hint", "advise", "hints_for"]

# torch's own pages: the one its recompile-limit warning names, and the dynamic shapes guide (mark_dynamic, dynamic=)
RECOMPILATION_URL = "https://docs.pytorch.org/docs/stable/compile/programming_model.recompilation.html"
DYNAMIC_SHAPES_URL = "https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html"
_PLAIN_NAME = re.compile(r"^[A-Za-z_]\w*$")


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
# what torch does with a size of 0 or 1 that mark_dynamic marked (torch/fx/experimental/symbolic_shapes.py: create_symbol
# returns a constant for it, and produce_guards "Don't complain about 0/1 specialization"), checked on torch 2.13
_MARKED_01 = (
    "torch compiles a size of 0 or 1 as a constant even where mark_dynamic marked it, and raises no ConstraintViolationError"
)


def _ranges(g: Mapping[str, Any]) -> list[tuple[int | None, int | None]]:
    return [range_bounds(v) for v in g.get("values") or []]


def _range_of(name: str, dim: object, others: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The frame's size_range guard on the same dimension of the same input: its dynamic graph's range failed."""
    return next(
        (o for o in others if o.get("kind") == "size_range" and str(o.get("input")) == name and o.get("dim") == dim),
        None,
    )


def _range_hint(g: Mapping[str, Any], line: str) -> Hint:
    """A size that fell outside a dynamic graph's range (``2 <= x.size()[1]``): the size-0/1 rule where the lower
    bound is torch's own (its 0/1 specialization); else a bound the code set. No change is known to be safe."""
    name, dim = g.get("input"), g.get("dim")
    values = [str(v) for v in g.get("values") or []]
    rng = ", ".join(values) or "?"
    bounds = _ranges(g)
    if any(lo == SPECIALIZED_LOW for lo, _ in bounds):
        above = [hi for _, hi in bounds if hi is not None]
        size = "a size of 0 or 1" + (f" (or one above {max(above)}: a bound the code set)" if above else "")
        why = (
            f"torch specializes sizes 0 and 1: dim {dim} of '{name}' took {size}, outside the dynamic graph's range "
            f"{rng}, and a call with that size compiles its own graph; marking the dimension dynamic does not change "
            f"that: {_MARKED_01}" + _NO_HINT
        )
    else:
        why = (
            f"the code bounds dim {dim} of '{name}': the dynamic graph holds the sizes {rng} only, and a size outside "
            "it compiles its own graph (torch's reason names the line that set the bound)" + _NO_HINT
        )
    return Hint(line, None, why, "none", DYNAMIC_SHAPES_URL)


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


def hints_for(g: Mapping[str, Any], ctx: FrameContext, repeated: bool, others: Sequence[Mapping[str, Any]] = ()) -> list[Hint]:
    """The hints for one guard torch reported as failing (``guards`` of :meth:`RecompilingFrames.to_dict`).

    ``repeated``: the frame keeps recompiling (this guard failed more than once, or the frame is near or at its
    recompile limit). ``others``: the frame's other guards (a size that became dynamic, whose dynamic graph's range a
    size of 0 or 1 then fell outside, is not said to compile no more). A hint never marks a dimension torch
    specializes (a size of 0 or 1: where automatic dynamic shapes were off, it turns them back on, which shares one
    graph among the other sizes), names only what the caller passes (else says the fix belongs at the call site), and
    where no change is known to be safe says so.
    """
    check, name, dim = g.get("kind"), str(g.get("input")), g.get("dim")
    line = str(g.get("line") or guard_line(g))
    values = [str(v) for v in g.get("values") or []]
    auto = ctx.automatic_dynamic
    target = _reachable(name, ctx)
    at = _at(ctx)
    if check == "size_range":
        return [_range_hint(g, line)]
    if check == "size":
        if any(v in ("0", "1") for v in values):
            special = "0" if "0" in values else "1"
            if auto is False:  # the rule is mark_dynamic's: automatic dynamic shapes never raise, and share the rest
                comp = _compile_hint(line, "size")
                why = (
                    f"{comp.why}. Sizes 0 and 1 still compile a graph each (torch specializes them: dim {dim} of "
                    f"'{name}' took {special}), so the recompiles fall but do not stop; marking the dimension dynamic "
                    f"instead would not help them: {_MARKED_01}"
                )
                return [Hint(comp.guard, comp.fix, why, comp.where, comp.link)]
            return [
                Hint(
                    line,
                    None,
                    f"torch specializes sizes 0 and 1 (dim {dim} of '{name}' took {special}): a call "
                    f"with that size compiles its own graph; marking the dimension dynamic does not change that: "
                    f"{_MARKED_01}" + _NO_HINT,
                    "none",
                    DYNAMIC_SHAPES_URL,
                )
            ]
        if not repeated and auto is not False:
            rng = _range_of(name, dim, others)
            return [
                Hint(
                    line,
                    None,
                    f"automatic dynamic shapes made dim {dim} of '{name}' dynamic at this recompile: "
                    + (
                        "new sizes compile no more; nothing to fix"
                        if rng is None
                        else f"sizes in the dynamic graph's range ({', '.join(map(str, rng.get('values') or []))}) "
                        "compile no more, but a size outside it compiles its own graph"
                    ),
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
    if check == "int":
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
    if check in ("dtype", "requires_grad", "rank"):
        change = {
            "dtype": ("in one dtype (cast it before the call)", "a dtype cannot be dynamic: each dtype compiles its own graph"),
            "requires_grad": (
                "with the same requires_grad on every call",
                "requires_grad is guarded: each setting compiles its own graph",
            ),
            "rank": ("with one number of dimensions", "dynamic shapes do not cover a change in the number of dimensions"),
        }[str(check)]
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
    if check == "kwargs":
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
    writes them). A guard is taken as repeating when it failed more than once, or, but for an int, when the frame is
    ``pressed`` (near or at its recompile limit). A frame whose reasons name no guard torch-otel reads gets one hint saying so. A size's
    dynamic graph whose range failed (a size of 0 or 1 after the dimension became dynamic) is said before the size."""
    out: list[Hint] = []
    ordered: list[Mapping[str, Any]] = []
    for g in guards:
        if g.get("kind") == "size":
            rng = _range_of(str(g.get("input")), g.get("dim"), guards)
            if rng is not None and all(x is not rng for x in ordered):
                ordered.append(rng)
        if all(x is not g for x in ordered):
            ordered.append(g)
    for g in ordered:
        # an int that failed once became a symbol (automatic dynamic shapes): near the limit or not, it recompiles no
        # more; a size that failed once is still worth marking near the limit (its recompile counts toward it)
        failed_again = int(g.get("failures") or 0) >= 2
        for h in hints_for(g, ctx, failed_again or (pressed and g.get("kind") != "int"), guards):
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
