"""The live hook on torch's portable "mega-cache" (``torch.compiler.load_cache_artifacts``): the keys a load put there.

``load_cache_artifacts`` writes a previous run's cache entries into this
process's local caches and returns their keys (torch's ``CacheInfo``). A later
compile whose AOTAutograd or FX graph cache hit has one of those keys (torch puts
the key and the outcome on the ``backend_compile`` and ``inductor_compile``
phases) was served from the mega-cache, not from a cache this machine filled.
The hook hands the keys to :class:`LoadedKeys` (bounded) and
leaves torch's function as it was on ``unhook``. A ``TORCH_TRACE`` log does not record the load: replay cannot tell.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._core.errors import record_error
from .._core.import_watch import forget, when_imported
from .._model.record import CompileRecord
from .attach_table import report_lacking

__all__ = ["LOADED", "LoadedKeys", "MegaCacheHook"]

# -- compiles served from torch's portable "mega-cache" (torch.compiler.load_cache_artifacts) ----------------------
# ``load_cache_artifacts`` writes a previous run's cache entries into this process's local caches and returns their
# keys; a later compile whose AOTAutograd or FX graph cache hit has one of those keys (torch puts the key and the
# outcome on the ``backend_compile`` and ``inductor_compile`` phases) was served from the mega-cache. The live hook
# (:class:`MegaCacheHook`) hands the keys to :data:`LOADED`. A ``TORCH_TRACE`` log does not record the load.

MAX_LOADED_KEYS = 100_000
# torch's artifact type (CacheInfo.artifacts) -> our cache name; the phase that reports that cache's key
LOADED_CACHES = {"aot_autograd": "aot_autograd", "inductor": "fx_graph"}
KEY_PHASES = {"backend_compile": "aot_autograd", "inductor_compile": "fx_graph"}


class LoadedKeys:
    """The keys a mega-cache load put in this process's caches (bounded); the assembler asks it for a compile's hits."""

    def __init__(self, max_keys: int = MAX_LOADED_KEYS) -> None:
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._loaded: dict[str, set[str]] = {}  # cache -> keys loaded in this process

    def remember(self, info: Any) -> int:
        """Keep the keys of a ``CacheInfo``; returns how many were new."""
        artifacts = getattr(info, "artifacts", None)
        if not isinstance(artifacts, dict):
            return 0
        added = 0
        with self._lock:
            total = sum(len(v) for v in self._loaded.values())
            for kind, keys in artifacts.items():
                cache = LOADED_CACHES.get(kind)
                if cache is None or not isinstance(keys, list):
                    continue
                known = self._loaded.setdefault(cache, set())
                for k in keys:
                    if isinstance(k, str) and k not in known and total < self.max_keys:
                        known.add(k)
                        added += 1
                        total += 1
        return added

    def hits(self, rec: CompileRecord) -> dict[str, int]:
        """The compile's cache hits on entries a ``load_cache_artifacts`` put there: ``cache -> count``."""
        loaded = self._loaded
        if not loaded:
            return {}
        out: dict[str, int] = {}
        for node in rec.phase_nodes():
            cache = KEY_PHASES.get(node.name)
            if cache is not None and node.args.get("cache_state") == "hit" and node.args.get("key") in loaded.get(cache, ()):
                out[cache] = out.get(cache, 0) + 1
                if cache == "aot_autograd" and loaded.get("fx_graph"):
                    # the entry's FX graphs come from the same load (torch counts them as FX graph cache hits)
                    n = sum(1 for inner in node.nodes() if inner.name == "AOTAutogradCache.inductor_load")
                    if n:
                        out["fx_graph"] = out.get("fx_graph", 0) + n
        return out


# The process's loads: the live bridge's default (a load is process-wide, as torch's caches are)
LOADED = LoadedKeys()


class MegaCacheHook:
    """Wraps torch's ``CacheArtifactManager.populate_caches``, which ``load_cache_artifacts`` calls to write the
    loaded entries, to learn their keys.

    Not ``load_cache_artifacts`` itself: a process whose first touch of the compiler is that call arms the
    bridge inside it (it imports ``torch._dynamo``), after it was looked up; ``populate_caches`` is looked up
    after that import, so even the first load is seen.
    """

    MODULE = "torch.compiler._cache"

    def __init__(self, keys: LoadedKeys = LOADED) -> None:
        self.keys = keys
        self._orig: Any = None  # the staticmethod object, as torch defined it
        self._active = False

    def hook(self) -> None:
        self._active = True
        when_imported(self.MODULE, self._wrap)  # a bound method: forget() finds it again

    def _wrap(self) -> None:
        try:
            manager = getattr(sys.modules.get(self.MODULE), "CacheArtifactManager", None)
            orig = manager.__dict__.get("populate_caches") if isinstance(manager, type) else None
            if not self._active or self._orig is not None:
                return
            if not isinstance(orig, staticmethod):
                report_lacking("mega_cache")
                return
            inner: Callable[..., Any] = orig.__func__

            @functools.wraps(inner)
            def populate_caches(*args: Any, **kwargs: Any) -> Any:
                info = inner(*args, **kwargs)
                try:
                    self.keys.remember(info)
                except Exception as exc:  # noqa: BLE001 - never into the user's call
                    record_error("mega-cache hook", exc)
                return info

            self._orig = orig
            manager.populate_caches = staticmethod(populate_caches)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - runs inside the user's import
            record_error("mega-cache hook", exc)

    def unhook(self) -> None:
        self._active = False
        forget(self.MODULE, self._wrap)
        manager = getattr(sys.modules.get(self.MODULE), "CacheArtifactManager", None)
        if isinstance(manager, type) and self._orig is not None:
            current = manager.__dict__.get("populate_caches")
            if isinstance(current, staticmethod) and getattr(current.__func__, "__wrapped__", None) is self._orig.__func__:
                manager.populate_caches = self._orig  # type: ignore[attr-defined]
        self._orig = None
