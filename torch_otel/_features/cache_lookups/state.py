"""Cache lookups' live state: the key history each miss is explained against, and its one writer.

Each pipeline makes one (:func:`make_state`), with the keys its source starts from:

- live: the key index of the run before (kept beside inductor's cache directory), or ``TORCH_OTEL_CACHE_BASELINE``'s
  run, read at the first lookup; the index is written at shutdown for the next run
  (torch_otel._features.cache_lookups.key_index);
- replay: ``--baseline``'s run, if named; replay offers it every artifact it reads (:meth:`CacheKeysState.observe`),
  whose lookup artifacts hold the keys of lookups torch logged no instant for (the FX graph loads inside an AOTAutograd
  hit);
- a side of ``torch-otel diff``: the new side starts from the base side's keys (:meth:`CacheKeysState.handover`), as
  another run's, so a key both sides missed is no news.

The derive step explains each finished compile's misses through it (:meth:`CacheKeysState.explain`), which remembers
their keys: the history is written by this state alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..._model.events import ArtifactEvent
from ..._model.record import CompileRecord
from ..feature import FeatureState, StateContext
from .events import CacheLookupEvent
from .explain import Explanation, KeyHistory, KeySeen
from .key_index import baseline_keys, live_key_history, remember_key

__all__ = ["BASE_RUN", "CacheKeysState", "make_state"]

BASE_RUN = "in the base run"  # where the new side of a diff says a key was seen


class CacheKeysState(FeatureState):
    """The key history (:class:`~torch_otel._features.cache_lookups.explain.KeyHistory`) of one pipeline; ``save``
    writes the key index at shutdown (live)."""

    def __init__(self, history: KeyHistory, save: Callable[[], None] | None = None) -> None:
        self.history = history
        self._save = save

    def explain(self, record: CompileRecord, lookups: Sequence[CacheLookupEvent]) -> list[Explanation | str | None]:
        """Why each miss of a finished compile missed, where each hit's entry came from (``own`` or ``other``); then
        its keys are remembered (the derive step calls it)."""
        return self.history.explain(record, lookups)

    def observe(self, event: Any, torch_version: str | None) -> None:
        """A lookup artifact's key (replay), remembered with the torch release its log was written by."""
        if isinstance(event, ArtifactEvent):
            remember_key(self.history, event, torch_version)

    def handover(self) -> list[KeySeen]:
        """This run's keys, as the next side of a diff compares with them: seen in the base run."""
        return [dataclasses.replace(k, where=BASE_RUN) for k in self.history.seen()]

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """The key index, the next run's baseline (live), written once."""
        save, self._save = self._save, None
        if save is not None:
            save()


def make_state(ctx: StateContext) -> CacheKeysState:
    """The key history ``ctx``'s source starts from (see the module)."""
    if ctx.source == "live":
        history, save = live_key_history(ctx.settings, ctx.logs)
        return CacheKeysState(history, save)
    if ctx.source == "diff":
        return CacheKeysState(KeyHistory(ctx.previous or (), independent=True))
    if not ctx.baseline:
        return CacheKeysState(KeyHistory())
    found, problems = baseline_keys(ctx.baseline, setting="--baseline", logs=ctx.logs)
    for p in problems:
        ctx.say(p)
    return CacheKeysState(KeyHistory(found))
