"""Where a run's cache misses are explained against: the key index of the run before, or a baseline the user names.

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

import os
from collections.abc import Callable
from pathlib import Path

from ._cache import KeyHistory, KeyIndex, KeySeen, default_cache_dir
from ._config import Settings
from ._internal import warn_once
from ._ranks import env_rank

__all__ = ["baseline_keys", "live_key_history"]

BASELINE = "in the baseline run"
MAX_OTHER_INDEXES = 8  # other ranks' indexes read by a rank that has none of its own
PREVIOUS = "in the previous run"


def baseline_keys(
    path: str, where: str = BASELINE, setting: str = "TORCH_OTEL_CACHE_BASELINE"
) -> tuple[list[KeySeen], list[str]]:
    """The keys a baseline holds: an index file (``.json``), a directory of them, or ``TORCH_TRACE`` logs (replayed).

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
    from ._replay import keys_of_logs

    problems = []
    keys = keys_of_logs(p, where, problems)
    return keys, [f"{setting}: {q}" for q in problems]


def _release_line(keys: list[KeySeen], version: str | None, what: str) -> str | None:
    theirs = sorted({k.torch_version for k in keys if k.torch_version})
    if version and theirs and theirs != [version]:
        return (
            f"{what} is from torch {', '.join(theirs)} and this run is torch {version}: keys are compared by the parts "
            "both releases have, and a changed torch version is named as the cause"
        )
    return None


def live_key_history(settings: Settings) -> tuple[KeyHistory, Callable[[], None]]:
    """The live bridge's key history (its baseline read at the first cache lookup) and what saves the index at exit."""
    from ._version import torch_version

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

    def load() -> list[KeySeen]:
        if settings.cache_baseline:
            keys, problems = baseline_keys(settings.cache_baseline)
            what = f"TORCH_OTEL_CACHE_BASELINE={settings.cache_baseline!r}"
        else:
            idx = index()
            keys, problems = (idx.load(PREVIOUS), idx.problems) if idx is not None else ([], [])
            what = f"the cache key index {idx.path}" if idx is not None else ""
            if idx is not None and not keys and not problems:  # a rank new to this cache: the other ranks' keys
                for other in sorted(Path(idx.path).parent.glob("keys-rank*.json"))[:MAX_OTHER_INDEXES]:
                    o = KeyIndex(str(other))
                    keys += o.load(PREVIOUS)
                    problems += o.problems
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

    return history, save
