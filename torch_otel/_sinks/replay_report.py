"""``torch-otel replay``'s report: the run summary, the cross-rank divergence and what the reader met, written on
shutdown.

One sink of the replay's pipeline. It feeds its run summary and its divergence report with every record, and at
:meth:`ReplayReport.shutdown` writes, in this order: the text (what was replayed, the summary, what could not be
read) to ``text``, the lines of the paths it could not use to ``err``, the divergence report's text, then ``--json``
(the summary's document with ``replay`` and ``divergence``) and ``--html`` (the summary's page).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

from .._analysis.divergence import DivergenceReport
from .._core.paths import write_error
from .._model.record import CompileRecord, Sink
from .._parse.trace_log import ReplayStats
from .summary import RunSummary

__all__ = ["ReplayReport", "print_summary", "problem_lines", "replay_document"]


def print_summary(stats: ReplayStats, run: RunSummary | None, out: IO[str]) -> None:
    """The run summary of what was replayed, then what the replay itself met (unmatched events, skipped lines)."""
    out.write(f"replayed {stats.files} file(s), {stats.bytes / 1e6:.1f} MB, {stats.records} records\n")
    if run is not None:
        out.write(run.format_text())
    if not (run and run.by_kind) and stats.record_types:
        held = ", ".join(f"{n} {k}" for k, n in stats.record_types.most_common(8) if k != "str")
        out.write(f"no compile in this log (a non-strict export logs none); it holds: {held or 'only interned file names'}\n")
    out.write("\n")
    unmatched = sum(stats.unmatched.values())
    out.write(
        f"phase events unmatched: {unmatched}"
        + (" (" + ", ".join(f"{k}: {v}" for k, v in stats.unmatched.items() if v) + ")" if unmatched else "")
        + "\n"
    )
    out.write(f"lines skipped: {sum(stats.skipped.values())}\n")
    for k, v in stats.skipped.most_common():
        out.write(f"  {v:6d}  {k}\n")
    out.write("event kinds not recognised:" + (" none" if not stats.unknown_record_types else "") + "\n")
    for k, v in stats.unknown_record_types.most_common():
        out.write(f"  {v:6d}  {k}\n")


def problem_lines(stats: ReplayStats, command: str = "torch-otel replay") -> list[str]:
    """One line per path the reader could not use, and one when nothing at all could be parsed; each starts with the
    command the user ran (``torch-otel diff`` reads its logs with replay's reader)."""
    lines = [f"{command}: {p}\n" for p in stats.problems]
    if stats.files and not stats.record_types and not stats.unknown_record_types:
        lines.append(f"{command}: nothing in the given path(s) could be parsed as a TORCH_TRACE log\n")
    return lines


def replay_document(stats: ReplayStats, run: RunSummary, divergence: dict[str, Any]) -> dict[str, Any]:
    """``replay --json``: the run summary's document (its ``schema_version``, as TORCH_OTEL_SUMMARY writes it), with
    what the replay itself met under ``replay`` and the cross-rank report under ``divergence``."""
    doc = run.to_dict()
    doc["replay"] = {
        "files": stats.files,
        "records": stats.records,
        "lines_skipped": dict(stats.skipped),
        "phase_events_unmatched": dict(stats.unmatched),
        "unknown_kinds": dict(stats.unknown_record_types),
    }
    doc["divergence"] = divergence
    return doc


class ReplayReport(Sink):
    """What a replay says: its text, ``--json`` and ``--html``, written on :meth:`shutdown` (see the module)."""

    def __init__(
        self,
        stats: ReplayStats,
        text: IO[str],
        err: IO[str],
        json_path: str | None = None,
        html: str | None = None,
        capture_payloads: bool = False,
        states: Mapping[str, Any] | None = None,
    ) -> None:
        self.stats = stats
        self.summary = RunSummary("replay", capture_payloads=capture_payloads, states=states)
        self.divergence = DivergenceReport()
        self.text, self.err = text, err
        self.json_path, self.html = json_path, html
        self.unwritten: list[str] = []  # the options whose file could not be written (said in one line each)
        self._written = False

    def on_finish(self, record: CompileRecord) -> None:
        self.summary.on_finish(record)
        self.divergence.on_finish(record)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        if self._written:
            return
        self._written = True
        if self.stats.files:
            print_summary(self.stats, self.summary, self.text)
        for line in problem_lines(self.stats):
            self.err.write(line)
        divergence = self.divergence.summary()
        self.divergence.write(self.text, divergence)
        if self.json_path:
            self._write_json(self.json_path, divergence)
        if self.html:
            self._write_page(self.html)

    def _write_json(self, path: str, divergence: dict[str, Any]) -> None:
        doc = replay_document(self.stats, self.summary, divergence)
        if path == "-":
            json.dump(doc, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
            return
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)  # missing parents are created, as --html's are
            with open(path, "w") as fh:
                json.dump(doc, fh, indent=2, sort_keys=True)
                fh.write("\n")
        except OSError as exc:
            self.unwritten.append("--json")
            self.err.write(f"torch-otel replay: {write_error(path, '--json', exc)}\n")

    def _write_page(self, path: str) -> None:
        try:
            self.summary.write(path)
        except OSError as exc:
            self.unwritten.append("--html")
            self.err.write(f"torch-otel replay: {write_error(path, '--html', exc)}\n")
            return
        self.err.write(f"compile time report written to {path}\n")
