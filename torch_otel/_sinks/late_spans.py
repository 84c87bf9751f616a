"""Spans written after their compile's trace was sent: each added feature's late spans (how often each compiled graph
ran), at shutdown, each a child of its compile's root span.

A compile's trace is sent as the compile ends, long before what its graph did afterwards is known. This sink keeps,
for each traced compile that a kind has late spans for, the root's ids and the kind's derived fact (small: no record,
no phase tree), and at shutdown writes the kind's spans (``SpanView.write_late``) into the compile's own trace: a
trace store shows them under the compile, and ``torch-otel diff`` reads them back (``SpanView.read_late``). A compile
the sampler dropped has no trace, and gets none. Bounded: at most ``max_kept`` compiles.

They are written in one go at exit, so they are paced to the span processor's queue: before the burst and after each
``every`` spans the sink flushes the tracer's provider (``flush``), within what is left of the shutdown's time. A job
of thousands of compiles would otherwise write more late spans than the queue holds (2,048 by default), faster than
they leave, and the processor would drop the rest. The flush runs on a thread of its own (:class:`_Flusher`, started
during the run once ``every`` compiles are kept), waited for no longer than that time; the live bridge's ``flush``
declines while spans do not reach every endpoint. Past the time, or declined, the rest goes unpaced (a drop is
counted, as before).

A forked child writes the spans of the compiles it made itself, not those it inherited: their traces are the
parent's, whose spans say how often the parent ran them (as the run summary is the parent's alone).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

from .._core.errors import record_error
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._features.views import LateSpan
from .._model.record import CompileRecord, Sink
from .._otel.ids import own_ids, private_random

MAX_KEPT = 10_000
EVERY = 512  # late spans written between two flushes (half the span queue, where that is less)


class LateSpans(Sink):
    """See the module. Its pipeline collects its features' states (the counters' last read) before it shuts it down."""

    def __init__(
        self,
        tracer: Tracer,
        features: tuple[Feature, ...] | None = None,
        max_kept: int = MAX_KEPT,
        flush: Callable[[int], object] | None = None,
        every: int = EVERY,
    ) -> None:
        self.tracer = tracer
        self.max_kept = max_kept
        self.flush = flush
        self.every = max(1, every)
        self._views = tuple(
            (k.name, k.spans.write_late) for k in features_or_default(features) if k.spans is not None and k.spans.write_late
        )
        # (the process that kept it, the root's trace and span ids, each feature's writer and fact)
        self.kept: list[tuple[int, int, int, list[tuple[Callable[[Any], list[LateSpan]], Any]]]] = []
        self.dropped = 0
        self._done = False
        self._flusher: _Flusher | None = None

    def on_finish(self, record: CompileRecord) -> None:
        if not record.trace_id or not record.span_id:
            return
        facts = [(write, record.derived[name]) for name, write in self._views if name in record.derived]
        if not facts:
            return
        if len(self.kept) < self.max_kept:
            self.kept.append((os.getpid(), record.trace_id, record.span_id, facts))
            if len(self.kept) == self.every and self.flush is not None and self._flusher is None:
                try:
                    self._flusher = _Flusher(self.flush)
                except RuntimeError as exc:  # no thread to be had: the late spans go unpaced
                    record_error("late spans flusher", exc)
        else:
            self.dropped += 1

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        if self._done:
            return
        self._done = True
        tracer = self.tracer
        deadline = time.monotonic() + timeout_millis / 1000
        # a burst: the spans already queued leave first (else each ``every`` spans written)
        unflushed = self.every if len(self.kept) >= self.every else 0
        pacing = self._flusher is not None
        with nullcontext() if own_ids(tracer) else private_random():
            pid = os.getpid()
            for made_in, trace_id, span_id, facts in self.kept:
                if unflushed >= self.every and pacing:
                    pacing = self._flush(int((deadline - time.monotonic()) * 1000))
                    unflushed = 0
                if made_in != pid:
                    continue  # a forked child's inherited compile: the parent writes its spans
                parent = trace.set_span_in_context(
                    trace.NonRecordingSpan(
                        trace.SpanContext(trace_id, span_id, False, trace.TraceFlags(trace.TraceFlags.SAMPLED))
                    )
                )
                for write, fact in facts:
                    try:
                        for name, attributes, start, end in write(fact):
                            span = tracer.start_span(
                                name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start
                            )
                            span.end(end_time=end)
                            unflushed += 1
                    except Exception as exc:  # noqa: BLE001 - one compile's spans must not stop the others'
                        record_error("late spans", exc)
        self.kept.clear()
        if self._flusher is not None:
            self._flusher.stop()  # its thread ends after any flush still under way (uninstrument leaves none behind)

    def _flush(self, left_ms: int) -> bool:
        """Flush within ``left_ms`` on the flusher's thread; whether it was done in time (else the rest is written
        unpaced)."""
        flusher = self._flusher
        if left_ms <= 0 or flusher is None or flusher.pid != os.getpid():
            return False
        return flusher.flush(left_ms)


class _Flusher:
    """A thread that flushes when asked, waited for no longer than the time given: the SDK's flush does not keep its
    timeout, and waits out each batch's export on a collector that hangs. Started during the run (Python 3.12 and
    later start no thread at interpreter exit), in a process whose late spans need pacing; a forked child has none."""

    def __init__(self, flush: Callable[[int], object]) -> None:
        self.pid = os.getpid()
        self._do = flush
        self._asks: queue.SimpleQueue[tuple[int, threading.Event, list[bool]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="torch-otel-late-spans", daemon=True).start()

    def _run(self) -> None:
        while True:
            ask = self._asks.get()
            if ask is None:
                return
            left_ms, done, ok = ask
            try:
                ok.append(bool(self._do(left_ms)))
            except Exception as exc:  # noqa: BLE001
                record_error("late spans flush", exc)
            finally:
                done.set()

    def flush(self, left_ms: int) -> bool:
        done, ok = threading.Event(), list[bool]()
        self._asks.put((left_ms, done, ok))
        return done.wait(left_ms / 1000) and ok == [True]

    def stop(self) -> None:
        self._asks.put(None)
