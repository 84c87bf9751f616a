"""``import torch_otel.auto``: configure from the environment and instrument, when torch is about to compile.

The bridge is armed when ``torch._dynamo`` is first imported (``torch.compile``
does that on its first call), or at once if it already is: a process that never
compiles loads neither torch's compiler nor the OpenTelemetry SDK because of it.
Settings are read and checked then, each bad one reported in one line.

Never raises: a bad setting is one warning line, and the program runs on.
"""

from __future__ import annotations

from ._core.import_watch import capture_off, sdk_disabled, when_dynamo_imported

TYPE_CHECKING = False  # typing is not imported: this module loads in every process `torch-otel run` starts
if TYPE_CHECKING:
    from ._pipeline.bridge import Bridge

bridge: Bridge | None = None  # the bridge, once armed (None before, or when off)


def _arm() -> None:
    global bridge
    from ._core.errors import record_error

    try:
        from ._core.settings import bad_sdk_values_hidden

        with bad_sdk_values_hidden():  # the SDK raises at import on some bad values of its variables
            from ._pipeline.bridge import configure_from_env

            bridge = configure_from_env()
    except Exception as exc:  # noqa: BLE001 - never break the user's import
        record_error("torch_otel.auto", exc)


if not sdk_disabled() and not capture_off():
    import os

    from ._features.registry import start_process

    start_process(os.environ)  # the features whose live state begins with the process (none imported otherwise)
    when_dynamo_imported(_arm)
