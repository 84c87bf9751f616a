"""Arm the bridge when ``torch._dynamo`` is first imported: nothing is paid until torch is about to compile.

``torch.compile`` imports ``torch._dynamo`` on its first call; ``import torch``
alone does not. So a process that never imports torch (a launcher, ``pip``, a
data-preparation script under ``torch-otel run``) and one that imports torch but
never compiles (an evaluation script, a DataLoader worker) load nothing of the
bridge beyond this module: no torch, no OpenTelemetry SDK, no exporter, no port.

This module imports only the standard library. The hook is a
``sys.meta_path`` finder that wraps the loader of ``torch._dynamo`` and runs
the callbacks right after that module has executed (the post-import hook
OpenTelemetry instrumentations use to defer to their library), then removes
itself. If ``torch._dynamo`` is already imported, the callbacks run at once.

The same hook serves any module (:func:`when_imported`). While it waits for
``torch._dynamo`` it also watches ``torch.export._trace``, which imports
``torch._dynamo`` itself: when a process's first compile is a ``torch.export``,
the bridge arms inside that import and can still hook export once it has run.
"""

from __future__ import annotations

import _thread
import os
import sys

TYPE_CHECKING = False  # typing and threading are not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:  # importlib.abc alone imports importlib.resources: ~40 ms at every start-up
    from collections.abc import Callable, Mapping, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

TARGET = "torch._dynamo"
EXPORT_MODULE = "torch.export._trace"  # imports TARGET while it executes
_TRUE = {"1", "true", "yes", "on"}


def sdk_disabled(env: Mapping[str, str] | None = None) -> bool:
    """``OTEL_SDK_DISABLED`` is true: the bridge, like the SDK, does nothing."""
    env = os.environ if env is None else env
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE


def capture_off(env: Mapping[str, str] | None = None) -> bool:
    """``TORCH_OTEL_CAPTURE=off``: nothing to arm."""
    env = os.environ if env is None else env
    return env.get("TORCH_OTEL_CAPTURE", "").strip().lower() == "off"


_lock = _thread.RLock()
_callbacks: dict[str, list[Callable[[], None]]] = {}
_finder: _DynamoFinder | None = None


def when_dynamo_imported(callback: Callable[[], None]) -> bool:
    """Run ``callback`` once ``torch._dynamo`` is imported (now, if it already is). Returns whether it ran now.

    ``callback`` must not raise; it runs inside the user's import of ``torch._dynamo``.
    """
    return when_imported(TARGET, callback)


def when_imported(name: str, callback: Callable[[], None]) -> bool:
    """Run ``callback`` once module ``name`` has been imported (now, if it already is). Returns whether it ran now.

    A module still executing (this is called from inside its import) counts as not yet imported.
    """
    global _finder
    with _lock:
        if name not in sys.modules or _importing(name):
            _callbacks.setdefault(name, []).append(callback)
            if _finder is None:
                _finder = _DynamoFinder()
                sys.meta_path.insert(0, _finder)
            return False
    callback()
    return True


def forget(name: str, callback: Callable[[], None]) -> None:
    """Take back a :func:`when_imported` callback that has not run (an uninstrumented bridge's)."""
    with _lock:
        waiting = _callbacks.get(name)
        if waiting and callback in waiting:
            waiting.remove(callback)
            if not waiting:
                del _callbacks[name]
            if not _callbacks:
                _remove_finder()


def cancel() -> None:
    """Forget the waiting callbacks and take the finder out of ``sys.meta_path``."""
    with _lock:
        _callbacks.clear()
        _remove_finder()


def _watched(name: str) -> bool:
    return name in _callbacks or (name == EXPORT_MODULE and TARGET in _callbacks)


def _remove_finder() -> None:
    global _finder
    if _finder is not None:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:  # someone took it out already
            pass
        _finder = None


def _importing(name: str = TARGET) -> bool:
    """Module ``name`` is in ``sys.modules`` but still executing (we were imported from inside it)."""
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _fire(name: str) -> None:
    with _lock:
        callbacks = _callbacks.pop(name, [])
        if not _callbacks:
            _remove_finder()
    for cb in callbacks:
        try:
            cb()
        except Exception:  # noqa: BLE001, S110 - callbacks report their own errors; the user's import must go on
            pass


class _DynamoFinder:
    """Finds nothing itself: asks the other finders for ``torch._dynamo`` and wraps the loader they return."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if not _watched(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _NotifyingLoader(spec.loader, fullname)  # type: ignore[assignment]  # a Loader by duck typing
                return spec
        return None


class _NotifyingLoader:
    def __init__(self, inner: Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._inner.exec_module(module)
        finally:
            # Leave no trace: the module's loader is the real one again (inspect, importlib.resources, pickling).
            module.__loader__ = self._inner
            if module.__spec__ is not None:
                module.__spec__.loader = self._inner
        _fire(self._name)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)
