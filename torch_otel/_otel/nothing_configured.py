"""A run with nothing configured: OpenTelemetry's defaults, and one line at its end saying where things went.

"Nothing configured" means the user named no destination for the traces: ``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``TORCH_OTEL_TRACES_FILE`` are unset (an
empty value is unset, as the OpenTelemetry specification says). Every ``OTEL_*`` default still holds: traces and
metrics go over OTLP to ``localhost:4317`` when a collector listens there. The bridge adds what makes such a run
useful on its own machine (docs/configuration.md#with-nothing-configured):

- no collector at that default endpoint is no error: nothing is sent there and nothing waits for it
  (:class:`torch_otel._otel.delivery.Target`'s ``named``);
- the run summary is printed on stderr at exit, by rank 0 (``TORCH_OTEL_SUMMARY`` overrides it, ``none`` turns it
  off);
- :class:`ClosingLine` says in one line, after the summary, where the traces and metrics went and how to send them
  elsewhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO, Any

from .._core.ranks import env_rank
from .delivery import compile_traces

__all__ = ["ClosingLine", "nothing_configured"]


def nothing_configured(env: Mapping[str, str]) -> bool:
    """Whether the user named no destination for the traces (the variables in the module's docstring)."""
    names = (
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "TORCH_OTEL_TRACES_FILE",
    )
    return not any((env.get(n) or "").strip() for n in names)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class ClosingLine:
    """The closing line of a process that ran with nothing configured (rank 0, the process that armed, only)."""

    def __init__(self, env: Mapping[str, str], traces_endpoint: str | None, server: Any, summary_on_stderr: bool) -> None:
        self.traces_endpoint = traces_endpoint  # the OTLP traces exporter's endpoint (OTLP's default), if it was built
        self.server = server  # the /metrics endpoint (LazyPrometheusServer), if one was to be served
        self.summary_on_stderr = summary_on_stderr
        self.summary_files = False  # TORCH_OTEL_SUMMARY names a file: its page is not to be suggested
        self.pid = os.getpid()
        self.rank = env_rank(env)
        self._said = False

    def line(self) -> str | None:
        """Where the traces and metrics went and how to send them elsewhere; None when nothing compiled."""
        sent, unsent = compile_traces(self.traces_endpoint) if self.traces_endpoint else (0, 0)
        compiles = sent + unsent
        if self.traces_endpoint is None or not compiles:
            return None
        where = f"{self.traces_endpoint} (OTLP's default endpoint)"
        if not sent:
            traces = f"traces of {_plural(compiles, 'compile')} not sent: no collector at {where}"
        elif not unsent:
            traces = f"traces of {_plural(compiles, 'compile')} sent to {where}"
        else:
            traces = f"traces of {sent} of {_plural(compiles, 'compile')} sent to {where}; it was not there for the others"
        parts = [traces]
        if self.server is not None:
            if self.server.port is not None:
                parts.append(
                    f"metrics were served on http://{self.server.host_for_url()}:{self.server.port}/metrics while it ran"
                )
            elif self.server.problem:
                parts.append(f"metrics were not served: {self.server.problem}")
        if self.summary_on_stderr:
            parts.append("the run summary is above")
        elsewhere = [
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4317 (a collector)",
            "TORCH_OTEL_TRACES_FILE=spans.jsonl (a file)",
        ]
        if not self.summary_files:  # already written to a file of the user's: its line above says where
            elsewhere.append("TORCH_OTEL_SUMMARY=stderr,compile.html (the summary and its page)")
        return "torch-otel: " + "; ".join(parts) + ". Elsewhere: " + ", ".join(elsewhere) + "; docs/configuration.md"

    def say(self, out: IO[str] | None = None) -> None:
        """Print :meth:`line` once, in the process that armed the bridge and on rank 0 only (never raises)."""
        if self._said or os.getpid() != self.pid or self.rank != 0:
            return
        self._said = True
        try:
            text = self.line()
            if text:
                stream = out or sys.stderr
                stream.write(text + "\n")
                stream.flush()
        except Exception:  # noqa: BLE001, S110 - the run is over; its exit must not fail on this line
            pass
