"""The live hook on torch's portable "mega-cache" (``torch.compiler.load_cache_artifacts``): the keys a load put there.

``load_cache_artifacts`` writes a previous run's cache entries into this
process's local caches and returns their keys (torch's ``CacheInfo``). A later
compile whose AOTAutograd or FX graph cache hit has one of those keys (torch puts
the key and the outcome on the ``backend_compile`` and ``inductor_compile``
phases) was served from the mega-cache, not from a cache this machine filled.
The hook hands the keys to torch_otel._analysis.caches.LoadedKeys (bounded) and
leaves torch's function as it was on ``unhook``. A ``TORCH_TRACE`` log does not record the load: replay cannot tell.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from .._analysis.caches import LOADED, LoadedKeys
from .._core.errors import record_error
from .._core.import_watch import forget, when_imported
from .attach_table import report_lacking


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
