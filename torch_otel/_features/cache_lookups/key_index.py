"""Where a run's cache misses are explained against: the key index of the run before, or a baseline the user names.

The index is a rank's keys, kept on disk (:class:`KeyIndex`); a baseline is an index or a previous run's
``TORCH_TRACE`` logs, whose lookup artifacts hold every key (:func:`keys_of_logs`).

Live, with nothing configured, each rank keeps the keys it looked up in a small bounded index beside inductor's
cache directory (``<cache dir>/torch-otel/keys-rank<R>.json``, written at exit). A restarted job shares its cache
directory with the run before it, so the next run reads that index and explains each miss against it: the SRE
whose job restarted after a deploy reads "torch 2.13.0 → 2.15.0" or "inductor config max_autotune: False → True"
on the run summary without having set anything. ``TORCH_OTEL_CACHE_INDEX`` moves the index (a directory) or turns
it off; ``TORCH_OTEL_CACHE_BASELINE`` (and ``torch-otel replay --baseline``) names a previous run's ``TORCH_TRACE``
log or directory, or an index file or directory, instead.

A baseline that is missing, corrupt or from another release is one line; the run goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._core.errors import logger, warn_once
from ..._core.ranks import env_rank
from ..._core.settings import Settings
from ..._model.events import ArtifactEvent, MetricsEvent, torch_version_of
from ..feature import LogReader
from .events import Component, key_of_artifact
from .explain import KeyHistory, KeySeen, functorch_digest

__all__ = ["KeyIndex", "baseline_keys", "index_document", "keys_of_logs", "live_key_history", "read_index"]

BASELINE = "in the baseline run"
CLEARED = "in an earlier run, before the cache directory was cleared"
MAX_OTHER_INDEXES = 8  # other ranks' indexes read by a rank that has none of its own
MAX_KEPT_DIRECTORIES = 32  # cache directories whose index copy is kept outside them (the least recently written go)
PREVIOUS = "in an earlier run"  # the index keeps the newest keys of every run on its directory


def baseline_keys(
    path: str, where: str = BASELINE, setting: str = "TORCH_OTEL_CACHE_BASELINE", logs: LogReader | None = None
) -> tuple[list[KeySeen], list[str]]:
    """The keys a baseline holds: an index file (``.json``), a directory of them, or ``TORCH_TRACE`` logs (read by
    ``logs``, the pipeline's reader of logs; None: logs are not read).

    Returns ``(keys, problems)``: each problem is one line naming the setting and the fix.
    """
    p = Path(path)
    if not p.exists():
        return [], [
            f"{setting}={path!r}: no such file or directory; name a previous run's TORCH_TRACE log or directory, "
            "or a cache key index (keys-rank<R>.json); misses are explained against this run only"
        ]
    indexes = [p] if p.is_file() and p.suffix == ".json" else sorted(p.glob("keys-rank*.json")) if p.is_dir() else []
    if indexes:
        keys: list[KeySeen] = []
        problems: list[str] = []
        for f in indexes:
            idx = KeyIndex(str(f))
            keys += idx.load(where)
            problems += idx.problems
        return keys, problems
    problems = []
    keys = keys_of_logs(p, where, problems, logs)
    return keys, [f"{setting}: {q}" for q in problems]


def _release_line(keys: list[KeySeen], version: str | None, what: str) -> str | None:
    theirs = sorted({k.torch_version for k in keys if k.torch_version})
    if version and theirs and theirs != [version]:
        return (
            f"{what} is from torch {', '.join(theirs)} and this run is torch {version}: keys are compared by the parts "
            "both releases have, and a changed torch version is named as the cause"
        )
    return None


def live_key_history(settings: Settings, logs: LogReader | None = None) -> tuple[KeyHistory, Callable[[], None]]:
    """The live bridge's key history (its baseline read at the first cache lookup) and what saves the index at exit."""
    from ..._version import torch_version

    rank = env_rank()
    found = torch_version()
    version = None if found == "unknown" else found

    def index() -> KeyIndex | None:
        if settings.cache_index.lower() == "off":
            return None
        if settings.cache_index.lower() != "auto":
            return KeyIndex(str(Path(settings.cache_index) / f"keys-rank{rank}.json"))
        base = default_cache_dir()
        return KeyIndex(str(Path(base) / "torch-otel" / f"keys-rank{rank}.json")) if base else None

    def kept() -> KeyIndex | None:
        """The copy kept outside the cache directory (auto only): what ``rm -rf`` of the directory leaves."""
        base = default_cache_dir() if settings.cache_index.lower() == "auto" else None
        home = kept_index_dir(base) if base else None
        return KeyIndex(str(home / f"keys-rank{rank}.json")) if home is not None else None

    def ranks_of(idx: KeyIndex, where: str) -> tuple[list[KeySeen], list[str]]:
        """A rank new to this cache: the other ranks' keys."""
        keys: list[KeySeen] = []
        problems: list[str] = []
        for other in sorted(Path(idx.path).parent.glob("keys-rank*.json"))[:MAX_OTHER_INDEXES]:
            o = KeyIndex(str(other))
            keys += o.load(where)
            problems += o.problems
        return keys, problems

    def load() -> list[KeySeen]:
        if settings.cache_baseline:
            keys, problems = baseline_keys(settings.cache_baseline, logs=logs)
            what = f"TORCH_OTEL_CACHE_BASELINE={settings.cache_baseline!r}"
        else:
            idx = index()
            keys, problems = (idx.load(PREVIOUS), idx.problems) if idx is not None else ([], [])
            what = f"the cache key index {idx.path}" if idx is not None else ""
            if idx is not None and not keys and not problems:
                keys, problems = ranks_of(idx, PREVIOUS)
            copy = kept() if idx is not None and not keys and not problems else None
            if copy is not None and not Path(idx.path).parent.exists():  # type: ignore[union-attr]
                # the cache directory lost its index (rm -rf, a cleared /tmp): the copy kept outside says what was
                # in it, so a miss of a key the previous run had is "not in this cache", not "first seen"
                keys = copy.load(CLEARED)
                problems = list(copy.problems)
                if not keys and not problems:
                    keys, problems = ranks_of(copy, CLEARED)
                what = f"the cache key index {copy.path}"
        line = _release_line(keys, version, what) if keys else None
        for p in [*problems, *([line] if line else [])]:
            warn_once(f"cache-baseline:{p}", "%s", p)
        return keys

    history = KeyHistory(load, torch_version=version)

    pid = os.getpid()

    def save() -> None:
        if os.getpid() != pid or not history.seen():
            return  # a forked child's lookups are not its rank's run; nothing looked up: the old index stays
        idx = index()
        if idx is None:
            return
        try:
            idx.save(history, version, rank)
        except OSError as exc:
            warn_once(
                "cache-index-write",
                "cannot write the cache key index %s (%s); set TORCH_OTEL_CACHE_INDEX to a writable directory, or off",
                idx.path,
                exc.strerror or exc,
            )
        copy = kept()
        if copy is not None:
            try:
                copy.save(history, version, rank)
                note_kept_index(Path(copy.path).parent, default_cache_dir() or "")
            except OSError as exc:  # the copy is a spare: the index in the cache directory is the one that counts
                logger.debug("cannot keep a copy of the cache key index in %s: %s", copy.path, exc)

    return history, save


# -- the key index kept beside the inductor cache ---------------------------------------------------------------

INDEX_FORMAT = "torch-otel cache key index"
INDEX_VERSION = 1
MAX_INDEX_KEYS = 2048  # keys a rank's index keeps (the most recent)
MAX_INDEX_BYTES = 4 * 1024 * 1024  # and at most this much on disk


def kept_index_dir(cache_dir: str) -> Path | None:
    """Where the copy of a cache directory's key index is kept, outside it: ``$XDG_CACHE_HOME/torch-otel/cache-keys/
    <hash of the directory's path>`` (``~/.cache`` without ``XDG_CACHE_HOME``). None where no home is known."""
    root = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.path.expanduser("~"), ".cache") if os.path.expanduser("~") != "~" else ""
    )
    if not root:
        return None
    digest = hashlib.sha256(os.path.abspath(cache_dir).encode()).hexdigest()[:16]
    return Path(root) / "torch-otel" / "cache-keys" / digest


def note_kept_index(directory: Path, cache_dir: str) -> None:
    """Name the cache directory a kept copy is for, and keep at most :data:`MAX_KEPT_DIRECTORIES` copies (the least
    recently written are removed, with their files)."""
    (directory / "cache-dir.txt").write_text(os.path.abspath(cache_dir) + "\n", encoding="utf-8")
    parent = directory.parent
    dirs = sorted((d for d in parent.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for old in dirs[MAX_KEPT_DIRECTORIES:]:
        for f in old.iterdir():
            if f.is_file() and (f.name.startswith("keys-rank") or f.name == "cache-dir.txt"):
                f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            old.rmdir()


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

    def load(self, where: str = PREVIOUS) -> list[KeySeen]:
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
        if s.functorch:
            entry["functorch"] = s.functorch
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
                    str(e["functorch"]) if e.get("functorch") else None,
                )
            )
        except (KeyError, TypeError, ValueError, IndexError):
            problems.append(f"{path} holds an entry of an unknown shape; it is left out")
            break
    return out


def remember_key(history: KeyHistory, ev: ArtifactEvent, version: str | None) -> bool:
    """A lookup artifact's key into ``history``: known, not a lookup of the record (the artifacts torch writes for
    every lookup of both caches: the FX graph loads inside an AOTAutograd hit log no instant event, only these)."""
    lk = key_of_artifact(ev.name, ev.payload, ev.compile_id)
    if lk is None:
        return False
    history.remember(lk, ev.compile_id, ev.rank, version)
    return True


def _records(logs: LogReader | None, file: str, problems: list[str]) -> Iterator[tuple[str, list[Any]]]:
    if logs is not None:
        yield from logs.records(file, problems)


def keys_of_logs(path: Path, where: str, problems: list[str], logs: LogReader | None = None) -> list[KeySeen]:
    """Every cache key a previous run's TORCH_TRACE logs hold, with its parts: a baseline to explain misses against.

    Read by the pipeline's reader of logs (``logs``), from the lookup artifacts, which torch writes for every lookup of
    both caches (live capture and replay see the lookups through torch's instant events, which the FX graph loads
    inside an AOTAutograd hit lack).
    """
    history = KeyHistory(where=where, max_keys=1 << 20)
    found = 0
    for f in logs.files(str(path)) if logs is not None else []:
        version: str | None = None
        for record_type, events in _records(logs, f, problems):
            for ev in events:
                if record_type in ("compilation_metrics", "bwd_compilation_metrics") and isinstance(ev, MetricsEvent):
                    v = ev.fields.get("pytorch_version")
                    version = v if isinstance(v, str) and v else version
                    history.note_functorch(ev.compile_id, ev.rank, functorch_digest(ev.fields))
                elif isinstance(ev, ArtifactEvent) and ev.name == "torch_version":
                    # written before the first compile: the first lookups' keys know their release
                    version = torch_version_of(ev.payload) or version
                elif isinstance(ev, ArtifactEvent) and remember_key(history, ev, version):
                    found += 1
    if not found:
        problems.append(
            f"{path} holds no cache lookup torch-otel can read (a TORCH_TRACE log of a run that compiled with inductor "
            "has them); misses are explained against this run only"
        )
    return history.seen()
