"""torch's cache lookups (FX graph, AOTAutograd), a kind of event declared in one place.

torch logs each lookup as an instant event (``fx_graph_cache_miss``, ``autograd_cache_hit``, ...) whose metadata
holds the key, the result and the parts torch computed the key from (``components``: lines ``[hash] name: text``),
and writes the same as an artifact. Here, once each:

- the event (:class:`CacheLookupEvent`) and the conversions the parser's rows name (:func:`from_instant`,
  :func:`key_of_artifact`), after :data:`LOGGED_AS`, the one declaration of torch's names for a lookup;
- how it joins its compile (:data:`KIND`'s ``attach``), and its facts, derived once into the record
  (:func:`derive`: the time of the phase that did each lookup, and why each miss missed, which
  torch_otel._analysis.caches works out against the keys seen before);
- what the sinks show: an event on the compile's root span per lookup (and how ``torch-otel diff`` reads it back),
  the misses, bypasses and the latest miss as metrics, and the run summary's ``caches`` part (cold and warm
  starts, why lookups missed, the ranks that missed what others hit).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._core.compile_id import CompileId
from .._core.merge import Merge, counts, num, rows, sum_int, sum_s
from .._model.compilation_metrics import compile_on_one_rank
from .._model.record import CompileRecord
from .feature import Attach, Feature, MetricsView, Observation, Series, SpanEvent, SpanView, SummaryView, Text


@dataclass(slots=True)
class CacheLookupEvent:
    """One lookup in one of torch's compile caches (``fx_graph``, ``aot_autograd``), as torch logs it.

    ``components`` are the parts torch computed the key from (:class:`Component`). What is derived for it (its
    phase's time, why a miss missed) is the record's (:class:`Lookup`), never written here.
    """

    compile_id: CompileId | None
    cache: str
    result: str  # hit, miss, bypass, disabled
    key: str | None = None
    components: tuple[Any, ...] = ()
    ts_ns: int | None = None
    time_saved_ns: int | None = None  # a hit: what torch says the entry saved
    time_taken_ns: int | None = None  # a miss: what torch says compiling the entry took
    bypass_reason: str | None = None
    backward: bool | None = None
    attempt: int = 0
    rank: int | None = None


NAME = "cache_lookups"  # the kind's key on the record
RESULTS = ("hit", "miss", "bypass", "disabled")
# How torch names a lookup, declared once: cache -> (the prefix of its instant events, the prefix of its artifacts).
# The parser's tables route both here (torch_otel._parse.records); the artifacts, which torch writes for every lookup
# of both caches (the FX graph loads inside an AOTAutograd hit log no instant), teach replay and a baseline the keys.
LOGGED_AS = {"fx_graph": ("fx_graph_cache_", "fx_graph_cache_"), "aot_autograd": ("autograd_cache_", "aotautograd_cache_")}
CACHES = tuple(LOGGED_AS)
MAX_LOOKUPS = 256  # cache lookups per compile (two per inductor graph)
MAX_PARTS = 4096  # components kept per lookup (torch's FX graph key has about 640)
MAX_TEXT = 80  # characters of a part's value shown in an explanation

_LINE = re.compile(r"^\[(\w+)\] ([^:\n]*):(?: (.*))?$", re.S)
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")

# component name (before any ``[...]``) -> class
_CLASS_OF = {
    "gm": "graph",
    "example_inputs": "inputs",
    "inputs_to_check": "inputs",
    "torch_version": "versions",
    "triton_version": "versions",
    "system_info": "system",
}
_CONFIG_NAMES = (
    "inductor_config",
    "fx_kwargs",
    "deterministic_algorithms_settings",
    "cuda_matmul_settings",
    "default_dtype",
    "cpp_runtime_thread_count",
    "provenance_tracking_level",
    "precompile_enabled",
    "cache_key_tag",
    "custom_backend_passes",
    "_fuse_ddp_communication_passes",
    # AOTAutograd's key (its parts are logged where torch._functorch._aot_autograd.autograd_cache logs at DEBUG):
    # autocast's dtype per device and grad mode, which change the graphs it compiles
    "autocast_state",
    "grad_enabled",
)


@dataclass(frozen=True, slots=True)
class Component:
    """One part of a cache key: its name, torch's hash of it, and its text where that is safe to show."""

    name: str
    digest: str
    text: str | None = None


def component_class(name: str) -> str:
    base = name.split("[", 1)[0]
    if base in _CLASS_OF:
        return _CLASS_OF[base]
    if name == "fx_kwargs[static_input_idxs]":
        return "inputs"
    if base in _CONFIG_NAMES or base.endswith(("_custom_pass", "_custom_pre_pass", "_custom_post_pass", "_partitioner_fn")):
        return "config"
    return "other"


def _safe_text(name: str, text: str | None, payloads: bool) -> str | None:
    """The part's text as an explanation may show it, or None where it may carry source or user data."""
    if text is None:
        return None
    cls = component_class(name)
    if cls in ("graph", "versions", "system") and not payloads:
        return None  # the graph's code, binary version strings, a hash of the machine
    text = _ADDRESS.sub("", text.strip())
    if payloads:
        return text[:4096]
    if cls == "inputs":
        return text[:1024]  # TensorMetadata: dtypes, shapes, strides, devices; no values
    if "/" in text or "\\" in text or "\n" in text or len(text) > MAX_TEXT:
        return None  # a path, code, or a long repr: its hash only
    return text


def parse_components(lines: Any, payloads: bool = False) -> tuple[Component, ...]:
    """torch's ``components`` (lines ``[hash] name: text``) -> parts; lines of another shape are left out."""
    if not isinstance(lines, (list, tuple)):
        return ()
    out = []
    for line in lines[:MAX_PARTS]:
        m = _LINE.match(line) if isinstance(line, str) else None
        if m:
            out.append(Component(m.group(2).strip(), m.group(1), _safe_text(m.group(2).strip(), m.group(3), payloads)))
    return tuple(out)


def _backward_of(parts: Sequence[Component], metadata: dict[str, Any]) -> bool | None:
    flag = metadata.get("is_backward")
    if isinstance(flag, bool):
        return flag
    for c in parts:
        if c.name == "fx_kwargs[is_backward]" and c.text in ("True", "False"):
            return c.text == "True"
    return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cache_lookup(
    cache: str, result: str, ts_ns: int | None, metadata: Any, compile_id: Any, attempt: int = 0, rank: int | None = None
) -> CacheLookupEvent | None:
    """torch's cache instant event (``fx_graph_cache_miss``, ``autograd_cache_hit``...) -> a lookup of ``cache``.

    ``result`` is the event name's (its ``cache_state`` decides where it has one). The same for live capture (the
    instant as torch logs it) and replay (the chromium event in the log); the parser's ``INSTANTS`` rows
    (torch_otel._parse.records) route each name here.
    """
    md = metadata if isinstance(metadata, dict) else {}
    state = md.get("cache_state")
    result = state if isinstance(state, str) and state in RESULTS else result
    if result not in RESULTS:
        return None
    parts = parse_components(md.get("components"))
    saved = _int(md.get("time_saved_ns"))
    if saved is None and _int(md.get("time_saved_ms")) is not None:
        saved = int(md["time_saved_ms"] * 1_000_000)
    reason = md.get("cache_bypass_reason")
    key = md.get("key")
    return CacheLookupEvent(
        compile_id,
        cache,
        result,
        key=key if isinstance(key, str) and key else None,
        components=parts,
        ts_ns=ts_ns,
        time_saved_ns=saved if result == "hit" else None,
        time_taken_ns=_int(md.get("time_taken_ns")),
        bypass_reason=str(reason)[:4096] if reason else None,
        backward=_backward_of(parts, md),
        attempt=attempt,
        rank=rank,
    )


BYPASS_CATEGORIES = ("custom_pass", "unsupported_op", "pickle", "config", "other")
# torch's bypass reasons (BypassFxGraphCache, BypassAOTAutogradCache) -> a bounded label, first match wins
_BYPASS_RULES = (
    ("custom_pass", re.compile(r"custom .*pass|uuid|raw callable|context_fn|cache_hash", re.I)),
    ("unsupported_op", re.compile(r"unsupported (node op|call_function|call_method)", re.I)),
    ("pickle", re.compile(r"pickl|stable cache key", re.I)),
    ("config", re.compile(r"freezing|not enabled|fakify_first_call|requires triton|disabled", re.I)),
)


def bypass_category(reason: str | None) -> str:
    """A bypass reason (torch's exception text) -> one of :data:`BYPASS_CATEGORIES`."""
    for name, pattern in _BYPASS_RULES:
        if reason and pattern.search(reason):
            return name
    return "other"


# -- what the parser's rows name ----------------------------------------------------------------------------------


def from_instant(
    cache: str, prefix: str
) -> Callable[[str, int | None, Any, CompileId | None, int, int | None], list[Any] | None]:
    """The parser's ``INSTANTS`` handler for ``cache``'s instant events (``prefix`` + result)."""

    def handler(
        name: str, ts_ns: int | None, args: Any, cid: CompileId | None, attempt: int, rank: int | None
    ) -> list[Any] | None:
        lookup = cache_lookup(cache, name[len(prefix) :], ts_ns, args, cid, attempt, rank)
        return None if lookup is None else [lookup]

    return handler


def artifact_names() -> tuple[str, ...]:
    """The artifacts torch writes for each lookup (the parser keeps their payloads: replay learns the keys from them)."""
    return tuple(f"{artifact}{r}" for _, artifact in LOGGED_AS.values() for r in ("hit", "miss", "bypass"))


def key_of_artifact(name: str, payload: str | None, compile_id: Any) -> CacheLookupEvent | None:
    """A lookup artifact (``fx_graph_cache_miss``...) -> the lookup it records, with its key; None: not one, or no key."""
    cache = next((c for c, (_, artifact) in LOGGED_AS.items() if name.startswith(artifact)), None)
    if cache is None:
        return None
    try:
        info = json.loads(payload or "null")
    except ValueError:
        return None
    lk = cache_lookup(cache, name.rsplit("_", 1)[-1], None, info, compile_id)
    return lk if lk is not None and lk.key else None


# -- its facts, derived once into the record -------------------------------------------------------------------------


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


def tensor_inputs(parts: Sequence[Component]) -> int:
    """How many tensors a key lists as inputs (its ``example_inputs[i]`` parts; a size made dynamic adds a symbolic
    int, which is no tensor)."""
    return sum(1 for c in parts if c.name.startswith("example_inputs[") and (c.text is None or "TensorMetadata" in c.text))


def part_digests(parts: Sequence[Component]) -> tuple[str, ...]:
    """A key's parts, hashed per class (``config:1f3a09c2``), with its tensor inputs counted (``tensors:3``) and its
    autocast parts apart (``autocast:...``): enough to say, against another key of the same graph, which class of
    part changed, without the parts (torch-otel diff of summaries and traces). Empty for a key torch listed no parts
    for."""
    if not parts:
        return ()
    groups: dict[str, list[str]] = {}
    for c in parts:
        cls = "autocast" if c.name.split("[", 1)[0] == "autocast_state" else component_class(c.name)
        groups.setdefault(cls, []).append(f"{c.name}={c.digest}")
    out = [f"{k}:{hashlib.sha256(chr(10).join(sorted(v)).encode()).hexdigest()[:10]}" for k, v in sorted(groups.items())]
    return (*out, f"tensors:{tensor_inputs(parts)}")


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
    for node, _ in rec.root.walk():
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


# -- the spans' view: an event on the root span per lookup, and how diff reads it back -----------------------------

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
    """An exported ``torch.compile.cache_lookup`` event back into ``rec`` (torch-otel diff of a traces file)."""
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


# -- the metrics' view ---------------------------------------------------------------------------------------------

SERIES = (
    Series(
        "torch_compile_cache_misses",
        "counter",
        "Compile cache lookups that missed, by cache and by the cause found (docs/caches.md): first_seen, "
        "not_in_cache, or the class of what changed (versions, system, config, inputs, graph, other).",
        ("rank", "cache", "cause"),
    ),
    Series(
        "torch_compile_cache_bypasses",
        "counter",
        "Compile cache lookups torch bypassed, by a category of torch's reason (the reason is on the span).",
        ("rank", "cache", "reason"),
    ),
    Series(
        "torch_compile_cache_last_miss",
        "info",
        "This rank's latest compile cache miss, 1: the cache, its graph (compile id and pass), the cause and the "
        "first part of the key that changed. One series per rank.",
        ("rank", "cache", "graph", "cause", "component"),
    ),
)


def observations(rec: CompileRecord, rank: str) -> Iterator[Observation]:
    """Misses by cause, bypasses by reason category, and the rank's latest miss (graph, cause, component)."""
    last = None
    for x in lookups(rec):
        lk = x.event
        if lk.result == "bypass":
            yield "torch_compile_cache_bypasses", (rank, lk.cache, bypass_category(lk.bypass_reason)), 1, None
        elif lk.result == "miss" and x.explanation is not None:
            yield "torch_compile_cache_misses", (rank, lk.cache, x.explanation.cause), 1, None
            last = x
    if last is not None:
        e = last.explanation
        backward = last.event.backward
        graph = f"{rec.id_str} {'backward' if backward else 'forward' if backward is False else ''}".strip()
        component = e.components[0] if e.components else ""
        yield "torch_compile_cache_last_miss", (rank, last.event.cache, graph, e.cause, component), 1, None


# -- the run summary's view: its ``caches`` part --------------------------------------------------------------------


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def summary_text(facts: Mapping[str, Any], width: int) -> list[str]:
    """The summary's cache lines: torch's counts (else the lookups it logged), then cold and warm, and why."""
    caches: dict[str, list[str]] = {}
    for c in facts["cache"]:
        caches.setdefault(c["cache"], []).append(f"{c['location']} {c['result']} {c['count']}")
    if not caches:  # torch's metrics have no counts (an older log): the lookups it logged events for
        for c in (facts.get("caches") or {}).get("lookups") or []:
            caches.setdefault(c["cache"], []).append(f"{c['result']} {c['count']}")
    out = ["cache: " + ("; ".join(f"{k} {', '.join(v)}" for k, v in caches.items()) if caches else "no lookups")]
    c = facts.get("caches") or {}
    # a bypass first: no cache serves it on any run; then what compile_on_one_rank did, then cold and warm
    return out + _bypass_lines(c, width) + _one_rank_lines(c, width) + _cache_lines(c, width)


def _one_rank_lines(c: Mapping[str, Any], width: int) -> list[str]:
    """Under compile_on_one_rank: what this rank compiled, and what it was served from another rank's compile."""
    one = c.get("one_rank") or {}
    if not one.get("compiles"):
        return []

    def by_cache(d: Any) -> str:
        return ", ".join(f"{k} {n}" for k, n in (d or {}).items()) or "none"

    out = [
        _cut(
            f"  compile_on_one_rank ({one['compiles']} compile{'s' if one['compiles'] > 1 else ''}): "
            f"compiled, for every rank (missed): {by_cache(one.get('compiled'))}",
            width,
        ),
        _cut(
            f"    served from what another rank wrote: {by_cache(one.get('served_by_another'))}"
            + (f"; from its own entries: {by_cache(one.get('served_own'))}" if one.get("served_own") else ""),
            width,
        ),
    ]
    for g in (c.get("shared_graphs") or [])[:3]:
        on = ", ".join(str(r) for r in g["compiled_on"]) or "none"
        to = ", ".join(str(r) for r in g["served_to"]) or "none"
        out.append(_cut(f"  {g['cache']} {g['graph']}: compiled on rank {on}, served to rank {to}", width))
    return out


def _bypass_lines(c: Mapping[str, Any], width: int) -> list[str]:
    """The lookups torch bypassed, with its reason in its own words: each compiles afresh on every run."""
    rows = [r for r in c.get("bypasses") or [] if isinstance(r, Mapping)]
    if not rows:
        return []
    n = sum(int(num(r.get("count"))) for r in rows)
    cost = c.get("bypass_cost_s")
    spent = f", {cost:.2f} s compiling here" if isinstance(cost, (int, float)) and cost > 0 else ""
    out = [f"  bypassed: {n} lookup{'s' if n > 1 else ''}, compiled afresh on every run{spent}; torch's reasons:"]
    for r in rows[:3]:
        out.append(f"  {int(num(r.get('count'))):>5}  {_cut(str(r.get('cache')) + ' ' + str(r.get('reason')), width - 9)}")
    if len(rows) > 3:
        out.append(f"         ({len(rows) - 3} more bypass reasons: --json or the HTML page lists them)")
    return out


def _cache_lines(c: dict[str, Any], width: int) -> list[str]:
    """Cold and warm: the work the misses cost, the loads, what the hits saved; why misses missed; odd ranks."""
    if not c or not (c.get("hit_rate") or c.get("misses")):
        return []
    out = [  # two lines: the definition torch gives "saved" is named, within 100 columns
        f"  cold work (misses) {c['miss_cost_s']:.2f} s, loading from caches {c['load_s']:.2f} s",
        f"  saved by hits {c['saved_s']:.2f} s (torch's remote_cache_time_saved_s)",
    ]
    rates = ", ".join(f"{k} {v['rate']:.0%} ({v['hits']} of {v['hits'] + v['misses']})" for k, v in c["hit_rate"].items())
    if rates:
        out.append(f"  hit rate: {rates}")
    by = c.get("misses_by_cause") or {}
    if by:
        out.append("  misses by cause: " + ", ".join(f"{k} {n}" for k, n in by.items()))
    for r in (c.get("top_reasons") or [])[:3]:
        out.append(f"  {r['count']:>5}  {_cut(r['cache'] + ' ' + r['reason'], width - 9)}")
    for r in (c.get("odd_ranks") or [])[:3]:
        out.append(f"  {_cut(r['line'], width - 2)}")
    more = len(c.get("odd_ranks") or []) - 3
    if more > 0:
        out.append(f"  ({more} more ranks missed what others hit)")
    return out


MAX_CACHE_SLOTS = 4096  # graphs whose lookups are compared across ranks
MAX_CACHE_REASONS = 200
MAX_KEY_ROWS = 2048  # lookups whose key the summary keeps (torch-otel diff compares runs by them)
MAX_MERGED_KEY_ROWS = 65536  # and a job's summaries merged
MAX_BYPASS_REASONS = 50  # distinct bypass reasons kept


def pass_of(backward: bool | None) -> str:
    """A lookup's pass as the summary and the metrics name it: ``backward``, ``forward`` or "" (torch did not say)."""
    return "backward" if backward else "forward" if backward is False else ""


def bypass_words(reason: str | None) -> str:
    """torch's bypass reason, whole and on one line, as the summary and the diff show it."""
    return " ".join(str(reason or "torch gave no reason").split())[:1000]


class CachesPart:
    """Cold and warm starts: the time misses cost and hits saved, why misses missed, and ranks that missed alone."""

    def __init__(self) -> None:
        self.load_ns = 0
        self.miss_cost_ns = 0
        self.bypass_cost_ns = 0
        self.saved_s = 0.0
        self.lookups: Counter[tuple[str, str]] = Counter()  # (cache, result): the lookups torch logged events for
        self.causes: Counter[tuple[str, str]] = Counter()  # (cache, cause)
        self.reasons: Counter[tuple[str, str]] = Counter()  # (cache, explanation text)
        self.reason_cause: dict[tuple[str, str], str] = {}  # its cause
        # (cache, compile id, pass) -> rank -> (result, cause text); compared across ranks
        self.slots: dict[tuple[str, str, str], dict[int, tuple[str, str]]] = {}
        # each lookup's key (its first SHORT_KEY characters), as spans carry it: (rank, cache, id, pass, key, result,
        # cause); torch-otel diff compares two runs by them, whichever form each run was read from
        self.keys: list[tuple[int | None, str, str, str, str, str, str | None, tuple[str, ...]]] = []
        self.keys_left_out = 0
        # (cache, torch's bypass reason) -> lookups bypassed for it
        self.bypasses: Counter[tuple[str, str]] = Counter()
        # compiles under torch 2.14's compile_on_one_rank, and their lookups: compiled on this rank (a miss), served
        # from an entry another rank wrote (a hit of a key it had not looked up before), or from its own entry
        self.one_rank_compiles = 0
        self.one_rank: dict[str, Counter[str]] = {"compiled": Counter(), "served_by_another": Counter(), "served_own": Counter()}
        self.one_rank_slots: set[tuple[str, str, str]] = set()

    def add(self, rec: CompileRecord) -> None:
        saved = (rec.metrics or {}).get("remote_cache_time_saved_s")
        if isinstance(saved, (int, float)) and not isinstance(saved, bool) and saved > 0:
            self.saved_s += saved
        found = lookups(rec)
        if not found:
            return
        one = compile_on_one_rank(rec.metrics)
        if one:
            self.one_rank_compiles += 1
        aot_miss = [x for x in found if x.event.cache == "aot_autograd" and x.event.result == "miss"]
        aot_uncached = [x for x in found if x.event.cache == "aot_autograd" and x.event.result in ("miss", "bypass")]
        for x in found:
            lk = x.event
            self.lookups[(lk.cache, lk.result)] += 1
            if lk.result == "hit" and x.phase_ns:
                self.load_ns += x.phase_ns
            if lk.result == "miss" and x.phase_ns and (lk.cache == "aot_autograd" or not aot_miss):
                self.miss_cost_ns += x.phase_ns  # an FX graph's compile is inside its AOTAutograd miss's
            if lk.result == "bypass" and x.phase_ns and (lk.cache == "aot_autograd" or not aot_uncached):
                self.bypass_cost_ns += x.phase_ns  # the same: counted once, where no cache could serve it
            if one and lk.result == "miss":
                self.one_rank["compiled"][lk.cache] += 1
            elif one and lk.result == "hit":
                self.one_rank["served_own" if x.served == "own" else "served_by_another"][lk.cache] += 1
            e = x.explanation
            if lk.result == "bypass":
                why = (lk.cache, bypass_words(lk.bypass_reason))
                if why in self.bypasses or len(self.bypasses) < MAX_BYPASS_REASONS:
                    self.bypasses[why] += 1
                else:
                    self.bypasses[(lk.cache, "(other reasons)")] += 1
            if lk.key and lk.result in ("hit", "miss", "bypass"):
                if len(self.keys) < MAX_KEY_ROWS:
                    cause = e.cause if lk.result == "miss" and e is not None else None
                    digests = digests_of(x) if lk.result != "bypass" else ()
                    row = (rec.rank, lk.cache, rec.id_str, pass_of(lk.backward), lk.key[:SHORT_KEY], lk.result, cause, digests)
                    self.keys.append(row)
                else:
                    self.keys_left_out += 1
            if lk.result == "miss" and e is not None:
                self.causes[(lk.cache, e.cause)] += 1
                key = (lk.cache, e.text()[:300])
                if key in self.reasons or len(self.reasons) < MAX_CACHE_REASONS:
                    self.reasons[key] += 1
                    self.reason_cause.setdefault(key, e.cause)
            if rec.rank is not None and lk.result in ("hit", "miss"):
                slot = (lk.cache, rec.id_str, pass_of(lk.backward))
                if one and len(self.one_rank_slots) < MAX_CACHE_SLOTS:
                    self.one_rank_slots.add(slot)  # a graph of no rank: one rank compiles it for all
                ranks = self.slots.get(slot)
                if ranks is None and len(self.slots) < MAX_CACHE_SLOTS:
                    ranks = self.slots[slot] = {}
                if ranks is not None:
                    # against another rank that looked the graph up (replay of a job), else its own explanation
                    said = (getattr(e, "across", None) or e.short()) if e is not None else ""
                    ranks.setdefault(rec.rank, (lk.result, str(said)))

    def odd_ranks(self) -> list[dict[str, Any]]:
        """Per graph that some ranks hit and others missed: each rank that missed, with why."""
        out = []
        for (cache, cid, pass_), ranks in sorted(self.slots.items()):
            hit = sorted(r for r, (res, _) in ranks.items() if res == "hit")
            missed = sorted(r for r, (res, _) in ranks.items() if res == "miss")
            if not hit or not missed or (cache, cid, pass_) in self.one_rank_slots:
                continue  # under compile_on_one_rank the rank that missed compiled the graph for all: no odd rank
            graph = f"{cid} {pass_}".strip()
            others = ", ".join(str(r) for r in hit[:8]) + (" ..." if len(hit) > 8 else "")
            for r in missed:
                why = ranks[r][1]
                out.append(
                    {
                        "rank": r,
                        "cache": cache,
                        "graph": graph,
                        "hit_on": hit,
                        "reason": why,
                        "line": f"rank {r} missed {cache} {graph} (rank {others} hit it): {why}",
                    }
                )
        return out

    def shared_graphs(self) -> list[dict[str, Any]]:
        """Per graph compiled under compile_on_one_rank (replay of a job): the ranks that compiled it (their lookup
        missed) and those it was served to (theirs hit)."""
        out = []
        for slot in sorted(self.one_rank_slots):
            ranks = self.slots.get(slot) or {}
            cache, cid, pass_ = slot
            compiled = sorted(r for r, (res, _) in ranks.items() if res == "miss")
            served = sorted(r for r, (res, _) in ranks.items() if res == "hit")
            if len(ranks) > 1:
                out.append({"cache": cache, "graph": f"{cid} {pass_}".strip(), "compiled_on": compiled, "served_to": served})
        return out

    def to_dict(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The ``caches`` part; ``facts["cache"]`` are torch's counts (CompilationMetrics), the summary's own."""
        torch_counts = {(c["cache"], c["location"], c["result"]): c["count"] for c in facts.get("cache") or []}
        rates: dict[str, dict[str, Any]] = {}
        counted = {cache for (cache, _loc, _r) in torch_counts}
        # torch's counts (its CompilationMetrics); a cache they lack (older logs) by the lookups' events
        found = [(cache, result, n) for (cache, _loc, result), n in sorted(torch_counts.items())]
        found += [(cache, result, n) for (cache, result), n in sorted(self.lookups.items()) if cache not in counted]
        for cache, result, n in found:
            if result in ("hit", "miss"):
                r = rates.setdefault(cache, {"hits": 0, "misses": 0})
                r["hits" if result == "hit" else "misses"] += n
        for r in rates.values():
            r["rate"] = round(r["hits"] / (r["hits"] + r["misses"]), 4) if r["hits"] + r["misses"] else 0.0
        by_cause: Counter[str] = Counter()
        for (_, cause), n in self.causes.items():
            by_cause[cause] += n
        return {
            "miss_cost_s": round(self.miss_cost_ns / 1e9, 6),
            "bypass_cost_s": round(self.bypass_cost_ns / 1e9, 6),
            "load_s": round(self.load_ns / 1e9, 6),
            "saved_s": round(self.saved_s, 6),
            "hit_rate": rates,
            "lookups": [{"cache": c, "result": r, "count": n} for (c, r), n in sorted(self.lookups.items())],
            "misses": sum(self.causes.values()),
            "misses_by_cause": dict(by_cause.most_common()),
            "misses_by_cache_and_cause": [{"cache": c, "cause": k, "count": n} for (c, k), n in sorted(self.causes.items())],
            "top_reasons": [
                {"cache": c, "cause": self.reason_cause.get((c, t)), "reason": t, "count": n}
                for (c, t), n in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
            ],
            "odd_ranks": self.odd_ranks(),
            "bypasses": [
                {"cache": c, "reason": r, "category": bypass_category(r), "count": n}
                for (c, r), n in sorted(self.bypasses.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "keys": sorted((_key_row(k) for k in self.keys), key=_key_order),
            "keys_left_out": self.keys_left_out,
            "one_rank": {"compiles": self.one_rank_compiles, **{k: dict(sorted(v.items())) for k, v in self.one_rank.items()}},
            "shared_graphs": self.shared_graphs(),
        }


def _key_row(k: tuple[int | None, str, str, str, str, str, str | None, tuple[str, ...]]) -> dict[str, Any]:
    rank, cache, cid, pass_, key, result, cause, digests = k
    row: dict[str, Any] = {"cache": cache, "id": cid, "pass": pass_, "key": key, "result": result}
    if cause is not None:
        row["cause"] = cause
    if digests:
        row["parts"] = dict(d.split(":", 1) for d in digests if ":" in d)
    if rank is not None:
        row["rank"] = rank
    return row


def _key_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    rank = r.get("rank")
    return (rank if isinstance(rank, int) else -1, str(r.get("id")), str(r.get("cache")), str(r.get("pass")), str(r.get("key")))


def _key_rows(values: list[Any]) -> list[dict[str, Any]]:
    """Each summary's lookups' keys, one list (a job's ranks each looked up their own)."""
    out = [dict(r) for v in values for r in v or [] if isinstance(r, Mapping)]
    return sorted(out, key=_key_order)[:MAX_MERGED_KEY_ROWS]


def _hit_rates(values: list[Any]) -> dict[str, dict[str, Any]]:
    rates: dict[str, dict[str, Any]] = {}
    for hit_rate in values:
        for cache, r in (hit_rate or {}).items():
            x = rates.setdefault(cache, {"hits": 0, "misses": 0})
            x["hits"] += int(num(r.get("hits")))
            x["misses"] += int(num(r.get("misses")))
    for x in rates.values():
        x["rate"] = round(x["hits"] / (x["hits"] + x["misses"]), 4) if x["hits"] + x["misses"] else 0.0
    return rates


MERGE = Merge(
    section={
        "miss_cost_s": Merge(sum_s),
        "bypass_cost_s": Merge(sum_s),
        "load_s": Merge(sum_s),
        "saved_s": Merge(sum_s),
        "hit_rate": Merge(_hit_rates),
        "lookups": Merge(rows(lambda r: (r.get("cache"), r.get("result")), ("count",))),
        "misses": Merge(sum_int),
        "misses_by_cause": Merge(counts),
        "misses_by_cache_and_cause": Merge(rows(lambda r: (r.get("cache"), r.get("cause")), ("count",))),
        "top_reasons": Merge(rows(lambda r: (r.get("cache"), r.get("reason")), ("count",))),
        "odd_ranks": Merge(why="found by comparing ranks, which one rank's summary cannot"),
        "bypasses": Merge(rows(lambda r: (r.get("cache"), r.get("reason")), ("count",))),
        "keys": Merge(_key_rows),
        "keys_left_out": Merge(sum_int),
        "one_rank": Merge(
            section={
                "compiles": Merge(sum_int),
                "compiled": Merge(counts),
                "served_by_another": Merge(counts),
                "served_own": Merge(counts),
            }
        ),
        "shared_graphs": Merge(why="found by comparing ranks, which one rank's summary cannot"),
    }
)

# -- the kind ------------------------------------------------------------------------------------------------------

KIND = Feature(
    NAME,
    CacheLookupEvent,
    Attach(NAME, MAX_LOOKUPS, raises_attempt=True),
    derive=derive,
    spans=SpanView(span_events, read_span_event, (EVENT, *(v for k, v in vars(Attributes).items() if k.isupper()))),
    metrics=MetricsView(SERIES, observations),
    summary=SummaryView("caches", CachesPart, summary_text, MERGE),
)
