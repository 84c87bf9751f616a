"""Cache lookups' event: one lookup in one of torch's compile caches, as torch logs it, and how torch's records become it.

torch logs each lookup as an instant event (``fx_graph_cache_miss``, ``autograd_cache_hit``, ...) whose metadata
holds the key, the result and the parts torch computed the key from (``components``: lines ``[hash] name: text``),
and writes the same as an artifact. Here, once each: the event (:class:`CacheLookupEvent`), its parts
(:class:`Component`), and the conversions the feature's parser rows name (:func:`from_instant`,
:func:`key_of_artifact`), after :data:`LOGGED_AS`, the one declaration of torch's names for a lookup.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..._core.compile_id import CompileId

__all__ = ["BYPASS_CATEGORIES", "CACHES", "LOGGED_AS", "NAME", "CacheLookupEvent", "Component", "artifact_names",
           "bypass_category", "cache_lookup", "component_class", "from_instant", "key_of_artifact", "parse_components"]  # fmt: skip


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


NAME = "cache_lookups"  # the feature's key on the record
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
