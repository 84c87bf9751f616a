"""``import torch_otel.auto``: configure from the environment and instrument, at import time.

Never raises: a bad setting is one warning line, and the program runs on.
"""

from __future__ import annotations

from ._internal import record_error

try:
    from ._config import bad_sdk_values_hidden

    with bad_sdk_values_hidden():  # the SDK raises at import on some bad values of its variables
        from ._setup import configure_from_env

        bridge = configure_from_env()
except Exception as _exc:  # noqa: BLE001 - never break the user's import
    record_error("torch_otel.auto", _exc)
    bridge = None
