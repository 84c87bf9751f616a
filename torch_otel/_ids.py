"""Span ids that stay unique although dynamo restores Python's ``random`` state.

Dynamo saves and restores ``random``'s state around every frame compile, so
the SDK's ``RandomIdGenerator`` (which draws from ``random``) would hand every
compile the same trace id. The bridge creates its spans inside
:func:`private_random`, which swaps in a stream of its own (seeded from the OS,
re-seeded after fork) and leaves the user's stream untouched.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.id_generator import IdGenerator

_lock = threading.Lock()
_rng = random.Random()


def _reseed() -> None:
    _rng.seed(int.from_bytes(os.urandom(32), "big"))


_reseed()
os.register_at_fork(after_in_child=_reseed)


@contextmanager
def private_random() -> Iterator[None]:
    """Inside: ``random.getrandbits`` (what the SDK's id generator draws from) is the bridge's own stream.

    Swapping one function is cheap; copying ``random``'s whole state in and out
    (625 words, twice) cost about 30 us per compile record, several times that
    inside a compile. The user's stream is neither read nor advanced.
    """
    with _lock:
        saved = random.getrandbits
        random.getrandbits = _rng.getrandbits
        try:
            yield
        finally:
            random.getrandbits = saved


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
