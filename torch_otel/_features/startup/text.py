"""The start-up as a person reads it: one process's lead line, a job's over its ranks, two start-ups compared.

- :func:`lead_line`: ``first step after 184 s: compile 61% (cache hits saved 40 s), weights 18%, ..., unattributed
  5%``, the run summary's lead;
- :func:`merge_ranks`: the rank that held a job's first step and why, e.g. ``rank 2 loaded weights 3.1 s longer;
  ranks 0 and 1 waited 3.0 s in the first all-reduce``;
- :func:`compare` and :func:`compare_lines`: two start-ups phase by phase (cold against warm, before and after a
  change), and :func:`gate`, the CI gate on the time to the first step.

All pure, on :class:`~torch_otel._features.startup.attribution.Startup`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .attribution import PHASES, Startup

__all__ = [
    "JobStartup",
    "PhaseChange",
    "by_rank",
    "compare",
    "compare_lines",
    "duration_text",
    "gate",
    "lead_line",
    "merge_ranks",
]

WORDS = {  # a phase in a line of text
    "interpreter": "interpreter",
    "bridge": "torch-otel",
    "imports": "imports",
    "distributed_init": "distributed init",
    "weights": "weights",
    "data": "data",
    "compile": "compile",
    "cuda_init": "CUDA init",
    "cudagraph_capture": "cudagraph capture",
    "waiting_for_ranks": "waiting for ranks",
    "first_step": "first step",
    "unattributed": "unattributed",
}
HEADS = {"step": "first step", "forward": "first forward", "ready": "ready", "exit": "exit (no first step)"}

# -- one process ---------------------------------------------------------------------------------------------------


def duration_text(s: float) -> str:
    """``0.84 s``, ``12.3 s``, ``184 s``, ``1 h 04 min``."""
    if s >= 3600:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m:02d} min"
    if s >= 100:
        return f"{s:.0f} s"
    return f"{s:.1f} s" if s >= 1 else f"{s:.2f} s"


def _word(st: Startup, phase: str) -> str:
    if phase == "interpreter" and st.interpreter != "interpreter":
        return st.interpreter  # e.g. "before import torch_otel.auto"
    return WORDS.get(phase, phase)


def lead_line(st: Startup, most: int = 6) -> str:
    """The summary's lead: ``first step after 184 s: compile 61% (cache hits saved 40 s), weights 18%, ...,
    unattributed 5%``: the phases of at least 1%, largest first (at most ``most``), and the rest always."""
    head = f"{HEADS.get(st.end, st.end)} after {duration_text(st.first_step_s)}"
    total = st.first_step_s
    if total <= 0:
        return head
    parts = []
    for phase, s in sorted(st.phases.items(), key=lambda kv: -kv[1])[:most]:
        pct = round(100 * s / total)
        if pct < 1:
            break
        text = f"{_word(st, phase)} {pct}%"
        if phase == "compile" and st.cache.saved_s >= 0.05:
            text += f" (cache hits saved {duration_text(st.cache.saved_s)})"
        elif phase == "compile" and st.cache.hits:
            text += f" ({st.cache.hits} cache hits)"
        parts.append(text)
    rest = 100 * st.unattributed_s / total
    parts.append(f"unattributed {round(rest)}%" if rest >= 0.5 or rest == 0 else "unattributed <1%")
    return f"{head}: {', '.join(parts)}"


# -- a job's ranks ---------------------------------------------------------------------------------------------------

_LONGER = {  # the rank that held the first step, by the phase it spent longest in
    "interpreter": "took {d} longer to start its interpreter",
    "bridge": "spent {d} longer in torch-otel",
    "imports": "spent {d} longer importing",
    "weights": "loaded weights {d} longer",
    "data": "waited {d} longer for its first batch",
    "compile": "compiled {d} longer",
    "cuda_init": "took {d} longer to initialise CUDA",
    "cudagraph_capture": "captured CUDA graphs {d} longer",
    "first_step": "ran its first step {d} longer",
    "unattributed": "spent {d} longer in unattributed code",
    "started": "started {d} after the others",
}
_COLLECTIVES = {
    "init_process_group": "init_process_group",
    "_verify_params_across_processes": "DDP's parameter check",
    "_broadcast_coalesced": "DDP's first broadcast",
    "all_reduce": "the first all-reduce",
    "barrier": "a barrier",
    "monitored_barrier": "a barrier",
    "broadcast": "a broadcast",
    "all_gather": "an all-gather",
    "all_gather_into_tensor": "an all-gather",
    "all_gather_object": "an all-gather of objects",
    "broadcast_object_list": "a broadcast of objects",
}
WAIT_FLOOR_S = 0.05  # a wait shorter than this is no rank's lateness


@dataclass(frozen=True)
class JobStartup:
    """A job's start-up over its ranks: the rank that held its first step (the one the others waited for, else the
    slowest) and why, in one line; the job's first step from its first process's start to its last rank's end."""

    first_step_s: float
    holder: int | None
    why: str
    ranks: Mapping[int, Startup]

    def to_dict(self) -> dict[str, Any]:
        held = self.ranks.get(self.holder) if self.holder is not None else None
        out = held.to_dict() if held is not None else {}
        out.update(
            job_first_step_s=self.first_step_s,
            holder=self.holder,
            why=self.why,
            ranks={
                str(r): {
                    "first_step_s": s.first_step_s,
                    "end": s.end,
                    "waiting_for_ranks_s": s.phases.get("waiting_for_ranks", 0.0),
                }
                for r, s in sorted(self.ranks.items())
            },
        )
        return out


def _ranks_text(ranks: Sequence[int], most: int = 6) -> str:
    rs = [str(r) for r in sorted(ranks)]
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > most:
        return f"ranks {', '.join(rs[: most - 1])} and {len(rs) - most + 1} more"
    return f"ranks {', '.join(rs[:-1])} and {rs[-1]}"


def merge_ranks(by_rank: Mapping[int, Startup]) -> JobStartup:
    """Name the rank that held the job's first step and why, e.g. "rank 2 loaded weights 3.1 s longer; ranks 0 and 1
    waited 3.0 s in DDP's parameter check". The holder is the rank that waited least when others waited (they waited
    for it), else the slowest to its end; its reason is the phase (or its late start) where it exceeds the others'
    median most."""
    if not by_rank:
        return JobStartup(0.0, None, "", {})
    starts = [s.started_unix_s for s in by_rank.values() if s.started_unix_s > 0]
    ends = [s.started_unix_s + s.first_step_s for s in by_rank.values() if s.started_unix_s > 0]
    job = (max(ends) - min(starts)) if len(starts) == len(by_rank) else max(s.first_step_s for s in by_rank.values())
    # init_process_group is a rendezvous: every rank waits in it for the last to come, so its time past the least any
    # rank spent there is waiting for another rank, as a collective's is
    init = {r: s.phases.get("distributed_init", 0.0) for r, s in by_rank.items()}
    rendezvous = {r: v - min(init.values()) for r, v in init.items()}
    wait = {r: s.phases.get("waiting_for_ranks", 0.0) + rendezvous[r] for r, s in by_rank.items()}
    if len(by_rank) == 1:
        return JobStartup(job, next(iter(by_rank)), "", dict(by_rank))
    if max(wait.values()) >= WAIT_FLOOR_S:  # the others waited for it
        holder = min(by_rank, key=lambda r: (wait[r], -by_rank[r].first_step_s, r))
    else:  # the last to its end (on the wall clock, where each start is known)
        known = len(starts) == len(by_rank)
        holder = max(by_rank, key=lambda r: ((by_rank[r].started_unix_s if known else 0.0) + by_rank[r].first_step_s, -r))
    h, others = by_rank[holder], [s for r, s in by_rank.items() if r != holder]
    excess: dict[str, float] = {}
    for phase in (*PHASES, "unattributed"):
        if phase in ("waiting_for_ranks", "distributed_init"):  # waiting: the others' time there was theirs for it
            continue
        mine = h.unattributed_s if phase == "unattributed" else h.phases.get(phase, 0.0)
        theirs = [o.unattributed_s if phase == "unattributed" else o.phases.get(phase, 0.0) for o in others]
        excess[phase] = mine - statistics.median(theirs)
    if h.started_unix_s > 0 and all(o.started_unix_s > 0 for o in others):
        excess["started"] = h.started_unix_s - statistics.median(o.started_unix_s for o in others)
    phase, d = max(excess.items(), key=lambda kv: kv[1])
    why = f"rank {holder} " + _LONGER[phase].format(d=duration_text(d)) if d >= WAIT_FLOOR_S else ""
    waiters = sorted(r for r in by_rank if r != holder and wait[r] >= WAIT_FLOOR_S)
    if waiters:
        waited = statistics.median(wait[r] for r in waiters)
        ops: dict[str, float] = {}
        for r in waiters:
            for op, s in (*by_rank[r].waits.items(), ("init_process_group", rendezvous[r])):
                ops[op] = ops.get(op, 0.0) + s
        where = _COLLECTIVES.get(max(ops, key=lambda k: ops[k]), "the first collectives") if ops else "the first collectives"
        why += ("; " if why else "") + f"{_ranks_text(waiters)} waited {duration_text(waited)} in {where}"
    return JobStartup(job, holder, why, dict(by_rank))


# -- two start-ups compared ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseChange:
    name: str  # "first_step" (the time to it), a phase, "unattributed", or "cache_saved"
    before_s: float
    after_s: float

    @property
    def delta_s(self) -> float:
        return self.after_s - self.before_s


def compare(before: Startup, after: Startup) -> tuple[PhaseChange, ...]:
    """The time to the first step, each phase (either start-up's), the rest, and what cache hits saved."""
    names = list(PHASES) + [p for p in {**before.phases, **after.phases} if p not in PHASES]
    rows = [PhaseChange("first_step_total", before.first_step_s, after.first_step_s)]
    rows += [PhaseChange(p, before.phases.get(p, 0.0), after.phases.get(p, 0.0)) for p in names]
    rows.append(PhaseChange("unattributed", before.unattributed_s, after.unattributed_s))
    rows.append(PhaseChange("cache_saved", before.cache.saved_s, after.cache.saved_s))
    return tuple(rows)


def _pct(before: float, after: float) -> str:
    return f", {100 * (after - before) / before:+.0f}%" if before > 0 else ""


def compare_lines(before: Startup, after: Startup, floor_s: float = 0.05) -> list[str]:
    """The comparison as text: the time to the first step, then each phase that moved by ``floor_s`` or more,
    largest move first."""
    rows = compare(before, after)
    total = rows[0]
    out = [
        f"time to first step: {duration_text(total.before_s)} -> {duration_text(total.after_s)} "
        f"({'+' if total.delta_s >= 0 else '-'}{duration_text(abs(total.delta_s))}{_pct(total.before_s, total.after_s)})"
    ]
    if before.end != after.end:
        out.append(f"  the start-ups ended differently: {before.end} -> {after.end}")
    for r in sorted(rows[1:-1], key=lambda r: -abs(r.delta_s)):
        if abs(r.delta_s) < floor_s:
            break
        out.append(
            f"  {WORDS.get(r.name, r.name):<20} {r.before_s:9.2f} s -> {r.after_s:9.2f} s  "
            f"({r.delta_s:+.2f} s{_pct(r.before_s, r.after_s)})"
        )
    saved = rows[-1]
    if abs(saved.delta_s) >= floor_s or before.cache.hits != after.cache.hits:
        out.append(
            f"  compile cache: {before.cache.hits} -> {after.cache.hits} hits, saved "
            f"{duration_text(saved.before_s)} -> {duration_text(saved.after_s)}"
        )
    return out


def gate(
    before: Startup, after: Startup, max_increase_s: float | None = None, max_increase_pct: float | None = None
) -> str | None:
    """The CI gate on the time to the first step: the line that says why it fails, or None."""
    grew = after.first_step_s - before.first_step_s
    if max_increase_s is not None and grew > max_increase_s:
        return (
            f"time to first step grew {duration_text(grew)} ({duration_text(before.first_step_s)} -> "
            f"{duration_text(after.first_step_s)}), more than the {duration_text(max_increase_s)} allowed"
        )
    if max_increase_pct is not None and before.first_step_s > 0 and 100 * grew / before.first_step_s > max_increase_pct:
        return (
            f"time to first step grew {100 * grew / before.first_step_s:.0f}% ({duration_text(before.first_step_s)}"
            f" -> {duration_text(after.first_step_s)}), more than the {max_increase_pct:g}% allowed"
        )
    return None


def by_rank(startups: Iterable[Startup]) -> dict[int, Startup]:
    """Start-ups keyed by rank (a start-up without one is rank 0, then the next free)."""
    out: dict[int, Startup] = {}
    for s in startups:
        r = s.rank if s.rank is not None and s.rank not in out else max(out, default=-1) + 1
        out[r] = s
    return out
