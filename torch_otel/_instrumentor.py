"""``opentelemetry-instrument`` integration: an instrumentor and a configurator, found by entry points.

``opentelemetry-instrument python train.py`` loads the configurator
(``opentelemetry_configurator`` entry point ``torch_otel``), which sets up the
SDK from ``OTEL_*`` unless the application or another configurator already did,
and then the instrumentor (``opentelemetry_instrumentor`` entry point ``torch``,
so ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=torch`` turns it off).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk._configuration import _BaseConfigurator

from ._internal import record_error

_INSTRUMENTS = ("torch >= 2.13, < 2.14",)


class TorchCompileInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces and metrics for every ``torch.compile`` compile.

    ``TorchCompileInstrumentor().instrument(tracer_provider=..., meter_provider=...)``;
    both default to the global providers (set from ``OTEL_*`` when nobody set them).
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        try:
            from ._setup import configure_from_env

            configure_from_env(tracer_provider=kwargs.get("tracer_provider"), meter_provider=kwargs.get("meter_provider"))
        except Exception as exc:  # noqa: BLE001 - never break the user's program
            record_error("TorchCompileInstrumentor", exc)

    def _uninstrument(self, **kwargs: Any) -> None:
        from ._bridge import uninstrument

        uninstrument()


class TorchOtelConfigurator(_BaseConfigurator):  # type: ignore[misc]
    """Sets the global tracer and meter providers from ``OTEL_*`` (the SDK's own variables)."""

    def _configure(self, **kwargs: Any) -> None:
        try:
            from ._setup import configure_providers

            configure_providers()
        except Exception as exc:  # noqa: BLE001
            record_error("TorchOtelConfigurator", exc)
