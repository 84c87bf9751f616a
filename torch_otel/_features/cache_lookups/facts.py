"""Cache lookups' facts, derived once into the record: the time of the phase that did each lookup, and why each miss
missed (torch_otel._features.cache_lookups.explain, against the keys seen before: the feature's live state)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..._model.record import CompileRecord
from .events import NAME, CacheLookupEvent, part_digests

__all__ = ["Explainer", "Lookup", "derive", "digests_of", "lookups"]


@dataclass(frozen=True, slots=True)
class Lookup:
    """One lookup as the record holds it: the event as torch logged it, the time of the phase that did it (a load on a
    hit, the compile on a miss), and why it missed (:class:`torch_otel._analysis.caches.Explanation`; a trace's words
    when ``torch-otel diff`` read it back)."""

    event: CacheLookupEvent
    phase_ns: int | None = None
    explanation: Any = None
    # a hit: whether this rank looked the key up before (``own``: its entry) or not (``other``: another rank, or a run
    # of another rank, wrote it); compile_on_one_rank's compiled-here or served-from-another-rank
    served: str | None = None
    # a hash of its key's parts per class, as a trace carries them (:func:`part_digests`; else from the parts)
    digests: tuple[str, ...] = ()


def digests_of(x: Lookup) -> tuple[str, ...]:
    """A lookup's :func:`part_digests`: as its trace carried them, else from its parts."""
    return x.digests or part_digests(x.event.components)


class Explainer(Protocol):
    """Why each miss of a finished compile missed, and where each hit's entry came from (``own`` or ``other``; None
    where it cannot say); remembers its keys (the key history)."""

    def explain(self, record: CompileRecord, lookups: Sequence[CacheLookupEvent]) -> list[Any]: ...


# the phase that does a lookup: its duration is the time the lookup cost (a load on a hit, the compile on a miss)
_LOOKUP_PHASES = {"fx_graph": "inductor_compile", "aot_autograd": "backend_compile"}


def _phase_ns(rec: CompileRecord, lk: CacheLookupEvent) -> int | None:
    """The innermost phase of its cache open when torch logged the lookup: its duration."""
    if lk.ts_ns is None:
        return None
    best = None
    for node in rec.phase_nodes():
        end = node.end_ns if node.end_ns is not None else node.start_ns
        if node.name == _LOOKUP_PHASES.get(lk.cache) and node.start_ns <= lk.ts_ns <= end:
            best = node  # depth-first: a later match is nested deeper or beside; the innermost wins
    return (best.end_ns or best.start_ns) - best.start_ns if best is not None else None


def derive(rec: CompileRecord, keys: Explainer | None) -> None:
    """Each lookup's phase time and, given the key history, why each miss missed: ``rec.derived[NAME]``."""
    events = rec.attached.get(NAME)
    if not events:
        return
    explained = keys.explain(rec, events) if keys is not None else [None] * len(events)
    rec.derived[NAME] = [
        Lookup(
            lk,
            _phase_ns(rec, lk),
            e if lk.result == "miss" else None,
            e if lk.result == "hit" else None,
            part_digests(lk.components),  # once: the spans and the summary both write them
        )
        for lk, e in zip(events, explained, strict=True)
    ]


def lookups(rec: CompileRecord) -> list[Lookup]:
    """The record's lookups with what was derived for them (nothing, where no derive step ran)."""
    found: list[Lookup] | None = rec.derived.get(NAME)
    return found if found is not None else [Lookup(lk) for lk in rec.attached.get(NAME, ())]
