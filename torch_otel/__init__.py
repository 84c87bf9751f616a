"""torch-otel: every torch.compile compile as an OpenTelemetry trace, and its metrics in Prometheus.

The public names are these (``__all__``); the modules whose names start with ``_`` are private and change in any
release. ``Sink`` and ``Compile`` are the extension point for a receiver of your own of every compile's record, and
``torch_otel.features`` for a fact of your own on every compile (docs/extending.md). Names are imported on first use, so ``torch-otel replay`` (and ``import torch_otel``) start fast.
"""

from __future__ import annotations

import importlib
import time

_IMPORTED_NS = time.perf_counter_ns()  # the bridge's first code: its own start-up is a phase of the process's

from ._version import __version__  # noqa: E402

TYPE_CHECKING = False  # not typing's: importing typing costs every Python start-up under `torch-otel run` ~5 ms

if TYPE_CHECKING:
    from ._core.errors import internal_error_count
    from ._core.settings import Settings, load_settings
    from ._features.registry import ready
    from ._instrumentor import TorchCompileInstrumentor
    from ._model.sink_api import CacheRequests, Compile, GraphBreak, Phase, Sink
    from ._otel.ids import UrandomIdGenerator
    from ._pipeline.bridge import force_flush, instrument, is_instrumented, shutdown, uninstrument

_WHERE = {
    # the public extension point: a sink of your own, and the record it gets (docs/extending.md)
    "Sink": "._model.sink_api",
    "Compile": "._model.sink_api",
    "Phase": "._model.sink_api",
    "GraphBreak": "._model.sink_api",
    "CacheRequests": "._model.sink_api",
    "force_flush": "._pipeline.bridge",
    "instrument": "._pipeline.bridge",
    "is_instrumented": "._pipeline.bridge",
    "shutdown": "._pipeline.bridge",
    "uninstrument": "._pipeline.bridge",
    "Settings": "._core.settings",
    "load_settings": "._core.settings",
    "UrandomIdGenerator": "._otel.ids",
    "TorchCompileInstrumentor": "._instrumentor",
    "internal_error_count": "._core.errors",
    "ready": "._features.registry",
}

__all__ = [
    "CacheRequests",
    "Compile",
    "GraphBreak",
    "Phase",
    "Settings",
    "Sink",
    "TorchCompileInstrumentor",
    "UrandomIdGenerator",
    "__version__",
    "force_flush",
    "instrument",
    "internal_error_count",
    "is_instrumented",
    "load_settings",
    "ready",
    "shutdown",
    "uninstrument",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'torch_otel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
