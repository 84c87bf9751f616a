"""A fork waits for the bridge's gRPC exports in flight (a bounded wait), and no export of the bridge's starts while
a fork is under way.

gRPC's C core, as the grpcio wheels build it, registers fork handlers of its own (``pthread_atfork``): before the fork
it stops new gRPC work, and in the child it restarts its own threads. A thread that is inside a gRPC call as another
thread forks, or that enters one while the fork is under way, can leave the child stuck inside ``fork()`` for ever:
the child's handler waits on a lock that the parent's thread held, and that thread does not exist in the child. The
child never returns from ``os.fork()``; a DataLoader worker or a pool worker made that way never starts, and its
parent waits for it. This was measured with a thread exporting over OTLP/gRPC in a tight loop: about 1 fork in 4,000
hung, with the child's native stack in gRPC's child handler. grpc/grpc#22624 reports the same deadlock. Turning the
core's fork support off (``GRPC_ENABLE_FORK_SUPPORT=0``) removes the handlers, but then a forked child cannot export
at all.

Python runs its ``before`` fork hooks before those handlers, and its ``after_in_parent`` hooks after them; between
the two this gate is closed:

- ``before_fork`` waits until the bridge's exports in flight have ended, for at most ``hold_s`` seconds. A healthy
  collector answers in milliseconds. A fork that found an export still running after ``hold_s`` goes ahead, and so
  does every later fork while that same export runs: waiting again could not help;
- an export that would start while a fork is under way waits until the fork is done (microseconds).

Only the bridge's own threads are gated: gRPC's internal threads, and any gRPC calls the application makes, are not.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .._core.errors import record_error

__all__ = ["GATE", "HOLD_S", "ForkGate"]

HOLD_S = 0.5  # the longest a fork waits for an export in flight


class ForkGate:
    """See the module. ``waited``: forks that waited for exports to end; ``went_ahead``: forks that stopped waiting at
    ``hold_s`` with an export still running."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self.waited = 0
        self.went_ahead = 0
        self._fresh()

    def _fresh(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0  # exports in flight
        self._forking = 0  # forks under way (two threads may fork at once)
        self._idle_since = 0  # how many times the exports in flight have all ended: which run of them is in flight
        self._given_up = -1  # the run of exports a fork stopped waiting for

    @contextmanager
    def export(self) -> Iterator[None]:
        """Around one export: it starts only when no fork is under way, and forks wait for its end."""
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._idle_since += 1
                    self._cond.notify_all()

    def before_fork(self) -> None:
        try:
            with self._cond:
                self._forking += 1
                if not self._busy or self._given_up == self._idle_since:
                    return
                deadline = time.monotonic() + self.hold_s
                while self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._given_up = self._idle_since
                        self.went_ahead += 1
                        return
                    self._cond.wait(left)
                self.waited += 1
        except Exception as exc:  # noqa: BLE001 - never fail a fork
            record_error("fork gate before fork", exc)

    def after_fork_in_parent(self) -> None:
        try:
            with self._cond:
                self._forking = max(0, self._forking - 1)
                if not self._forking:
                    self._cond.notify_all()
        except Exception as exc:  # noqa: BLE001
            record_error("fork gate after fork", exc)

    def after_fork_in_child(self) -> None:
        """The child has one thread, and no export of its parent's: a new gate (the parent's lock may be held)."""
        self._fresh()


GATE = ForkGate()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=GATE.before_fork, after_in_parent=GATE.after_fork_in_parent, after_in_child=GATE.after_fork_in_child
    )
