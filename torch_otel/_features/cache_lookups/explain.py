"""Why a compile missed torch's caches: each missed key's parts, compared with the nearest key of its graph seen before.

torch computes each FX graph and AOTAutograd cache key from a list of components, one line each: ``[hash] name:
text`` (the graph's code, each input's metadata, every inductor config value, the torch version, the system).
A key that missed is compared, part by part and by hash (a part's text may differ while its hash does not: a
function's address), with the nearest key of the same graph seen before:

- earlier in this process (a recompile), on another rank (replay of a job's directory), or in an earlier run
  (the key index kept beside the inductor cache, :class:`KeyIndex`), or in a baseline the user names;
- the same key seen before: the entry was not in this cache (a new or cleared cache directory, another node's
  local cache, an evicted entry), never a changed part;
- nothing to compare with: first seen.

The parts that differ are named by their meaning ("inductor config size_asserts: True → False", "input 0: shape
[8, 8] → [16, 8]", "torch 2.13.0 → 2.15.0", "graph code changed") and classed for metric labels (:mod:`.key_changes`).
The text of the graph, of binary parts and of values that can carry source or user data never leaves the process
unless payload capture is on: only the parts' hashes are compared and kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._core.compile_id import CompileId
from ..._model.compilation_metrics import compile_on_one_rank
from ..._model.record import CompileRecord
from .events import CacheLookupEvent, Component
from .key_changes import compare, likeness

__all__ = ["Explanation", "KeyHistory", "KeySeen", "functorch_digest"]

MAX_CHANGES = 8  # changes named per miss (the rest counted)


# -- keys seen before -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeySeen:
    """A key seen before, and where: earlier in this run, on another rank, in an earlier run."""

    cache: str
    frame: tuple[int | None, int | None]  # (compiled-autograd id, frame id): the graph's frame
    compile_id: str
    backward: bool | None
    key: str
    result: str
    parts: tuple[Component, ...]
    where: str  # "earlier in this run", "on rank 0", "in an earlier run"
    rank: int | None = None
    torch_version: str | None = None
    # an AOTAutograd entry: the FX graph keys it loads on a hit (torch logs those loads live no event of their own)
    loads: tuple[str, ...] = ()
    # an AOTAutograd key: a hash of the functorch config its compile ran with (CompilationMetrics.functorch_config,
    # torch 2.13 and later), a part of the key torch lists only with its autograd_cache logger at DEBUG
    functorch: str | None = None


@dataclass(slots=True)
class Explanation:
    """Why a lookup missed: its cause (:data:`.key_changes.CAUSES`), each part that changed, and what it was compared with."""

    cause: str
    changes: tuple[str, ...] = ()  # each changed part in words
    classes: tuple[str, ...] = ()  # each one's class
    against: str | None = None  # "0/0 earlier in this run", "0/0 in an earlier run (torch 2.13.0)", "0/0 on rank 0"
    more: int = 0  # changes not named
    components: tuple[str, ...] = ()  # each one's component name (``inductor_config[size_asserts]``)
    # against another rank's key of the same graph in this run (replay of a job's directory): what differs from it,
    # for the ranks that missed what others hit; never the cause, which is against the rank's own history, as live
    across: str | None = None

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


class KeyHistory:
    """The keys seen so far, by cache and frame, and a baseline's; explains each miss of a finished compile.

    Each rank's lookups are explained against that rank's own history, as a live rank is: its own earlier keys, and
    the baseline's keys of that rank (where the baseline has none of it, every rank's: a rank new to a cache reads
    the others' indexes live). Replay of a job's directory feeds every rank into one history; the other ranks' keys
    of the same graph are compared too, but only to say what a rank that missed differs in from one that hit
    (:attr:`Explanation.across`).

    Bounded: at most ``max_keys`` keys of this run are kept (the oldest go first). The assembler calls
    :meth:`explain` once per finished compile, before the sinks see it.
    """

    def __init__(
        self,
        baseline: Iterable[KeySeen] | Callable[[], Iterable[KeySeen]] = (),
        max_keys: int = 4096,
        where: str = "earlier in this run",
        torch_version: str | None = None,
        independent: bool = False,
    ) -> None:
        self.max_keys = max_keys
        # the baseline is another run, not this cache's past (torch-otel diff's base): a key it missed too was cold
        # in both runs, which says nothing about this cache
        self.independent = independent
        self.where = where
        # this run's torch, where its records do not say (live: torch.__version__; 2.10's metrics lack it)
        self.torch_version = torch_version
        self._lock = threading.Lock()
        # a callable is read at the first lookup (live: the key index, only once something looks up a cache)
        self._load: Callable[[], Iterable[KeySeen]] | None = baseline if callable(baseline) else None
        self._baseline: dict[tuple[str, tuple[int | None, int | None]], list[KeySeen]] = {}
        self._baseline_keys: dict[str, list[KeySeen]] = {}
        self._baseline_ranks: set[int] = set()
        if not callable(baseline):
            self._add_baseline(baseline)
        self._seen: OrderedDict[tuple[int | None, str, str, bool | None, str], KeySeen] = OrderedDict()
        self._by_key: dict[tuple[int | None, str], KeySeen] = {}  # (rank, key)
        # (rank, compile id) -> whether its forward FX graph's miss named its code and not its inputs: a backward whose
        # forward's code changed takes other inputs because of it (a config change beside it, or none)
        self._forward_code: OrderedDict[tuple[int | None, str], bool] = OrderedDict()
        # (rank, compile id) -> the autocast change its AOTAutograd key named: (words, class, component)
        self._forward_autocast: OrderedDict[tuple[int | None, str], tuple[str, str, str]] = OrderedDict()

    def _add_baseline(self, baseline: Iterable[KeySeen]) -> None:
        for seen in baseline:
            self._baseline.setdefault((seen.cache, seen.frame), []).append(seen)
            self._baseline_keys.setdefault(seen.key, []).append(seen)
            if seen.rank is not None:
                self._baseline_ranks.add(seen.rank)

    def _mine(self, seen: KeySeen, rank: int | None) -> bool:
        """Whether a key seen is of ``rank``'s history: of this run, its own; of the baseline, its own where the
        baseline has any of that rank, else any rank's."""
        if seen.where == self.where:
            return seen.rank == rank or seen.rank is None or rank is None
        if rank is None or seen.rank is None or rank not in self._baseline_ranks:
            return True
        return seen.rank == rank

    def baseline(self) -> list[KeySeen]:
        """The baseline's keys (what the key index keeps of the graphs this run did not look up again)."""
        with self._lock:
            return [s for group in self._baseline.values() for s in group]

    def seen(self) -> list[KeySeen]:
        """This run's keys, oldest first (what the key index keeps for the next run)."""
        with self._lock:
            return list(self._seen.values())

    def explain(self, rec: CompileRecord, lookups: Sequence[CacheLookupEvent]) -> list[Explanation | str | None]:
        """Each miss's :class:`Explanation`, each hit's origin (:meth:`_served`), None for the others, in order; then
        the compile's keys are remembered. The cache lookups' derive step calls it once per finished compile
        (torch_otel._features.cache_lookups); the lookups themselves are left as torch logged them."""
        if not lookups:
            return []
        with self._lock:
            if self._load is not None:
                load, self._load = self._load, None
                self._add_baseline(load())
            version = _torch_version(rec) or self.torch_version
            functorch = functorch_digest(rec.metrics)
            explained = [self._explain(lk, rec, version) if lk.result == "miss" else None for lk in lookups]
            served = [self._served(lk, rec) if lk.result == "hit" else None for lk in lookups]
            for lk, e in zip(lookups, explained, strict=True):
                if lk.cache == "fx_graph" and lk.backward is False and e is not None:
                    self._forward_code[(rec.rank, rec.id_str)] = "graph" in e.classes and "inputs" not in e.classes
                    self._forward_code.move_to_end((rec.rank, rec.id_str))
                    while len(self._forward_code) > self.max_keys:
                        self._forward_code.popitem(last=False)
            self._borrow_fx_causes(lookups, explained, rec, functorch)
            # an AOTAutograd key with no parts listed differs from another rank's as its FX graphs do
            across = next(
                (e.across for lk, e in zip(lookups, explained, strict=True) if lk.cache == "fx_graph" and e and e.across), None
            )
            for lk, e in zip(lookups, explained, strict=True):
                if lk.cache == "aot_autograd" and e is not None and e.across is None:
                    e.across = across
            # a backward's lookups hold no AOTAutograd lookup: its forward's says whether autocast changed
            lead = _autocast_leads(lookups, explained, self._forward_autocast.get((rec.rank, rec.id_str)))
            if lead is not None:
                self._forward_autocast[(rec.rank, rec.id_str)] = lead
                self._forward_autocast.move_to_end((rec.rank, rec.id_str))
                while len(self._forward_autocast) > self.max_keys:
                    self._forward_autocast.popitem(last=False)
            for lk in lookups:
                if lk.key:
                    self._remember(lk, rec.compile_id, rec.rank, version, functorch if lk.cache == "aot_autograd" else None)
            self._remember_loads(rec, lookups)
        return [e if e is not None else o for e, o in zip(explained, served, strict=True)]

    def _served(self, lk: CacheLookupEvent, rec: CompileRecord) -> str | None:
        """A hit: ``own`` where this rank looked the key up before (this run, or its own index), else ``other``:
        another rank wrote the entry (compile_on_one_rank's point), or a run of another rank did."""
        if not lk.key:
            return None
        here = self._by_key.get((rec.rank, lk.key))
        if here is not None and not (here.compile_id == rec.id_str and here.where == self.where):
            return "own"  # (not this very lookup, known from its artifact before its compile ended)
        before = self._baseline_keys.get(lk.key, ())
        return "own" if any(s.rank == rec.rank or s.rank is None or rec.rank is None for s in before) else "other"

    def _same_key(self, key: str, rank: int | None) -> KeySeen | None:
        """The key itself, seen before in ``rank``'s history: this run's, else the baseline's."""
        same = self._by_key.get((rank, key))
        if same is None and rank is not None:
            same = self._by_key.get((None, key))
        if same is not None:
            return same
        return next((s for s in self._baseline_keys.get(key, ()) if self._mine(s, rank)), None)

    def _remember_loads(self, rec: CompileRecord, lookups: Sequence[CacheLookupEvent]) -> None:
        """An AOTAutograd miss compiled these FX graphs: its entry loads them on a hit. A hit: they were looked up."""
        fx = tuple(lk.key for lk in lookups if lk.cache == "fx_graph" and lk.key)
        for lk in lookups:
            if lk.cache != "aot_autograd" or not lk.key:
                continue
            k = (rec.rank, lk.cache, rec.id_str, lk.backward, lk.key)
            seen = self._seen.get(k)
            if lk.result == "miss" and fx and seen is not None:
                self._seen[k] = dataclasses.replace(seen, loads=fx)
                self._by_key[(rec.rank, lk.key)] = self._seen[k]
            elif lk.result == "hit":
                here = self._by_key.get((rec.rank, lk.key))
                before = [here] if here is not None else []
                before += [s for s in self._baseline_keys.get(lk.key, ()) if self._mine(s, rec.rank)]
                entry = next((e for e in before if e.loads), None)
                if entry is None:
                    continue
                if seen is not None:
                    self._seen[k] = self._by_key[(rec.rank, lk.key)] = dataclasses.replace(seen, loads=entry.loads)
                for key in entry.loads:
                    graph = self._same_key(key, rec.rank)
                    if graph is not None:
                        self._add(
                            dataclasses.replace(graph, compile_id=rec.id_str, result="hit", where=self.where, rank=rec.rank)
                        )

    def _frame(self, rec: CompileRecord) -> tuple[int | None, int | None]:
        cid = rec.compile_id
        return (cid.compiled_autograd_id, cid.frame_id) if cid is not None else (None, None)

    def _explain(self, lk: CacheLookupEvent, rec: CompileRecord, version: str | None) -> Explanation:
        e = self._explain_own(lk, rec, version)
        across = self._across(lk, rec, version) if lk.key and rec.rank is not None else None
        if across is not None:
            e.across = across
        return e

    def _explain_own(self, lk: CacheLookupEvent, rec: CompileRecord, version: str | None) -> Explanation:
        if lk.key:
            same = self._by_key.get((rec.rank, lk.key))
            if same is not None and same.compile_id == rec.id_str and same.where == self.where:
                same = None  # this very lookup, known from its artifact (replay) before its compile ended
            if same is None:
                same = next((s for s in self._baseline_keys.get(lk.key, ()) if self._mine(s, rec.rank)), None)
            if same is not None and same.result == "miss" and self.independent and same.where != self.where:
                return Explanation("first_seen", against=f"{_against(same, _named_rank(rec), version)} missed it too")
            if same is not None:
                return Explanation("not_in_cache", against=_against(same, _named_rank(rec), version))
        frame = self._frame(rec)
        candidates = [
            s
            for s in self._seen.values()
            if s.cache == lk.cache
            and s.frame == frame
            and s.backward == lk.backward
            and s.key != lk.key
            and self._mine(s, rec.rank)
        ]
        candidates += [
            s for s in self._baseline.get((lk.cache, frame), ()) if s.backward == lk.backward and self._mine(s, rec.rank)
        ]
        if not candidates:
            return Explanation("first_seen")
        return self._against_nearest(lk, rec, version, candidates)

    def _against_nearest(
        self, lk: CacheLookupEvent, rec: CompileRecord, version: str | None, candidates: list[KeySeen]
    ) -> Explanation:
        # nearest: the most parts alike; then the same compile id; then the most recent
        ranked = sorted(
            enumerate(candidates),
            key=lambda t: (likeness(lk.components, t[1].parts), t[1].compile_id == rec.id_str, t[0]),
        )
        nearest = ranked[-1][1]
        against = _against(nearest, _named_rank(rec), version)
        if not lk.components or not nearest.parts:
            return Explanation("other", (), (), against)
        code_leads = bool(lk.backward) and self._forward_code.get((rec.rank, rec.id_str), False)
        changed = compare(lk.components, nearest.parts, (nearest.torch_version, version), code_leads)
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

    def _across(self, lk: CacheLookupEvent, rec: CompileRecord, version: str | None) -> str | None:
        """What this rank's missed key differs in from another rank's key of the same graph in this run."""
        others = [
            s
            for s in self._seen.values()
            if s.where == self.where
            and s.rank is not None
            and s.rank != rec.rank
            and s.cache == lk.cache
            and s.compile_id == rec.id_str
            and s.backward == lk.backward
        ]
        if not others:
            return None
        same = next((s for s in others if s.key == lk.key), None)
        if same is not None:
            return f"not in this rank's cache: rank {same.rank} looked up the same key"
        e = self._against_nearest(lk, rec, version, others)
        return e.short() if e.changes else None

    def _borrow_fx_causes(
        self,
        lookups: Sequence[CacheLookupEvent],
        explained: list[Explanation | None],
        rec: CompileRecord,
        functorch: str | None,
    ) -> None:
        """An AOTAutograd key with no parts recorded (torch lists them only where its autograd_cache logger is at
        DEBUG) missed: the FX graphs it compiled say why. Their misses' changes, where they missed; where they all
        hit, the graphs inductor compiles did not change, and neither did what changes them (grad mode, autocast,
        the inductor config): the graph dynamo handed over did, in what its compiled graphs do not keep, or the
        functorch config, which the compile's metrics say (torch 2.13 and later)."""
        fx = [e for lk, e in zip(lookups, explained, strict=True) if lk.cache == "fx_graph" and e is not None]
        fx_hits = sum(1 for lk in lookups if lk.cache == "fx_graph" and lk.result == "hit")
        for i, (lk, e) in enumerate(zip(lookups, explained, strict=True)):
            if not (lk.cache == "aot_autograd" and e is not None and e.cause == "other" and not e.changes):
                continue
            if fx:
                best = next((x for x in fx if x.changes), fx[0])
                explained[i] = Explanation(
                    best.cause, best.changes, best.classes, best.against, best.more, best.components, e.across
                )
            elif fx_hits:
                explained[i] = self._aot_alone(lk, rec, e, fx_hits, functorch)

    def _aot_alone(
        self, lk: CacheLookupEvent, rec: CompileRecord, e: Explanation, fx_hits: int, functorch: str | None
    ) -> Explanation:
        """An AOTAutograd miss whose FX graphs all hit, its key's parts not logged."""
        graphs = f"its {fx_hits} FX graph{'s' if fx_hits > 1 else ''} hit"
        frame = self._frame(rec)
        before = [
            s
            for s in [*self._seen.values(), *self._baseline.get((lk.cache, frame), ())]
            if s.cache == lk.cache and s.frame == frame and s.key != lk.key and self._mine(s, rec.rank) and s.functorch
        ]
        advice = (
            "TORCH_LOGS=+torch._functorch._aot_autograd.autograd_cache lists the key's parts, and names the one that "
            "changed if the run compared with was logged the same way"
        )
        if functorch and before and all(s.functorch != functorch for s in before):
            words = f"functorch config changed ({graphs}, so the graphs inductor compiles did not)"
            return Explanation("config", (words, advice), ("config", "other"), e.against, 0, ("functorch_config", ""), e.across)
        dynamo = (
            "the graph dynamo handed over changed in what the compiled graphs do not keep (a module, parameter or "
            f"variable renamed; node metadata): {graphs}, so what inductor compiles did not change"
        )
        if functorch and before:  # the functorch config is the same: the graph it was handed is what is left
            return Explanation("graph", (dynamo, advice), ("graph", "other"), e.against, 0, ("gm", ""), e.across)
        return Explanation(
            "graph",
            (f"{dynamo}; or a functorch config changed (torch before 2.13 does not record it)", advice),
            ("graph", "other"),
            e.against,
            0,
            ("gm", ""),
            e.across,
        )

    def note_functorch(self, cid: CompileId | None, rank: int | None, digest: str | None) -> None:
        """A compile's functorch config (its metrics, read after its lookups' artifacts): onto its AOTAutograd keys."""
        if digest is None or cid is None:
            return
        with self._lock:
            for k, seen in list(self._seen.items()):
                if seen.cache == "aot_autograd" and seen.rank == rank and seen.compile_id == str(cid) and not seen.functorch:
                    self._seen[k] = self._by_key[(rank, seen.key)] = dataclasses.replace(seen, functorch=digest)

    def remember(self, lk: CacheLookupEvent, cid: CompileId | None, rank: int | None, version: str | None) -> None:
        """Keep a key this run looked up (bounded: the oldest go first)."""
        with self._lock:
            self._remember(lk, cid, rank, version)

    def _remember(
        self, lk: CacheLookupEvent, cid: CompileId | None, rank: int | None, version: str | None, functorch: str | None = None
    ) -> None:
        assert lk.key is not None
        frame = (cid.compiled_autograd_id, cid.frame_id) if cid is not None else (None, None)
        id_str = str(cid) if cid is not None else "-/-"
        seen = KeySeen(lk.cache, frame, id_str, lk.backward, lk.key, lk.result, lk.components, self.where, rank, version)
        if functorch is None:  # an artifact's key, known before its compile ended: keep what its compile said
            functorch = getattr(self._seen.get((rank, lk.cache, id_str, lk.backward, lk.key)), "functorch", None)
        self._add(dataclasses.replace(seen, functorch=functorch) if functorch else seen)

    def _add(self, seen: KeySeen) -> None:
        k = (seen.rank, seen.cache, seen.compile_id, seen.backward, seen.key)
        self._seen[k] = seen
        self._seen.move_to_end(k)
        self._by_key[(seen.rank, seen.key)] = seen
        while len(self._seen) > self.max_keys:
            _, old = self._seen.popitem(last=False)
            if self._by_key.get((old.rank, old.key)) is old:
                del self._by_key[(old.rank, old.key)]


def functorch_digest(metrics: Mapping[str, Any] | None) -> str | None:
    """A hash of the functorch config a compile ran with, as its metrics record it (torch 2.13 and later)."""
    text = (metrics or {}).get("functorch_config")
    return hashlib.sha256(text.encode()).hexdigest()[:16] if isinstance(text, str) and text else None


def _torch_version(rec: CompileRecord) -> str | None:
    v = (rec.metrics or {}).get("pytorch_version") or rec.torch_version
    return v if isinstance(v, str) and v else None


def _named_rank(rec: CompileRecord) -> int | None:
    """The rank a key compared with is told apart from: none for a graph of no rank (compile_on_one_rank), whose key
    is the same on every rank: which rank looked it up says nothing about it."""
    return None if compile_on_one_rank(rec.metrics) else rec.rank


def _against(seen: KeySeen, rank: int | None, version: str | None = None) -> str:
    """The key compared with, in words: ``0/0 earlier in this run``, ``0/0 on rank 1``, ``0/0 in an earlier run``
    (with its torch release where it is not this run's)."""
    elsewhere = seen.rank is not None and rank is not None and seen.rank != rank
    where = seen.where
    if elsewhere:  # another rank's key: of this run (replay of a job's directory), or of its previous run
        where = f"on rank {seen.rank}" if seen.where == "earlier in this run" else f"{seen.where} on rank {seen.rank}"
    other = seen.torch_version and version and seen.torch_version != version
    return f"{seen.compile_id} {where}" + (f" (torch {seen.torch_version})" if other else "")


def _autocast_leads(
    lookups: Sequence[CacheLookupEvent], explained: list[Explanation | None], lead: tuple[str, str, str] | None = None
) -> tuple[str, str, str] | None:
    """Autocast changed, as the compile's AOTAutograd key says (torch lists its parts where its autograd_cache logger
    is at DEBUG), else as ``lead`` (a backward: its forward's key): the FX graphs it compiled changed because of it
    (autocast casts inside the graph, and the backward's inputs change dtype). Their misses lead with it; their own
    changes follow. Returns the change, where there is one."""
    for lk, e in zip(lookups, explained, strict=True):
        if lk.cache == "aot_autograd" and e is not None:
            own = [
                (w, c, n) for w, c, n in zip(e.changes, e.classes, e.components, strict=False) if n.startswith("autocast_state")
            ]
            if own:
                lead = own[0]
                break
    if lead is None:
        return None
    words, cls, name = lead
    for i, (lk, e) in enumerate(zip(lookups, explained, strict=True)):
        if lk.cache == "fx_graph" and e is not None and e.cause in ("graph", "inputs"):
            explained[i] = Explanation(
                cls,
                (f"{words}, in its AOTAutograd key", *e.changes),
                (cls, *e.classes),
                e.against,
                e.more,
                (name, *e.components),
            )
    return lead
