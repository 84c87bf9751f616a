"""Loaded at start-up by every Python process under ``torch-otel run`` (its directory is put first on PYTHONPATH).

It turns the bridge on (as ``import torch_otel.auto``), then hands over to the
``sitecustomize`` this one shadows, if there is one. Never raises.
"""

import importlib
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch_otel.auto  # noqa: F401
except Exception:  # noqa: BLE001, S110 - the user's program must start whatever happens here
    pass


def _chain() -> None:
    """Import the next ``sitecustomize`` on the path (the one Python would have loaded without us)."""
    saved = sys.path[:]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        importlib.import_module("sitecustomize")
    except ImportError:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    except Exception:  # noqa: BLE001, S110
        pass
    finally:
        sys.path[:] = saved


_chain()
