"""Replayed spans describe the process that wrote the log, not the machine that replays it.

A ``TORCH_TRACE`` line names its process (the pid after the timestamp), a rank's
file names its rank, and torch logs its version (the ``torch_version`` artifact,
or ``pytorch_version`` in each compile's metrics). Each distinct
``(pid, rank, torch version)`` gets its own resource, and so its own tracer; all
of them share the replay's span processors. What a log does not hold (the host,
the job's service name, the world size) is not guessed: ``host.name`` is left
out rather than filled with the replaying machine's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import Tracer

from .._version import __version__
from .ids import UrandomIdGenerator
from .providers import HashedOnce

REPLAYED = "torch_otel.replay"  # the resource attribute that says a span was replayed (torch-otel diff reads it)
MAX_IDENTITIES = 4096  # distinct processes in one replay; more share the last one's tracer
# Resource keys that describe the machine or process running the replay: never put on replayed spans.
_REPLAYER_KEYS = ("host.", "process.", "os.", "container.", "k8s.")


def replay_resource(pid: int | None, rank: int | None, torch_version: str | None, run: str | None = None) -> Resource:
    """The resource of one replayed process: what its log says, and the user's ``OTEL_RESOURCE_ATTRIBUTES``."""
    attrs: dict[str, Any] = {
        "telemetry.distro.name": "torch-otel",
        "telemetry.distro.version": __version__,
        REPLAYED: True,
    }
    if run:
        attrs["torch_otel.replay.run"] = run
    quiet = [logging.getLogger(n) for n in ("opentelemetry.sdk.resources", "opentelemetry.attributes")]
    for lg in quiet:
        lg.disabled = True
    try:
        base = Resource.create(attrs)
    finally:
        for lg in quiet:
            lg.disabled = False
    kept = {k: v for k, v in base.attributes.items() if not k.startswith(_REPLAYER_KEYS)}
    if pid is not None:
        kept["process.pid"] = pid
    if rank is not None:
        kept["torch.distributed.rank"] = rank
    if torch_version:
        kept["torch.version"] = torch_version
    return HashedOnce(kept)  # its hash worked out once: the OTLP encoder hashes it for every span


class Replayed(Protocol):
    """What names a replayed compile's process: a compile record (torch_otel._model.record.CompileRecord)."""

    @property
    def process_id(self) -> int | None: ...

    @property
    def rank(self) -> int | None: ...

    @property
    def torch_version(self) -> str | None: ...


class ReplayTracers:
    """A tracer per replayed process, all feeding the same span processors."""

    def __init__(self, processors: Sequence[SpanProcessor], run: str | None = None) -> None:
        self.processors = list(processors)
        self.run = run
        self._providers: dict[tuple[int | None, int | None, str | None], tuple[TracerProvider, Tracer]] = {}
        self._last: Tracer | None = None

    def tracer_for(self, rec: Replayed) -> Tracer:
        key = (rec.process_id, rec.rank, rec.torch_version)
        found = self._providers.get(key)
        if found is None:
            if len(self._providers) >= MAX_IDENTITIES and self._last is not None:
                return self._last
            provider = TracerProvider(
                resource=replay_resource(*key, run=self.run), id_generator=UrandomIdGenerator(), shutdown_on_exit=False
            )
            for p in self.processors:
                provider.add_span_processor(p)
            found = self._providers[key] = (provider, provider.get_tracer("torch_otel.replay"))
        self._last = found[1]
        return found[1]

    def force_flush(self) -> None:
        for p in self.processors:
            p.force_flush()

    def shutdown(self) -> None:
        """Flush and stop the shared processors once (a provider's shutdown would stop them once per process)."""
        for p in self.processors:
            try:
                p.shutdown()
            except Exception:  # noqa: BLE001, S110 - an exporter that fails at shutdown has reported it already
                pass
        self.processors = []
