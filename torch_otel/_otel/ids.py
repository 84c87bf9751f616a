"""Span ids that stay unique although dynamo restores Python's ``random`` state.

Dynamo saves and restores ``random``'s state around every frame compile, so
the SDK's ``RandomIdGenerator`` (which draws from ``random``) would hand every
compile the same trace id. :func:`own_ids` gives the bridge's own SDK tracer an
id generator that reads ``os.urandom`` instead (the tracer is the bridge's
alone: the provider and the user's tracers keep theirs). A tracer it cannot see
into (a proxy not yet resolved, another implementation) builds its spans inside
:func:`private_random`, which swaps in a stream of the bridge's own (seeded from
the OS, re-seeded after fork) and leaves the user's stream unread.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

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


def own_ids(tracer: object) -> bool:
    """True when ``tracer``'s ids never come from ``random``; an SDK tracer drawing from it is switched to os.urandom.

    Only the SDK's own ``RandomIdGenerator`` is replaced: any other generator is the user's choice, and kept.
    """
    real = getattr(tracer, "_real_tracer", None) or tracer  # the API's proxy tracer, once the provider is set
    gen = getattr(real, "id_generator", None)
    if gen is None:
        return False
    if type(gen) is RandomIdGenerator:
        setattr(real, "id_generator", UrandomIdGenerator())  # noqa: B010 - an attribute of the SDK tracer, not the API
    return True


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
