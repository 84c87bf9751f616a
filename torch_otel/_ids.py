"""Span ids that stay unique although dynamo restores Python's ``random`` state.

Dynamo saves and restores ``random``'s state around every frame compile, so
the SDK's ``RandomIdGenerator`` (which draws from ``random``) would hand every
compile the same trace id. The bridge creates its spans inside
:func:`private_random`, which swaps in a stream of its own (seeded from the OS,
re-seeded after fork) and gives the user's stream back untouched.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.id_generator import IdGenerator

_lock = threading.Lock()
_state: object | None = None


def _reseed() -> None:
    global _state
    r = random.Random(int.from_bytes(os.urandom(32), "big"))
    _state = r.getstate()


_reseed()
os.register_at_fork(after_in_child=_reseed)


@contextmanager
def private_random() -> Iterator[None]:
    global _state
    with _lock:
        saved = random.getstate()
        random.setstate(_state)  # type: ignore[arg-type]
        try:
            yield
        finally:
            _state = random.getstate()
            random.setstate(saved)


class UrandomIdGenerator(IdGenerator):
    """Trace and span ids from ``os.urandom``: immune to any ``random`` state games."""

    def generate_span_id(self) -> int:
        while True:
            v = int.from_bytes(os.urandom(8), "big")
            if v:
                return v

    def generate_trace_id(self) -> int:
        while True:
            v = int.from_bytes(os.urandom(16), "big")
            if v:
                return v
