"""torch-otel: every torch.compile compile as an OpenTelemetry trace, and its metrics in Prometheus."""

from ._bridge import force_flush, instrument, is_instrumented, shutdown, uninstrument
from ._config import Settings, load_settings
from ._ids import UrandomIdGenerator
from ._internal import internal_error_count
from ._version import __version__

__all__ = [
    "Settings",
    "TorchCompileInstrumentor",
    "UrandomIdGenerator",
    "__version__",
    "force_flush",
    "instrument",
    "internal_error_count",
    "is_instrumented",
    "load_settings",
    "shutdown",
    "uninstrument",
]


def __getattr__(name: str) -> object:
    if name == "TorchCompileInstrumentor":  # imported on use: it pulls in opentelemetry-instrumentation
        from ._instrumentor import TorchCompileInstrumentor

        return TorchCompileInstrumentor
    raise AttributeError(f"module 'torch_otel' has no attribute {name!r}")
