"""Why a compile missed torch's caches: each missed key's parts, compared with the nearest key of its graph seen before.

torch computes each FX graph and AOTAutograd cache key from a list of components, one line each: ``[hash] name:
text`` (the graph's code, each input's metadata, every inductor config value, the torch version, the system).
A key that missed is compared, part by part and by hash (a part's text may differ while its hash does not: a
function's address), with the nearest key of the same graph seen before:

- earlier in this process (a recompile), on another rank (replay of a job's directory), or in the previous run
  (the key index kept beside the inductor cache, :class:`KeyIndex`), or in a baseline the user names;
- the same key seen before: the entry was not in this cache (a new or cleared cache directory, another node's
  local cache, an evicted entry), never a changed part;
- nothing to compare with: first seen.

The parts that differ are named by their meaning ("inductor config size_asserts: True → False", "input 0: shape
[8, 8] → [16, 8]", "torch 2.13.0 → 2.15.0", "graph code changed") and classed for metric labels (:data:`CLASSES`).
The text of the graph, of binary parts and of values that can carry source or user data never leaves the process
unless payload capture is on: only the parts' hashes are compared and kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._compile_id import CompileId
from ._events import CacheLookupEvent
from ._record import CompileRecord

__all__ = [
    "CAUSES",
    "CLASSES",
    "Component",
    "Explanation",
    "KeyHistory",
    "KeyIndex",
    "KeySeen",
    "cache_lookup",
    "parse_components",
]

CACHES = ("fx_graph", "aot_autograd")
RESULTS = ("hit", "miss", "bypass", "disabled")
# What changed, most telling first (a miss's cause is the class of its first change)
CLASSES = ("versions", "system", "config", "inputs", "graph", "other")
# A miss's cause, as the metric label says it
CAUSES = ("first_seen", "not_in_cache", *CLASSES)
MAX_PARTS = 4096  # components kept per lookup (torch's FX graph key has about 640)
MAX_TEXT = 80  # characters of a part's value shown in an explanation
MAX_CHANGES = 8  # changes named per miss (the rest counted)

_LINE = re.compile(r"^\[(\w+)\] ([^:\n]*):(?: (.*))?$", re.S)
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_TENSOR_FIELDS = ("dtype", "shape", "stride", "device", "layout", "requires_grad", "memory_format", "storage_offset")
_TENSOR_FIELD = re.compile(r"(\w+)=(torch\.Size\(\[[^\]]*\]\)|\([^)]*\)|device\(type='[^']*'(?:, index=\d+)?\)|[^,)]+)")

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
    instant as torch logs it) and replay (the chromium event in the log); :data:`torch_otel._parse.INSTANTS` routes
    each name here.
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


# -- keys seen before -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeySeen:
    """A key seen before, and where: earlier in this run, on another rank, in the previous run."""

    cache: str
    frame: tuple[int | None, int | None]  # (compiled-autograd id, frame id): the graph's frame
    compile_id: str
    backward: bool | None
    key: str
    result: str
    parts: tuple[Component, ...]
    where: str  # "earlier in this run", "on rank 0", "in the previous run"
    rank: int | None = None
    torch_version: str | None = None
    # an AOTAutograd entry: the FX graph keys it loads on a hit (torch logs those loads live no event of their own)
    loads: tuple[str, ...] = ()


@dataclass(slots=True)
class Explanation:
    """Why a lookup missed: its cause (:data:`CAUSES`), each part that changed, and what it was compared with."""

    cause: str
    changes: tuple[str, ...] = ()  # each changed part in words
    classes: tuple[str, ...] = ()  # each one's class
    against: str | None = None  # "0/0 earlier in this run", "0/0 in the previous run (torch 2.13.0)", "0/0 on rank 0"
    more: int = 0  # changes not named
    components: tuple[str, ...] = ()  # each one's component name (``inductor_config[size_asserts]``)

    def short(self) -> str:
        """The changes alone, where there are some (the cause's words otherwise)."""
        return "; ".join(self.changes) + (f" (and {self.more} more)" if self.more else "") if self.changes else self.text()

    def text(self) -> str:
        if self.cause == "first_seen":
            return "first seen" + (f" ({self.against})" if self.against else "")
        if self.cause == "not_in_cache":
            return (
                f"not in this cache: the same key was seen {self.against}; a new or cleared cache directory, "
                "another node's local cache, or an evicted entry"
            )
        named = "; ".join(self.changes) or "the key changed (torch recorded no parts for it)"
        more = f" (and {self.more} more)" if self.more else ""
        return f"{named}{more}, against {self.against}"


def _tensor_fields(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return {k: v for k, v in _TENSOR_FIELD.findall(text) if k in _TENSOR_FIELDS}


def _shape(value: str) -> str:
    m = re.match(r"torch\.Size\((\[[^\]]*\])\)", value)
    return m.group(1) if m else value


def _describe(name: str, old: Component | None, new: Component | None, versions: tuple[str | None, str | None]) -> str:
    """One changed part in words."""
    cls = component_class(name)
    shown = name
    if name.startswith("inductor_config[") and name.endswith("]"):
        shown = f"inductor config {name[len('inductor_config[') : -1]}"
    elif name.startswith("fx_kwargs[") and name.endswith("]"):
        shown = f"compile argument {name[len('fx_kwargs[') : -1]}"
    if old is None or new is None:
        return f"{shown} {'added' if old is None else 'removed'}"
    if cls == "versions" and name == "torch_version":
        before, after = versions
        if before and after and before != after:
            return f"torch {before} → {after}"
        return "torch version changed"
    if cls == "system":
        return "system changed (device, driver or triton)"
    if cls == "graph":
        return "graph code changed"
    if cls == "inputs" and name.startswith("example_inputs["):
        index = name[len("example_inputs[") : -1]
        a, b = _tensor_fields(old.text), _tensor_fields(new.text)
        diffs = [
            f"{k} {_shape(a[k]) if k == 'shape' else a[k]} → {_shape(b[k]) if k == 'shape' else b[k]}"
            for k in _TENSOR_FIELDS
            if k in a and k in b and a[k] != b[k]
        ]
        return f"input {index}: " + (", ".join(diffs) if diffs else "metadata changed")
    if old.text is not None and new.text is not None:
        return f"{shown}: {old.text or '(empty)'} → {new.text or '(empty)'}"
    return f"{shown} changed"


def compare(
    new: Sequence[Component], old: Sequence[Component], versions: tuple[str | None, str | None] = (None, None)
) -> list[tuple[str, str, str]]:
    """Each changed part as (words, class, component name), most telling first; by hash, over the parts both have.

    Between releases (the torch version part differs), the parts only one release has are not listed: a new
    release adds and drops inductor config keys, and the version names the cause.
    """
    a = {c.name: c for c in old}
    b = {c.name: c for c in new}
    release_changed = "torch_version" in a and "torch_version" in b and a["torch_version"].digest != b["torch_version"].digest
    changed = []
    for name in list(dict.fromkeys([*a, *b])):
        o, n = a.get(name), b.get(name)
        if o is not None and n is not None and o.digest == n.digest:
            continue
        if (o is None or n is None) and release_changed:
            continue
        changed.append((CLASSES.index(component_class(name)), name, o, n))
    changed.sort(key=lambda t: t[0])
    return [(_describe(name, o, n, versions), CLASSES[c], name) for c, name, o, n in changed]


def _score(new: Sequence[Component], old: Sequence[Component]) -> int:
    """How alike two keys are: the parts they share, by hash."""
    a = {c.name: c.digest for c in old}
    return sum(1 for c in new if a.get(c.name) == c.digest)


class KeyHistory:
    """The keys seen so far, by cache and frame, and a baseline's; explains each miss of a finished compile.

    Bounded: at most ``max_keys`` keys of this run are kept (the oldest go first). The assembler calls
    :meth:`explain` once per finished compile, before the sinks see it.
    """

    def __init__(
        self,
        baseline: Iterable[KeySeen] | Callable[[], Iterable[KeySeen]] = (),
        max_keys: int = 4096,
        where: str = "earlier in this run",
        torch_version: str | None = None,
    ) -> None:
        self.max_keys = max_keys
        self.where = where
        # this run's torch, where its records do not say (live: torch.__version__; 2.10's metrics lack it)
        self.torch_version = torch_version
        self._lock = threading.Lock()
        # a callable is read at the first lookup (live: the key index, only once something looks up a cache)
        self._load: Callable[[], Iterable[KeySeen]] | None = baseline if callable(baseline) else None
        self._baseline: dict[tuple[str, tuple[int | None, int | None]], list[KeySeen]] = {}
        self._baseline_keys: dict[str, KeySeen] = {}
        if not callable(baseline):
            self._add_baseline(baseline)
        self._seen: OrderedDict[tuple[str, str, bool | None, str], KeySeen] = OrderedDict()  # (cache, id, bwd, key)
        self._by_key: dict[str, KeySeen] = {}

    def _add_baseline(self, baseline: Iterable[KeySeen]) -> None:
        for seen in baseline:
            self._baseline.setdefault((seen.cache, seen.frame), []).append(seen)
            self._baseline_keys.setdefault(seen.key, seen)

    def baseline(self) -> list[KeySeen]:
        """The baseline's keys (what the key index keeps of the graphs this run did not look up again)."""
        with self._lock:
            return [s for group in self._baseline.values() for s in group]

    def seen(self) -> list[KeySeen]:
        """This run's keys, oldest first (what the key index keeps for the next run)."""
        with self._lock:
            return list(self._seen.values())

    def derive(self, rec: CompileRecord) -> None:
        """Each lookup's phase time and each miss's :class:`Explanation`; then remember the compile's keys."""
        if not rec.cache_lookups:
            return
        lookup_phases(rec)
        with self._lock:
            if self._load is not None:
                load, self._load = self._load, None
                self._add_baseline(load())
            version = _torch_version(rec) or self.torch_version
            for lk in rec.cache_lookups:
                if lk.result == "miss" and lk.explanation is None:
                    lk.explanation = self._explain(lk, rec, version)
            _borrow_fx_causes(rec)
            for lk in rec.cache_lookups:
                if lk.key:
                    self._remember(lk, rec.compile_id, rec.rank, version)
            self._remember_loads(rec)

    def _remember_loads(self, rec: CompileRecord) -> None:
        """An AOTAutograd miss compiled these FX graphs: its entry loads them on a hit. A hit: they were looked up."""
        fx = tuple(lk.key for lk in rec.cache_lookups if lk.cache == "fx_graph" and lk.key)
        for lk in rec.cache_lookups:
            if lk.cache != "aot_autograd" or not lk.key:
                continue
            k = (lk.cache, rec.id_str, lk.backward, lk.key)
            seen = self._seen.get(k)
            if lk.result == "miss" and fx and seen is not None:
                self._seen[k] = dataclasses.replace(seen, loads=fx)
                self._by_key[lk.key] = self._seen[k]
            elif lk.result == "hit":
                entry = next((e for e in (self._by_key.get(lk.key), self._baseline_keys.get(lk.key)) if e and e.loads), None)
                if entry is None:
                    continue
                if seen is not None:
                    self._seen[k] = self._by_key[lk.key] = dataclasses.replace(seen, loads=entry.loads)
                for key in entry.loads:
                    graph = self._by_key.get(key) or self._baseline_keys.get(key)
                    if graph is not None:
                        self._add(
                            dataclasses.replace(graph, compile_id=rec.id_str, result="hit", where=self.where, rank=rec.rank)
                        )

    def _frame(self, rec: CompileRecord) -> tuple[int | None, int | None]:
        cid = rec.compile_id
        return (cid.compiled_autograd_id, cid.frame_id) if cid is not None else (None, None)

    def _explain(self, lk: CacheLookupEvent, rec: CompileRecord, version: str | None) -> Explanation:
        if lk.key:
            same = self._by_key.get(lk.key)
            if same is not None and same.compile_id == rec.id_str and same.rank == rec.rank and same.where == self.where:
                same = None  # this very lookup, known from its artifact (replay) before its compile ended
            same = same or self._baseline_keys.get(lk.key)
            other_rank = same is not None and same.where == self.where and same.rank != rec.rank
            if same is not None and (same.result == "hit" or not other_rank):
                return Explanation("not_in_cache", against=_against(same, rec.rank, version))
            if same is not None:  # another rank missed it too: cold on both
                return Explanation("first_seen", against=f"{_against(same, rec.rank, version)} missed it too")
        frame = self._frame(rec)
        candidates = [
            s
            for s in self._seen.values()
            if s.cache == lk.cache and s.frame == frame and s.backward == lk.backward and s.key != lk.key
        ]
        candidates += [s for s in self._baseline.get((lk.cache, frame), ()) if s.backward == lk.backward]
        if not candidates:
            return Explanation("first_seen")
        # nearest: the most parts alike; then the same compile id; then the most recent
        ranked = sorted(
            enumerate(candidates),
            key=lambda t: (_score(lk.components, t[1].parts), t[1].compile_id == rec.id_str, t[0]),
        )
        nearest = ranked[-1][1]
        against = _against(nearest, rec.rank, version)
        if not lk.components or not nearest.parts:
            return Explanation("other", (), (), against)
        changed = compare(lk.components, nearest.parts, (nearest.torch_version, version))
        if not changed:  # every part alike, yet another key: torch hashed something it does not list
            return Explanation("other", ("a part torch does not list changed",), ("other",), against)
        shown = changed[:MAX_CHANGES]
        return Explanation(
            shown[0][1],
            tuple(c[0] for c in shown),
            tuple(c[1] for c in shown),
            against,
            len(changed) - len(shown),
            tuple(c[2] for c in shown),
        )

    def remember(self, lk: CacheLookupEvent, cid: CompileId | None, rank: int | None, version: str | None) -> None:
        """Keep a key this run looked up (bounded: the oldest go first)."""
        with self._lock:
            self._remember(lk, cid, rank, version)

    def _remember(self, lk: CacheLookupEvent, cid: CompileId | None, rank: int | None, version: str | None) -> None:
        assert lk.key is not None
        frame = (cid.compiled_autograd_id, cid.frame_id) if cid is not None else (None, None)
        id_str = str(cid) if cid is not None else "-/-"
        self._add(KeySeen(lk.cache, frame, id_str, lk.backward, lk.key, lk.result, lk.components, self.where, rank, version))

    def _add(self, seen: KeySeen) -> None:
        k = (seen.cache, seen.compile_id, seen.backward, seen.key)
        self._seen[k] = seen
        self._seen.move_to_end(k)
        self._by_key[seen.key] = seen
        while len(self._seen) > self.max_keys:
            _, old = self._seen.popitem(last=False)
            if self._by_key.get(old.key) is old:
                del self._by_key[old.key]


def _torch_version(rec: CompileRecord) -> str | None:
    v = (rec.metrics or {}).get("pytorch_version") or rec.torch_version
    return v if isinstance(v, str) and v else None


def _against(seen: KeySeen, rank: int | None, version: str | None = None) -> str:
    """The key compared with, in words: ``0/0 earlier in this run``, ``0/0 on rank 1``, ``0/0 in the previous run``
    (with its torch release where it is not this run's)."""
    elsewhere = seen.rank is not None and rank is not None and seen.rank != rank
    where = seen.where
    if elsewhere:  # another rank's key: of this run (replay of a job's directory), or of its previous run
        where = f"on rank {seen.rank}" if seen.where == "earlier in this run" else f"{seen.where} on rank {seen.rank}"
    other = seen.torch_version and version and seen.torch_version != version
    return f"{seen.compile_id} {where}" + (f" (torch {seen.torch_version})" if other else "")


# the phase that does a lookup: its duration is the time the lookup cost (a load on a hit, the compile on a miss)
_LOOKUP_PHASES = {"fx_graph": "inductor_compile", "aot_autograd": "backend_compile"}


def lookup_phases(rec: CompileRecord) -> None:
    """Each lookup's ``phase_ns``: the innermost phase of its cache that was open when torch logged it."""
    for lk in rec.cache_lookups:
        if lk.ts_ns is None or lk.phase_ns is not None:
            continue
        best = None
        for node, _ in rec.root.walk():
            end = node.end_ns if node.end_ns is not None else node.start_ns
            if node.name == _LOOKUP_PHASES[lk.cache] and node.start_ns <= lk.ts_ns <= end:
                best = node  # depth-first: a later match is nested deeper or beside; the innermost wins
        if best is not None:
            lk.phase_ns = (best.end_ns or best.start_ns) - best.start_ns


def _borrow_fx_causes(rec: CompileRecord) -> None:
    """An AOTAutograd key with no parts recorded (torch 2.13 lists none) missed: its FX graphs' misses say why."""
    fx = [lk.explanation for lk in rec.cache_lookups if lk.cache == "fx_graph" and lk.explanation is not None]
    for lk in rec.cache_lookups:
        e = lk.explanation
        if lk.cache == "aot_autograd" and e is not None and e.cause == "other" and not e.changes and fx:
            best = next((x for x in fx if x.changes), fx[0])
            lk.explanation = Explanation(best.cause, best.changes, best.classes, best.against, best.more, best.components)


# -- the key index kept beside the inductor cache ---------------------------------------------------------------

INDEX_FORMAT = "torch-otel cache key index"
INDEX_VERSION = 1
MAX_INDEX_KEYS = 2048  # keys a rank's index keeps (the most recent)
MAX_INDEX_BYTES = 4 * 1024 * 1024  # and at most this much on disk


def default_cache_dir() -> str | None:
    """inductor's cache directory (``TORCHINDUCTOR_CACHE_DIR``, else torch's default), without importing inductor."""
    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if d:
        return d
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return str(cache_dir())
    except Exception:  # noqa: BLE001 - a torch without it
        return None


@dataclass
class KeyIndex:
    """A rank's keys of the last run, in ``<cache dir>/torch-otel/keys-rank<R>.json``: the next run's baseline.

    Bounded (:data:`MAX_INDEX_KEYS`, :data:`MAX_INDEX_BYTES`). It holds keys and the hashes of their parts, and
    the text only of parts safe to show (config values, input metadata), never the graph's code.
    """

    path: str
    problems: list[str] = field(default_factory=list)

    def load(self, where: str = "in the previous run") -> list[KeySeen]:
        """The keys it holds; [] when there is no index yet. A corrupt one is one line in ``problems``."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            self.problems.append(
                f"the cache key index {self.path} cannot be read ({getattr(exc, 'strerror', None) or exc}); "
                "misses are explained against this run only, and the index is written afresh at exit"
            )
            return []
        return read_index(doc, where, self.path, self.problems)

    def save(self, history: KeyHistory, torch_version: str | None, rank: int | None) -> None:
        """This run's keys after the baseline's others, oldest first: a miss is compared with the nearest of them."""
        seen = history.seen()
        keys = {s.key for s in seen}
        kept = [s for s in history.baseline() if s.key not in keys]  # older keys stay, the newest last (bounded)
        doc = index_document([*kept, *seen], torch_version, rank)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(doc)
        os.replace(tmp, self.path)  # a reader never sees half a file


def index_document(seen: Sequence[KeySeen], torch_version: str | None, rank: int | None) -> str:
    """The index's JSON: the newest keys first kept, within both bounds. Parts common to most keys are stored once."""
    keep = list(seen)[-MAX_INDEX_KEYS:]
    while True:
        doc = _index(keep, torch_version, rank)
        text = json.dumps(doc, separators=(",", ":"))
        if len(text.encode()) <= MAX_INDEX_BYTES or not keep:
            return text
        keep = keep[len(keep) // 4 or 1 :]  # drop the oldest quarter


def _index(keep: Sequence[KeySeen], torch_version: str | None, rank: int | None) -> dict[str, Any]:
    counts: dict[tuple[str, str], int] = {}
    for s in keep:
        for c in s.parts:
            counts[(c.name, c.digest)] = counts.get((c.name, c.digest), 0) + 1
    common: dict[str, str] = {}
    for (name, digest), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if name not in common and n > len(keep) // 2:
            common[name] = digest
    texts: dict[str, str] = {}
    entries = []
    for s in keep:
        parts = {}
        names = set()
        for c in s.parts:
            names.add(c.name)
            if common.get(c.name) != c.digest:
                parts[c.name] = c.digest
            if c.text is not None:
                texts.setdefault(c.digest, c.text)
        missing = [n for n in common if n not in names]
        entry: dict[str, Any] = {
            "cache": s.cache,
            "frame": list(s.frame),
            "id": s.compile_id,
            "backward": s.backward,
            "key": s.key,
            "result": s.result,
            "parts": parts,
        }
        if missing:
            entry["without"] = missing
        if s.torch_version:
            entry["torch"] = s.torch_version
        if s.loads:
            entry["loads"] = list(s.loads)
        entries.append(entry)
    return {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "torch": torch_version,
        "rank": rank,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "common": common,
        "texts": texts,
        "keys": entries,
    }


def read_index(doc: Any, where: str, path: str, problems: list[str]) -> list[KeySeen]:
    if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT:
        problems.append(f"{path} is not a torch-otel cache key index; pass an index (keys-rank<R>.json) or a TORCH_TRACE log")
        return []
    if doc.get("version") != INDEX_VERSION:
        problems.append(
            f"{path} is a cache key index of another torch-otel version (format {doc.get('version')!r}); "
            "misses are explained against this run only"
        )
        return []
    common: dict[str, str] = doc["common"] if isinstance(doc.get("common"), dict) else {}
    texts: dict[str, str] = doc["texts"] if isinstance(doc.get("texts"), dict) else {}
    out = []
    for e in doc.get("keys") or []:
        try:
            parts_map = {**common, **e.get("parts", {})}
            for name in e.get("without", ()):
                parts_map.pop(name, None)
            parts = tuple(Component(n, d, texts.get(d)) for n, d in parts_map.items())
            frame = tuple(e["frame"])
            out.append(
                KeySeen(
                    e["cache"],
                    (frame[0], frame[1]),
                    e["id"],
                    e.get("backward"),
                    e["key"],
                    e.get("result", "miss"),
                    parts,
                    where,
                    doc.get("rank"),
                    e.get("torch") or doc.get("torch"),
                    tuple(str(k) for k in e.get("loads", ())),
                )
            )
        except (KeyError, TypeError, ValueError, IndexError):
            problems.append(f"{path} holds an entry of an unknown shape; it is left out")
            break
    return out
