"""The rank sampler: every compile of the detail ranks, and the failed, limit-hit and slow compiles of every rank.

A job of thousands of ranks compiles the same graphs on each, so a full trace per compile per rank is thousands of
copies of one tree. Name this sampler in the standard setting::

    OTEL_TRACES_SAMPLER=torch_otel_rank
    OTEL_TRACES_SAMPLER_ARG=0,%8        # the detail ranks (default: TORCH_OTEL_DETAIL_RANKS, else rank 0)

It is registered under the SDK's ``opentelemetry_traces_sampler`` entry point, so ``opentelemetry-instrument``, the
bridge's own set-up and any SDK that reads ``OTEL_TRACES_SAMPLER`` find it. It keeps a compile root when:

- its rank is a detail rank (``rank``);
- the compile failed (``failed``) or hit the recompile limit (``recompile_limit``), on any rank;
- it took at least ``SLOW_FACTOR`` times this process's median compile of the same kind, and at least
  ``SLOW_MIN_S`` (``slow``), on any rank;
- it is a recompile (``recompile``): ranks that compile the same things recompile alike, so a recompile on one
  rank is worth its trace, and the odd rank of a job (the one that alone recompiles) keeps it.

A kept root says why in ``torch.compile.sampled_because``. A dropped compile builds no span at all: the bridge asks
the sampler once, for its root, and builds the rest only when it is kept. Dropped compiles are counted in
``torch_otel_compiles_not_sampled_total``. Every other span (not a compile root) is sampled as the SDK's default
does (parent-based, always on), so the user's own spans and their children are untouched. Metrics cover every
rank whatever the sampler keeps.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from ._core.ranks import RankSet, env_rank

__all__ = ["RankSampler", "SLOW_FACTOR", "SLOW_MIN_S", "SAMPLED_BECAUSE"]

SAMPLED_BECAUSE = "torch.compile.sampled_because"
SLOW_FACTOR = 3.0
SLOW_MIN_S = 1.0
_HISTORY = 256  # durations kept per compile kind, for the median


class RankSampler(Sampler):
    """Keeps the compiles of ``ranks``, and the failed, recompile-limit and slow compiles of every rank."""

    def __init__(
        self, ranks: RankSet | str | None = None, slow_factor: float = SLOW_FACTOR, slow_min_s: float = SLOW_MIN_S
    ) -> None:
        if ranks is None:
            ranks = os.environ.get("TORCH_OTEL_DETAIL_RANKS", "").strip() or "0"
        self.ranks = ranks if isinstance(ranks, RankSet) else RankSet(ranks)
        self.slow_factor = slow_factor
        self.slow_min_s = slow_min_s
        self._others = ParentBased(ALWAYS_ON)
        self._durations: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def reason(self, attributes: Attributes) -> str | None:
        """Why a compile root with these attributes is kept, or None to drop it."""
        a = attributes or {}
        if a.get("error.type"):
            return "recompile_limit" if a.get("torch.compile.recompile_limit_exceeded") else "failed"
        slow = self._slow(str(a.get("torch.compile.kind")), a.get("torch.compile.duration_s"))
        if _rank_of(a) in self.ranks:
            return "rank"
        if slow:
            return "slow"
        return "recompile" if a.get("torch.compile.is_recompile") is True else None

    def _slow(self, kind: str, duration: object) -> bool:
        if not isinstance(duration, (int, float)) or isinstance(duration, bool):
            return False
        with self._lock:
            seen = self._durations.setdefault(kind, deque(maxlen=_HISTORY))
            usual = statistics.median(seen) if seen else None
            seen.append(float(duration))
        return usual is not None and duration >= max(self.slow_min_s, self.slow_factor * usual)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if not attributes or "torch.compile.kind" not in attributes:  # not a compile root: the SDK's default
            return self._others.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        why = self.reason(attributes)
        state = get_current_span(parent_context).get_span_context().trace_state
        if why is None:
            return SamplingResult(Decision.DROP, None, state)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, {**attributes, SAMPLED_BECAUSE: why}, state)  # the span keeps these

    def get_description(self) -> str:
        return f"TorchOtelRankSampler{{ranks={self.ranks.text},slow={self.slow_factor:g}x}}"


def _rank_of(a: Any) -> int:
    rank = a.get("torch.distributed.rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    return env_rank()


def rank_sampler(arg: str | None = None) -> RankSampler:
    """The ``opentelemetry_traces_sampler`` entry point: ``OTEL_TRACES_SAMPLER_ARG`` names the detail ranks."""
    return RankSampler(arg.strip() if arg and arg.strip() else None)
