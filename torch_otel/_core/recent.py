"""A dict that keeps only the most recently set keys: the bound on what the assembler remembers of earlier compiles."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

__all__ = ["Recent"]

K = TypeVar("K")
V = TypeVar("V")


class Recent(OrderedDict[K, V]):
    """A dict that keeps only the ``limit`` most recently set keys."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)
