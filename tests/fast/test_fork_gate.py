"""A fork waits for the bridge's gRPC exports in flight (bounded), and no export starts while a fork is under way
(torch_otel._otel.fork_gate): real threads, real forks."""

from __future__ import annotations

import os
import threading
import time

from torch_otel._otel.fork_gate import GATE, ForkGate


def _fork(child_status: int | None = None, gate: ForkGate | None = None) -> int:
    """Fork, the child exiting at once with ``child_status`` read in the child; the child's exit code. With ``gate``,
    its hooks are called around the fork as ``os.register_at_fork`` calls the registered gate's."""
    if gate is not None:
        gate.before_fork()
    pid = os.fork()
    if pid == 0:
        os._exit(child_status if child_status is not None else 0)
    if gate is not None:
        gate.after_fork_in_parent()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def _stuck_export(gate: ForkGate) -> tuple[threading.Thread, threading.Event]:
    """An export in flight on ``gate`` until the event returned is set (a hung collector), and its thread."""
    release = threading.Event()

    def export() -> None:
        with gate.export():
            release.wait(30)

    t = threading.Thread(target=export)
    t.start()
    _wait_for(lambda: gate._busy == 1, "the export began")  # noqa: SLF001
    return t, release


def test_a_fork_waits_for_the_bridges_export_in_flight_to_end():
    """The registered gate: an export ends only once a fork has begun waiting for it, and the child is made after
    its end (the child's copy of the flag says so)."""
    ended = threading.Event()
    waited = GATE.waited

    def export() -> None:
        with GATE.export():
            _wait_for(lambda: GATE._forking > 0, "the fork began")  # noqa: SLF001 - the fork is in its before hook
            ended.set()

    t = threading.Thread(target=export)
    t.start()
    _wait_for(lambda: GATE._busy == 1, "the export began")  # noqa: SLF001
    pid = os.fork()
    if pid == 0:
        os._exit(0 if ended.is_set() else 1)  # what the child was made with
    _, status = os.waitpid(pid, 0)
    t.join(10)
    assert os.waitstatus_to_exitcode(status) == 0, "the child was made while the export was in flight"
    assert GATE.waited == waited + 1


def test_no_export_starts_while_a_fork_is_under_way():
    gate = ForkGate()
    order: list[str] = []
    gate.before_fork()

    def export() -> None:
        with gate.export():
            order.append("export")

    t = threading.Thread(target=export)
    t.start()
    t.join(0.2)
    order.append("fork done")
    gate.after_fork_in_parent()
    t.join(10)
    assert order == ["fork done", "export"]


def test_a_fork_goes_ahead_past_a_stuck_export_and_later_forks_do_not_wait_for_it_again():
    """A hung collector: the export never ends while the forks run. The first fork waits ``hold_s``, the next ones
    not at all; an export after it is waited for again."""
    gate = ForkGate(hold_s=0.1)
    t, release = _stuck_export(gate)
    assert [_fork(gate=gate) for _ in range(3)] == [0, 0, 0]
    assert (gate.went_ahead, gate.waited) == (1, 0)  # one wait, given up: the other two did not wait
    release.set()
    t.join(10)
    ends = threading.Event()

    def quick() -> None:
        with gate.export():
            _wait_for(lambda: gate._forking > 0, "the fork began")  # noqa: SLF001
            ends.set()

    t = threading.Thread(target=quick)
    t.start()
    _wait_for(lambda: gate._busy == 1, "the export began")  # noqa: SLF001
    assert _fork(gate=gate) == 0
    t.join(10)
    assert ends.is_set() and (gate.went_ahead, gate.waited) == (1, 1)


def test_the_child_starts_with_a_gate_of_its_own():
    """The parent's export in flight is not the child's: a fork in the child does not wait for it."""
    t, release = _stuck_export(GATE)
    hold, GATE.hold_s = GATE.hold_s, 0.05
    try:
        pid = os.fork()
        if pid == 0:  # the child: no export in flight, so its own fork waits for none
            before = (GATE.went_ahead, GATE.waited)
            code = _fork()
            os._exit(0 if code == 0 and (GATE._busy, GATE.went_ahead, GATE.waited) == (0, *before) else 1)  # noqa: SLF001
        _, status = os.waitpid(pid, 0)
    finally:
        GATE.hold_s = hold
        release.set()
        t.join(10)
    assert os.waitstatus_to_exitcode(status) == 0
