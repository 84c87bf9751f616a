"""Live: one warning line when a frame comes within :data:`~torch_otel._analysis.recompile_guards.NEAR`
recompiles of the recompile limit, with the hint the run summary gives it."""

from __future__ import annotations

from typing import Any

from .._analysis.recompile_guards import ACCUMULATED, automatic_dynamic_of, guard_line, limit_raises_of, parse_guard
from .._analysis.recompile_hints import FrameContext, hints_for
from .._analysis.recompiling_frames import call_site_of
from .._core.categories import scrub_guard_text, strip_recompile_prefix
from .._core.errors import logger
from .._core.text import shorten_reason
from .._model.record import CompileRecord, Sink

__all__ = ["NEAR_LIMIT_WORDS", "NearLimitWarning"]
NEAR_LIMIT_WORDS = "before torch._dynamo.config.recompile_limit"  # in the live warning line of such a frame


class NearLimitWarning(Sink):
    """Live: one line when a frame comes within :data:`NEAR` recompiles of the limit (once per frame: the record says),
    with the hint drawn from the guard torch reported, as the run summary gives it."""

    def on_finish(self, record: CompileRecord) -> None:
        if not record.recompile_limit_near:
            return
        code = record.limit_frame()  # a frame of torch's shared by several classes: torch's, whose limit it is
        where = f"{code.function or '?'} ({code.file or '?'}:{code.line if code.line is not None else '?'})"
        left = (record.recompile_limit or 0) - (record.frame_recompiles or 0) - 1
        reason = record.recompile_reason or (record.recompile_reasons[0] if record.recompile_reasons else "")
        g = parse_guard(reason) if reason else None
        why = f"; last reason: {shorten_reason(scrub_guard_text(strip_recompile_prefix(reason)), 160)}" if reason else ""
        fix = ""
        if g is not None:
            d: dict[str, Any] = {"kind": g.check, "input": g.name, "dim": g.dim, "values": list(g.values), "failures": 2}
            d["line"] = guard_line(d)
            ctx = FrameContext(
                code.function, code.file, call_site_of(record), record.called_directly, automatic_dynamic_of(record.metrics)
            )
            hint = next(iter(hints_for(d, ctx, True)), None)
            if hint is not None and hint.fix:
                fix = f"; {hint.fix} would stop it" + (
                    f" (before the call at {ctx.call_site})" if hint.where == "call_site" and ctx.call_site else ""
                )
            elif hint is not None:
                fix = f"; no hint: {hint.why[:200]}"
        # at the limit torch raises into the caller under fail_on_recompile_limit_hit or fullgraph=True; else it runs eager
        raises = limit_raises_of(record.metrics) or (record.origin is not None and record.origin.raises)
        try:
            n = record.frame_recompiles or 0
            words = NEAR_LIMIT_WORDS if record.recompile_limit_kind is None else f"before torch._dynamo.config.{ACCUMULATED}"
            logger.warning(
                "%s: %d recompile%s so far, %d more " + words + " (%d) %s%s%s",
                where,
                n,
                "" if n == 1 else "s",
                max(0, left),
                record.recompile_limit or 0,
                "makes its next new input raise FailOnRecompileLimitHit" if raises else "sends it to eager",
                why,
                fix,
            )
        except Exception:  # noqa: BLE001 - logging itself failed
            pass
