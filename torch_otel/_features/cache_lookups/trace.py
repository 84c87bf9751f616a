"""Cache lookups on the trace: an event on the compile's root span per lookup (which cache, its result, a short key,
its time, what a hit saved, why a miss missed), and how ``torch-otel diff`` reads one back from a traces file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._model.record import CompileRecord
from ..views import SpanEvent, Text
from .events import NAME, CacheLookupEvent, bypass_category
from .facts import Lookup, digests_of, lookups

__all__ = ["EVENT", "Attributes", "read_span_event", "span_events"]


EVENT = "torch.compile.cache_lookup"
SHORT_KEY = 12  # characters of a cache key on a span (torch's keys are 52)


class Attributes:
    """A ``torch.compile.cache_lookup`` event's attributes."""

    NAME = "torch.compile.cache.name"
    RESULT = "torch.compile.cache.result"
    KEY = "torch.compile.cache.key"
    BACKWARD = "torch.compile.cache.backward"
    TIME = "torch.compile.cache.time_s"
    TIME_SAVED = "torch.compile.cache.time_saved_s"
    TIME_TAKEN = "torch.compile.cache.time_taken_s"
    BYPASS_REASON = "torch.compile.cache.bypass_reason"
    BYPASS_CATEGORY = "torch.compile.cache.bypass_category"
    MISS_CAUSE = "torch.compile.cache.miss_cause"
    MISS_REASON = "torch.compile.cache.miss_reason"
    MISS_CHANGES = "torch.compile.cache.miss_changes"
    # a hit: "own" where this rank looked the key up before, "other" where it had not (another rank wrote the entry)
    HIT_ENTRY = "torch.compile.cache.hit_entry"
    PART_DIGESTS = "torch.compile.cache.part_digests"  # the key's parts hashed per class (part_digests)


def span_events(rec: CompileRecord, fmt: Text) -> list[SpanEvent]:
    """One cache lookup each: which cache, its result, a short key, its time and what a hit saved; why a miss missed."""
    out: list[SpanEvent] = []
    a_ = Attributes
    for x in lookups(rec):
        lk = x.event
        a: dict[str, Any] = {a_.NAME: lk.cache, a_.RESULT: lk.result}
        if lk.key:
            a[a_.KEY] = lk.key[:SHORT_KEY]
        if lk.backward is not None:
            a[a_.BACKWARD] = lk.backward
        if x.phase_ns is not None:
            a[a_.TIME] = round(x.phase_ns / 1e9, 6)
        if lk.time_saved_ns is not None and lk.cache == "fx_graph":
            # one definition of "saved", torch's: what an FX graph hit adds to CompilationMetrics.remote_cache_time_saved_s
            a[a_.TIME_SAVED] = round(lk.time_saved_ns / 1e9, 6)
        elif lk.time_saved_ns is not None:
            # an AOTAutograd hit: what compiling its entry took (its forward's and backward's); its FX graphs' savings
            # are torch's record of what it saved, on the root span
            a[a_.TIME_TAKEN] = round(lk.time_saved_ns / 1e9, 6)
        if lk.time_taken_ns is not None and lk.result == "miss":
            a[a_.TIME_TAKEN] = round(lk.time_taken_ns / 1e9, 6)
        if lk.result == "bypass":
            a[a_.BYPASS_REASON] = fmt.text(lk.bypass_reason or "")
            a[a_.BYPASS_CATEGORY] = bypass_category(lk.bypass_reason)
        if lk.result == "hit" and x.served in ("own", "other"):
            a[a_.HIT_ENTRY] = x.served
        digests = digests_of(x)
        if digests and lk.result in ("hit", "miss"):
            a[a_.PART_DIGESTS] = list(digests)
        e = x.explanation
        if e is not None:
            a[a_.MISS_CAUSE] = e.cause
            a[a_.MISS_REASON] = fmt.text(e.text())
            if e.changes:
                a[a_.MISS_CHANGES] = [fmt.text(c) for c in e.changes]
        out.append((EVENT, a, lk.ts_ns))
    return out


class _Explained:
    """A miss's explanation as a span carries it: the cause, its words and the changes (as caches.Explanation)."""

    def __init__(self, cause: str, reason: str, changes: list[str]) -> None:
        self.cause, self.reason, self.changes = cause, reason, changes

    def text(self) -> str:
        return self.reason

    def short(self) -> str:
        return "; ".join(self.changes) if self.changes else self.reason


def read_span_event(name: str, ea: Mapping[str, Any], rec: CompileRecord) -> bool:
    """A ``torch.compile.cache_lookup`` event of a traces file back into ``rec`` (torch-otel diff)."""
    if name != EVENT:
        return False
    a_ = Attributes
    cache, result = ea.get(a_.NAME), ea.get(a_.RESULT)
    if not isinstance(cache, str) or not isinstance(result, str):
        return True
    b = ea.get(a_.BACKWARD)
    why = ea.get(a_.BYPASS_REASON) if result == "bypass" else None
    lk = CacheLookupEvent(
        rec.compile_id,
        cache,
        result,
        key=ea.get(a_.KEY),
        backward=b if isinstance(b, bool) else None,
        bypass_reason=why if isinstance(why, str) and why else None,
    )
    t = ea.get(a_.TIME)
    explanation = None
    cause = ea.get(a_.MISS_CAUSE)
    if result == "miss" and isinstance(cause, str):
        changes = ea.get(a_.MISS_CHANGES)
        explanation = _Explained(
            cause, str(ea.get(a_.MISS_REASON) or cause), [str(c) for c in changes] if isinstance(changes, list) else []
        )
    served = ea.get(a_.HIT_ENTRY) if result == "hit" else None
    digests = ea.get(a_.PART_DIGESTS)
    rec.attached.setdefault(NAME, []).append(lk)
    rec.derived.setdefault(NAME, []).append(
        Lookup(
            lk,
            int(t * 1e9) if isinstance(t, (int, float)) else None,
            explanation,
            served if served in ("own", "other") else None,
            tuple(str(d) for d in digests) if isinstance(digests, list) else (),
        )
    )
    return True
