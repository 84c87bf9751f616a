"""Which ranks of a job serve full metric detail and keep every compile's trace (``TORCH_OTEL_DETAIL_RANKS``).

A job of thousands of ranks compiles much the same on each. The detail ranks serve every series (phase and
duration histograms, guard counts); the others serve a bounded set that still names a slow, failing or odd rank
(docs/distributed.md). The rank sampler (:mod:`torch_otel.sampling`) keeps every compile of the detail ranks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_ITEM = re.compile(r"^(?:(\d+)|(\d+)-(\d+)|%(\d+))$")
DEFAULT_DETAIL_RANKS = "0"


class RankSet:
    """Ranks named by text: ``all``, ``none``, or a comma list of ``N``, ``A-B`` and ``%N`` (every N-th rank: 0, N, 2N...).

    ``%8`` names the first rank of each 8-GPU node under torchrun's default placement.
    Raises ``ValueError`` with a one-line message on text it cannot read.
    """

    __slots__ = ("text", "_all", "_ranks", "_ranges", "_every")

    def __init__(self, text: str = DEFAULT_DETAIL_RANKS) -> None:
        self.text = text.strip().lower()
        self._all = self.text == "all"
        self._ranks: set[int] = set()
        self._ranges: list[tuple[int, int]] = []
        self._every: list[int] = []
        if self._all or self.text == "none":
            return
        for item in filter(None, (p.strip() for p in self.text.split(","))):
            m = _ITEM.match(item)
            if m is None:
                raise ValueError(f"{item!r} is not a rank, a range A-B or %N")
            if m.group(1) is not None:
                self._ranks.add(int(m.group(1)))
            elif m.group(4) is not None:
                if int(m.group(4)) < 1:
                    raise ValueError(f"{item!r}: %N needs N of 1 or more")
                self._every.append(int(m.group(4)))
            else:
                lo, hi = int(m.group(2)), int(m.group(3))
                if lo > hi:
                    raise ValueError(f"{item!r} is an empty range")
                self._ranges.append((lo, hi))
        if not (self._ranks or self._ranges or self._every):
            raise ValueError("names no rank")

    def __contains__(self, rank: object) -> bool:
        if self._all:
            return True
        try:
            r = int(rank)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return False
        return r in self._ranks or any(lo <= r <= hi for lo, hi in self._ranges) or any(r % n == 0 for n in self._every)

    def __repr__(self) -> str:
        return f"RankSet({self.text!r})"


def env_rank(env: Mapping[str, str] | None = None, default: int = 0) -> int:
    """This process's rank as its launcher gives it (torchrun's ``RANK``); ``default`` when unset or not a whole number.

    The one place the bridge reads ``RANK``: a rank label, a summary's ``{rank}``, the Pushgateway's grouping key
    and the rank sampler's fallback all agree, before torch.distributed is initialised as after.
    """
    if env is None:
        # os.environ's own dict (CPython keeps it in step with every change made through os.environ): one lookup, where
        # os.environ.get runs three Python functions and raises twice for an unset name (most processes')
        data = getattr(os.environ, "_data", None)
        raw: str | bytes = data.get(_RANK_KEY, b"") if type(data) is dict else os.environ.get("RANK", "")
    else:
        raw = env.get("RANK", "")
    raw = raw.strip()
    return int(raw) if raw.isdigit() else default


_RANK_KEY: str | bytes = "RANK" if os.name == "nt" else b"RANK"  # how os.environ's dict keys it
