"""The fast tier runs without torch: torch is not imported here, and while only fast tests run, importing it fails.

A fast test that reached for torch (directly, or through a module of the package that imports it at the top) would pass
on a machine with torch and fail on one without: it fails here instead, with the import that did it. The whole suite
(``pytest`` with the slow tier) imports torch as it needs it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torch_otel._core import errors as _internal
from torch_otel._core import graph_breaks

# The entries of torch's graph-break registry (torch/_dynamo/graph_break_registry.json, torch 2.13) the fast tier's
# graph breaks name: without torch, the bridge maps a graph break's type to its code with these (with torch, with
# torch's own file, which holds the same entries)
REGISTRY = Path(__file__).resolve().parent.parent / "data" / "graph-break-registry-2.13-subset.json"


class _NoTorch(importlib.abc.MetaPathFinder):
    """Refuses ``torch`` and its submodules, as an environment without torch would."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (the fast tier runs without torch)", name=name)
        return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """When every collected test is a fast one, torch cannot be imported from here on (it is not imported yet)."""
    fast = str(config.rootpath / "tests" / "fast")
    if items and all(str(item.path).startswith(fast) for item in items) and "torch" not in sys.modules:
        sys.meta_path.insert(0, _NoTorch())


def _torch_present() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except ModuleNotFoundError:
        return False


@pytest.fixture(autouse=True, scope="session")
def graph_break_registry() -> Iterator[None]:
    """Without torch, its registry's entries the fast tests name (see :data:`REGISTRY`)."""
    if _torch_present():
        yield
        return
    data = json.loads(REGISTRY.read_text(encoding="utf-8"))
    found = {e["Gb_type"]: code for code, entries in data.items() for e in entries}
    real = graph_breaks._registry
    graph_breaks._registry = lambda: found  # type: ignore[assignment]
    yield
    graph_breaks._registry = real


@pytest.fixture(autouse=True)
def restore_torch_logging() -> Iterator[None]:
    """The slow tier's fixture of this name resets torch's loggers and dynamo: here there is no torch to reset."""
    yield
    _internal.reset_for_tests()
