"""``opentelemetry-instrument`` integration: an instrumentor and a configurator, found by entry points.

``opentelemetry-instrument python train.py`` loads the configurator
(``opentelemetry_configurator`` entry point ``torch_otel``), which sets up the
SDK from ``OTEL_*`` unless the application or another configurator already did,
and then the instrumentor (``opentelemetry_instrumentor`` entry point ``torch``,
so ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=torch`` turns it off).

``opentelemetry-instrument`` skips an instrumentor whose library lies outside
the distribution's ``instruments`` extra, and says so only at debug level: a
torch newer than the tested releases would then be traced by nothing, silently.
So the package also registers an ``opentelemetry_post_instrument`` hook
(:func:`after_instrumentors`): when the instrumentor was skipped although torch
is installed and the user did not disable it, it instruments anyway, and the
bridge says in one line, as it arms, how this torch stands against the tested
releases (best effort for a newer one).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]  # mypy finds no such name in 0.66b2's module; it is there
    BaseInstrumentor,
)
from opentelemetry.sdk._configuration import _BaseConfigurator

from ._core.errors import record_error
from ._core.import_watch import cancel, when_dynamo_imported
from ._features.registry import start_process
from ._version import SUPPORTED_TORCH

_INSTRUMENTS = (SUPPORTED_TORCH,)
_ENTRY_POINT = "torch"  # the instrumentor's entry-point name: what OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names


class TorchCompileInstrumentor(BaseInstrumentor):  # type: ignore[misc]  # Any to mypy: see the import above
    """Traces and metrics for every ``torch.compile`` compile.

    ``TorchCompileInstrumentor().instrument(tracer_provider=..., meter_provider=...)``;
    both default to the global providers (set from ``OTEL_*`` when nobody set them).
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """The tested range. Outside it, ``instrument()`` is still honoured by :func:`after_instrumentors` (best effort)."""
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        """Armed when ``torch._dynamo`` is first imported (at once if it is): a process that never compiles pays nothing."""
        tracer_provider, meter_provider = kwargs.get("tracer_provider"), kwargs.get("meter_provider")

        def arm() -> None:
            try:
                from ._pipeline.bridge import configure_from_env

                configure_from_env(tracer_provider=tracer_provider, meter_provider=meter_provider)
            except Exception as exc:  # noqa: BLE001 - never break the user's program
                record_error("TorchCompileInstrumentor", exc)

        start_process(os.environ)  # the features whose live state begins with the process
        when_dynamo_imported(arm)

    def _uninstrument(self, **kwargs: Any) -> None:
        from ._pipeline.bridge import uninstrument

        cancel()
        uninstrument()


class TorchOtelConfigurator(_BaseConfigurator):
    """Sets the global tracer and meter providers from ``OTEL_*`` (the SDK's own variables)."""

    def _configure(self, **kwargs: Any) -> None:
        try:
            from ._otel.providers import configure_providers

            configure_providers()
        except Exception as exc:  # noqa: BLE001
            record_error("TorchOtelConfigurator", exc)


def _disabled_by_env() -> bool:
    import os

    names = {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}
    return _ENTRY_POINT in names or "*" in names


def after_instrumentors() -> None:
    """``opentelemetry_post_instrument``: instrument torch when ``opentelemetry-instrument`` skipped it for its range.

    Nothing happens when the instrumentor ran, when the user disabled it, or when torch is not installed.
    """
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            version("torch")
        except PackageNotFoundError:
            return
        inst = TorchCompileInstrumentor()
        if _disabled_by_env() or inst.is_instrumented_by_opentelemetry:
            return
        inst.instrument(skip_dep_check=True)  # the bridge's own line, as it arms, says how this torch stands
    except Exception as exc:  # noqa: BLE001 - never break the user's program
        record_error("TorchCompileInstrumentor (outside the tested range)", exc)
