"""A compile's phases into its tree: each begin a node under the phase open on its thread, each end closing it.

The assembler finds the compile a phase belongs to; :func:`place_phase` puts it there. Most of torch's events are
phases, so this is the assembler's hottest path: a begin or end is a few comparisons and a list operation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .._model.events import PhaseEvent
from .._model.record import RUNTIME, WORKER_ARG, CompileRecord, PhaseNode

__all__ = ["ATTRIBUTED", "MAX_PHASES", "place", "place_phase"]

MAX_PHASES = 2000
# on a phase with no compile id (inductor's compile workers) given to the only compile in flight
ATTRIBUTED = {WORKER_ARG: "the only compile in flight"}


def place_phase(rec: CompileRecord, ev: PhaseEvent, worker: bool, stats: Counter[str]) -> bool:
    """``ev`` (a phase's begin, end or instant, not a root's) into ``rec``'s tree; ``worker``: it ran on one of
    inductor's compile workers, beside the compile's stack. True when ``rec`` is a runtime record whose outermost
    phase this ended (it has ended with it: the caller finishes it)."""
    if not worker:
        return place(rec, ev.name, ev.ph, ev.ts_ns, ev.args, ev.attempt, stats)
    args = {**ev.args, **ATTRIBUTED}  # the node says how it was given its compile
    if ev.ph == "i":
        return place(rec, ev.name, ev.ph, ev.ts_ns, args, ev.attempt, stats)
    _seen(rec, ev.name, ev.ts_ns, ev.attempt)
    _worker_phase(rec, ev, rec._stack[-1] if rec._stack else rec.root, args, stats)
    return False


def _seen(rec: CompileRecord, name: str, ts_ns: int, attempt: int) -> None:
    """What any phase tells its compile: when it was last heard of, and its attempt."""
    rec.last_ts_ns = ts_ns
    if name.startswith("compile_attempt_"):
        try:
            rec.attempt = max(rec.attempt, int(name.rsplit("_", 1)[1]))
        except ValueError:
            pass
    if attempt > rec.attempt:
        rec.attempt = attempt


def place(rec: CompileRecord, name: str, ph: str, ts_ns: int, args: dict[str, Any], attempt: int, stats: Counter[str]) -> bool:
    """A phase's begin, end or instant on the compile's own stack, from its fields (:func:`place_phase` without the
    event: live capture places torch's phase events this way, without typing each one). Returns as ``place_phase``."""
    rec.last_ts_ns = ts_ns  # _seen, without its call where the rest of it has nothing to do (most events)
    if attempt > rec.attempt or name.startswith("compile_attempt_"):
        _seen(rec, name, ts_ns, attempt)
    stack = rec._stack
    if ph == "B":
        if rec._nodes >= MAX_PHASES:
            rec.dropped += 1
            return False
        node = PhaseNode(name, ts_ns, None, dict(args))
        (stack[-1] if stack else rec.root).children.append(node)
        stack.append(node)
        rec._nodes += 1
    elif ph == "E":
        last = len(stack) - 1
        if last > 0 and stack[last].name == name:  # the phase on top (most ends): popped, nothing left open above it
            node = stack.pop()
            node.end_ns = ts_ns
            if args:
                node.args.update(args)
            return last == 1 and _runtime_ended(rec, ts_ns)
        # Pop to the matching begin, as torch's own logger does.
        for i in range(last - 1, 0, -1):
            if stack[i].name == name:
                node = stack[i]
                node.end_ns = ts_ns
                if args:
                    node.args.update(args)
                if i + 1 < len(stack):
                    for unclosed in stack[i + 1 :]:
                        unclosed.end_ns = ts_ns
                        stats["unmatched_phase_begins"] += 1
                del stack[i:]
                return i == 1 and _runtime_ended(rec, ts_ns)
        stats["unmatched_phase_ends"] += 1
    else:
        top = stack[-1] if stack else rec.root
        if len(top.instants) < 64:
            top.instants.append((name, ts_ns, dict(args)))
    return False


def _runtime_ended(rec: CompileRecord, ts_ns: int) -> bool:
    """Its outermost phase has ended: a runtime record has ended with it (True); a compile's root has not (False)."""
    if rec.kind != RUNTIME:
        return False
    rec.root.end_ns = ts_ns
    rec._stack.clear()
    rec._ended = True
    return True


def _worker_phase(rec: CompileRecord, ev: PhaseEvent, top: PhaseNode, args: dict[str, Any], stats: Counter[str]) -> None:
    """A phase on one of inductor's compile workers (a kernel build, ``compile_file``), beside the compile's stack.

    Builds run in parallel while the compile goes on (and waits in ``async_compile.wait``), so they never
    nest in one another nor close the compile's phases. A build is a child of the phase the compile was in
    when it began. Live, each worker thread has its own stack. On replay the thread is unknown: an end
    closes the earliest-begun open phase of its name, so each build's time may be another's of the same
    name, and their sum is exact.
    """
    lanes = rec._lanes if rec._lanes is not None else {}
    rec._lanes = lanes
    lane = lanes.setdefault(ev.thread, [])
    if ev.ph == "B":
        if rec._nodes >= MAX_PHASES:
            rec.dropped += 1
            return
        node = PhaseNode(ev.name, ev.ts_ns, args=dict(args))
        (lane[-1] if lane and ev.thread is not None else top).children.append(node)
        lane.append(node)
        rec._nodes += 1
        return
    order = range(len(lane) - 1, -1, -1) if ev.thread is not None else range(len(lane))
    for i in order:
        node = lane[i]
        if node.name == ev.name:
            node.end_ns = ev.ts_ns
            node.args.update(args)
            if ev.thread is not None:  # a thread's phases nest: the ones begun inside it end with it
                for unclosed in lane[i + 1 :]:
                    unclosed.end_ns = ev.ts_ns
                    stats["unmatched_phase_begins"] += 1
                del lane[i:]
            else:
                del lane[i]
            return
    stats["unmatched_phase_ends"] += 1
