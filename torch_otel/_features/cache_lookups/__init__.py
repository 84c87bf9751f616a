"""torch's cache lookups (FX graph, AOTAutograd) and why each miss missed: a feature, declared here.

- events: the lookup as torch logs it, its key's parts, and how torch's records become it;
- facts: what the derive step works out for each lookup (its phase's time, why a miss missed: explain, against the
  key history, the feature's live state: state; the key index the next run reads: key_index);
- trace: an event on the compile's root span per lookup, and how ``torch-otel diff`` reads it back; series: misses by
  cause, bypasses, the latest miss;
- summary_part: the run summary's ``caches`` part (cold and warm starts, why lookups missed, the ranks that missed what
  others hit); diff_part: its comparison in ``torch-otel diff`` and the gate's ``cache`` condition; page.js: its part
  of the HTML pages.
"""

from __future__ import annotations

from typing import Any

from ..._attach.points import AttachTarget, EventTap, Source
from ..feature import Attach, Feature, ParseRows
from ..views import DiffView, MetricsView, PageView, SpanView, SummaryView
from . import diff_part, summary_part, trace
from .events import LOGGED_AS, MAX_LOOKUPS, NAME, CacheLookupEvent, artifact_names, from_instant
from .facts import derive
from .series import SERIES, observations
from .state import make_state

__all__ = ["FEATURE"]

# torch's instant events of a lookup, by name prefix: replay reads them from the log, live capture from torch's call
INSTANTS = tuple((prefix, from_instant(cache, prefix)) for cache, (prefix, _) in LOGGED_AS.items())


def _lookups_of_call(args: tuple[Any, ...], kwargs: dict[str, Any], cid: Any) -> list[Any]:
    """``ChromiumEventLogger.log_instant_event(self, event_name, time_ns, metadata, ...)`` -> the lookup it logs, if
    it is one (off torch's path: the tap queued the call)."""
    named = dict(zip(("self", "event_name", "time_ns", "metadata"), args, strict=False)) | kwargs
    name, ts = named.get("event_name"), named.get("time_ns")
    if not isinstance(name, str):
        return []
    for prefix, handler in INSTANTS:
        if name.startswith(prefix):
            return handler(name, ts if isinstance(ts, int) else None, named.get("metadata"), cid, 0, None) or []
    return []


# The feature's row of live capture's attach table
ROWS: tuple[Source[AttachTarget], ...] = (
    EventTap(
        "cache_lookups",
        "each FX graph and AOTAutograd cache lookup: its key, result, time saved, and why a miss missed",
        "torch._dynamo.utils",
        owner="ChromiumEventLogger",
        attr="log_instant_event",  # every instant torch logs: its cache lookups among them, at no payload cost
        to_events=_lookups_of_call,
        delivers=(CacheLookupEvent,),
    ),
)

FEATURE = Feature(
    NAME,
    CacheLookupEvent,
    Attach(NAME, MAX_LOOKUPS, raises_attempt=True),
    # the lookups' instants; the artifacts torch writes for every lookup of both caches (the FX graph loads inside an
    # AOTAutograd hit log no instant), whose payloads replay keeps: the state learns the keys from them
    parse=ParseRows(INSTANTS, tuple((name, None) for name in artifact_names())),
    hooks=ROWS,
    state=make_state,
    derive=derive,
    spans=SpanView(
        trace.span_events, trace.read_span_event, (trace.EVENT, *(v for k, v in vars(trace.Attributes).items() if k.isupper()))
    ),
    metrics=MetricsView(SERIES, observations),
    summary=SummaryView("caches", lambda state: summary_part.CachesPart(), summary_part.summary_text, summary_part.MERGE),
    diff=DiffView(
        "cache",
        diff_part.compare,
        diff_part.text,
        keep=2,
        before="recompiling_frames",
        per_rank=diff_part.per_rank,
        conditions=(diff_part.CONDITION,),
    ),
    page=PageView(__name__, "page.js"),
)
