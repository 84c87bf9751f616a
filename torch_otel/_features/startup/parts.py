"""The start-up's part of the run summary and of ``torch-otel diff``.

- the summary's ``startup`` (the JSON contract: ``first_step_s``, ``end``, ``phases``, ``unattributed_s``, and the
  detail of :class:`~torch_otel._features.startup.attribution.Startup`), led in the text by one line; over a job's
  ranks, the rank that held the job's first step and why;
- the diff: two start-ups phase by phase, and the gate ``--fail-on startup`` on the time to the first step. A
  ``TORCH_TRACE`` log holds only the compile: where one side has a start-up and the other none, the diff says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._core.merge import Merge
from ..._core.text import cut
from ..views import Condition
from .attribution import Startup
from .text import by_rank, compare, compare_lines, duration_text, lead_line, merge_ranks

__all__ = ["CONDITION", "MERGE", "StartupPart", "compare_part", "head", "notes", "per_rank", "text", "text_body"]

NAME = "startup"


class StartupPart:
    """The summary's ``startup``: the live state's result (None where there is none: replay, or not ended)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def add(self, record: Any) -> None:
        """The compiles reach the start-up through its state."""

    def to_dict(self, facts: Mapping[str, Any]) -> Any:
        st = self.state.publish() if self.state is not None else None
        return st.to_dict() if st is not None else None


def _startup(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    s = facts.get(NAME)
    return s if isinstance(s, Mapping) and isinstance(s.get("first_step_s"), (int, float)) else None


def _fitted(st: Startup, width: int, indent: str = "") -> str:
    """The lead line within ``width``: the smallest phases give way first (the rest, unattributed, always stays)."""
    for most in range(6, 0, -1):
        line = indent + lead_line(st, most)
        if len(line) <= width:
            return line
    return cut(line, width)


def head(facts: Mapping[str, Any], width: int) -> list[str]:
    """The summary's lead: one line (a job: the rank that held its first step, and why, first)."""
    s = _startup(facts)
    if s is None:
        return []
    st = Startup.from_dict(s)
    out = []
    if isinstance(s.get("ranks"), Mapping) and len(s["ranks"]) > 1:
        job = s.get("job_first_step_s")
        held = f"job's first step after {duration_text(float(job))}" if isinstance(job, (int, float)) else "job's first step"
        why = s.get("why") or ""
        line = f"{held}, held by rank {s.get('holder')}" + (f": {why}" if why else "")
        out.append(cut(line, width))  # whole in the JSON
        out.append(_fitted(st, width, f"  rank {s.get('holder')}: "))
    else:
        out.append(_fitted(st, width))
    return out


def text_body(facts: Mapping[str, Any], width: int) -> list[str]:
    """The start-up's detail: the second step (for scale), the packages that took longest to import, notes."""
    s = _startup(facts)
    if s is None:
        return []
    st = Startup.from_dict(s)
    second = [f"second step {duration_text(st.second_step_s)}"] if st.second_step_s is not None else []
    top = [f"{k} {duration_text(v)}" for k, v in sorted(st.imports.items(), key=lambda kv: -kv[1])[:4]]
    named = [f"interpreter: '{st.interpreter}'"] if st.interpreter != "interpreter" else []
    # one line: the interpreter's name gives way first, then the imports one package at a time (the slowest stay)
    tries = [second + [f"imports: {', '.join(top)}"] + named] if top else [second + named]
    tries += [second + ([f"imports: {', '.join(top[:k])}"] if k else []) for k in range(len(top), -1, -1)]
    head = f"start-up (ended at {st.end})"
    lines = []
    for bits in tries:
        line = head + (": " + "; ".join(bits) if bits else "")
        if len(line) <= width:
            lines.append(line)
            break
    else:
        lines.append(cut(head, width))
    lines += [cut(f"  {n}", width) for n in st.notes[:3]]
    return lines


def _merge(values: list[Any]) -> Any:
    """A job's start-up over its ranks: the rank that held its first step and why (one rank's: itself)."""
    kept = [v for v in values if isinstance(v, Mapping) and isinstance(v.get("first_step_s"), (int, float))]
    if len(kept) <= 1:
        return dict(kept[0]) if kept else None
    return merge_ranks(by_rank(Startup.from_dict(v) for v in kept)).to_dict()


MERGE = Merge(_merge)


# -- torch-otel diff ---------------------------------------------------------------------------------------------------


def compare_part(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any] | None:
    """Two start-ups phase by phase (None: either side has none)."""
    sb, sn = _startup(b), _startup(n)
    if sb is None or sn is None:
        return None
    before, after = Startup.from_dict(sb), Startup.from_dict(sn)
    return {
        "base": before.to_dict(),
        "new": after.to_dict(),
        "changes": [
            {"name": r.name, "base_s": round(r.before_s, 6), "new_s": round(r.after_s, 6), "delta_s": round(r.delta_s, 6)}
            for r in compare(before, after)
        ],
    }


def text(c: Any, width: int) -> list[str]:
    if not c:
        return []
    return compare_lines(Startup.from_dict(c["base"]), Startup.from_dict(c["new"]))


def per_rank(c: Any) -> dict[str, Any] | None:
    """What a rank's row of the diff keeps: its time to the first step on both sides (None: a side has none)."""
    if not c:
        return None
    return {"base_first_step_s": c["base"]["first_step_s"], "new_first_step_s": c["new"]["first_step_s"]}


def notes(b: Mapping[str, Any], n: Mapping[str, Any]) -> list[str]:
    """One side has a start-up and the other none: say why nothing is compared."""
    sb, sn = _startup(b), _startup(n)
    if (sb is None) == (sn is None):
        return []
    side = "base" if sb is None else "new"
    return [
        f"start-up: the {side} run has none (a TORCH_TRACE log holds only the compile, and a start-up off or not ended "
        "holds none): record both runs live, with a summary or a traces file, to compare start-ups"
    ]


def _grew(c: Any, thresholds: tuple[float | None, float | None]) -> list[str]:
    """The time to the first step grew past every threshold given (percent, seconds)."""
    pct, secs = thresholds
    if pct is None and secs is None:
        return []
    before, after = float(c["base"]["first_step_s"]), float(c["new"]["first_step_s"])
    grew = after - before
    if grew <= 0 or (secs is not None and grew <= secs):
        return []
    if pct is not None and (before <= 0 or 100 * grew / before <= pct):
        return []
    share = f", {100 * grew / before:+.0f}%" if before > 0 else ""
    return [f"time to first step grew {duration_text(grew)} ({duration_text(before)} -> {duration_text(after)}{share})"]


# --fail-on startup (startup:10%, startup:30s, or both: the time to the first step grew by more than each). The defaults
# are loose, as the time condition's: a start-up's imports and weight loads vary with the page cache and the machine.
CONDITION = Condition(
    "startup",
    _grew,
    defaults=(50.0, 5.0),
    units=("%", "s"),
    units_hint="use a share or seconds of the time to the first step: startup:10% or startup:30s",
    aliases=("first-step", "time-to-first-step"),
)
