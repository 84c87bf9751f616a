"""Reading ``TORCH_TRACE`` logs (tlparse's input): files, lines, records, their writer, and what could not be read.

Streaming: one record in memory at a time, and a payload's text is kept only
for the record types the mapping reads (chromium events, graph-break reasons) or when
payloads were asked for; other payloads are only measured and hashed.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .records import FRAME_OBJECT_LINES, FRAME_OBJECT_MARKS, RecordError, artifacts, parse_record

# glog prefix as torch writes it (and tlparse reads it): "V1122 17:02:04.816000 3142 path.py:123] {json}"
_GLOG_RE = re.compile(r"^[VIWEC](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) [^\]]*\] ")
# days before each month, in a leap year: a line's clock is read as of the year 2000 (see Writer.line_ns)
_MONTH_DAYS = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)
_ZONE_STEP_NS = 900 * 10**9  # time zones are whole quarter hours apart
RANK_IN_NAME = re.compile(r"rank_(\d+)")
_KEEP_PAYLOAD = {"chromium_event"}  # and the artifacts of the parser's tables (records.artifacts())


@dataclass
class ReplayStats:
    files: int = 0
    bytes: int = 0
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    unmatched: Counter[str] = field(default_factory=Counter)  # phase begins never ended, ends with nothing open
    unknown_record_types: Counter[str] = field(default_factory=Counter)
    record_types: Counter[str] = field(default_factory=Counter)  # records parsed, by record type
    problems: list[str] = field(default_factory=list)


_OTLP_JSON_KEYS = (b'"resourceSpans"', b'"resourceMetrics"', b'"resourceLogs"')


def not_a_trace_log(path: Path) -> str | None:
    """Why ``path`` is plainly not a TORCH_TRACE log (empty, or OpenTelemetry's own JSON), else None."""
    try:
        if path.stat().st_size == 0:
            return (
                "the file is empty; torch writes a TORCH_TRACE log only once something compiles (set TORCH_TRACE=DIR for the job)"
            )
        with open_log(path) as fh:
            head = fh.read(4096).lstrip()
    except (OSError, EOFError, zlib.error) as exc:
        return f"cannot be read ({getattr(exc, 'strerror', None) or exc}); check the path and its permissions"
    if not head:
        return "the file is empty once decompressed; torch writes a TORCH_TRACE log only once something compiles"
    if head.startswith(b"{") and any(k in head for k in _OTLP_JSON_KEYS):
        return (
            "this is OTLP-JSON (torch-otel's own --output or TORCH_OTEL_TRACES_FILE), not a TORCH_TRACE log; "
            "send it to a collector as it is, or replay the TORCH_TRACE log it was made from"
        )
    return None


def log_files(path: Path) -> list[Path]:
    """A file, or every regular file in a ``TORCH_TRACE`` directory (sorted, per rank)."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    return [path]


def open_log(path: Path) -> io.BufferedIOBase:
    fh = open(path, "rb")  # noqa: SIM115 - closed by the caller
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh)
    return fh


@dataclass
class Writer:
    """Who wrote the record being read: its process id (the log line's) and torch version (once logged)."""

    pid: int | None = None
    torch_version: str | None = None
    path: str | None = None  # the log file
    clock: re.Match[str] | None = None  # the record's line prefix: its local wall clock, to the millisecond
    offset_ns: int | None = None  # the log's local clock -> torch's own (UTC epoch) time of its events

    def line_ns(self) -> int | None:
        """The record's own time, on the clock of torch's events: its line's local time, shifted by the offset.

        A line says month, day and local time, not the year or the zone. The offset between the two clocks,
        to a quarter hour, is read from the first chromium event's line (torch logs it as the event happens).
        """
        m = self.clock
        if m is None or self.offset_ns is None:
            return None
        return _naive_ns(m) + self.offset_ns

    def calibrate(self, event_ns: int) -> None:
        if self.offset_ns is None and self.clock is not None:
            self.offset_ns = round((event_ns - _naive_ns(self.clock)) / _ZONE_STEP_NS) * _ZONE_STEP_NS


def _naive_ns(m: re.Match[str]) -> int:
    month, day = int(m.group(1)), int(m.group(2))
    days = _MONTH_DAYS[min(max(month, 1), 12) - 1] + day - 1
    secs = ((days * 24 + int(m.group(3))) * 60 + int(m.group(4))) * 60 + int(m.group(5))
    frac = m.group(6)
    return secs * 10**9 + int(frac) * 10 ** (9 - len(frac)) if len(frac) <= 9 else secs * 10**9


def iter_records(
    fh: io.BufferedIOBase, stats: ReplayStats, keep_all_payloads: bool = False, writer: Writer | None = None
) -> Iterator[tuple[dict[str, Any], str | None, int]]:
    """Yield ``(metadata, payload, payload size)`` per record; count every skipped line, and why.

    ``payload`` is None when it was only measured (see the module docstring). ``writer.pid`` follows
    the record being yielded.
    """
    md: dict[str, Any] | None = None
    chunks: list[bytes] = []
    keep = False
    sniff = False  # a guards record not kept: only its lines on the frame's own objects are (FRAME_OBJECT_MARKS)
    sniffed: list[str] = []
    size = lines = 0
    kept = artifacts()  # the artifacts whose payloads are kept: the parser's and each feature's

    def finish() -> tuple[dict[str, Any], str | None, int]:
        assert md is not None
        if sniffed:
            md[FRAME_OBJECT_LINES] = list(sniffed)
        if keep:
            payload = b"\n".join(chunks).decode("utf-8", "replace") if (chunks or md.get("has_payload")) else None
            return md, payload, len(payload or "")
        # Measured (in bytes), not kept; its hash is torch's own ``has_payload``.
        return md, None, size + max(lines - 1, 0)

    try:
        # Bytes, line by line: payload lines (most of a log) are only measured, never decoded.
        for raw in fh:
            if raw[:1] == b"\t":
                if md is None:
                    stats.skipped["payload line without a record"] += 1
                    continue
                if keep:
                    chunks.append(raw[1:].rstrip(b"\n"))
                else:
                    size += len(raw) - (2 if raw[-1:] == b"\n" else 1)
                    lines += 1
                    if sniff and len(sniffed) < 8 and any(mark in raw for mark in FRAME_OBJECT_MARKS):
                        sniffed.append(raw[1:].decode("utf-8", "replace").rstrip("\n"))
                continue
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line.strip():
                continue  # a blank line: older torch wrote a payload's empty lines without their tab (tlparse reads on)
            if md is not None:
                yield finish()
                md = None
            m = _GLOG_RE.match(line)
            if not m:
                stats.skipped["not a structured trace line"] += 1
                continue
            try:
                parsed = json.loads(line[m.end() :])
            except ValueError:
                stats.skipped["metadata is not JSON"] += 1
                continue
            if not isinstance(parsed, dict) or not parsed:
                stats.skipped["metadata is not a JSON object"] += 1
                continue
            md = parsed
            if writer is not None:
                writer.pid = int(m.group(7))
                writer.clock = m
            record_type = next(iter(md))
            art = md.get("artifact")
            keep = (
                keep_all_payloads
                or record_type in _KEEP_PAYLOAD
                or (record_type == "artifact" and isinstance(art, dict) and art.get("name") in kept)
            )
            sniff = not keep and record_type == "dynamo_cpp_guards_str"
            chunks, sniffed, size, lines = [], [], 0, 0
        if md is not None:
            yield finish()
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        stats.skipped[f"truncated or corrupt compressed data ({type(exc).__name__})"] += 1
        if md is not None:
            yield finish()


class Progress:
    """A one-line progress bar on a terminal: percent of bytes, MB/s, records. At most 10 redraws a second."""

    WIDTH = 30

    def __init__(self, total_bytes: int, out: IO[str]) -> None:
        self.total = max(total_bytes, 1)
        self.out = out
        self.done_files = 0  # bytes of the files already finished
        self.t0 = time.monotonic()
        self._last = self.t0 - 1.0  # draw at the first update

    def update(self, pos: int, records: int, name: str) -> None:
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        done = min(self.done_files + pos, self.total)
        frac = done / self.total
        fill = int(frac * self.WIDTH)
        rate = done / 1e6 / max(now - self.t0, 1e-9)
        bar = "#" * fill + "-" * (self.WIDTH - fill)
        self.out.write(f"\r[{bar}] {frac:6.1%} {done / 1e6:8.1f} MB {rate:6.1f} MB/s {records} records  {name[:30]}")
        self.out.flush()

    def file_done(self, size: int) -> None:
        self.done_files += size

    def close(self) -> None:
        self.out.write("\r" + " " * 110 + "\r")
        self.out.flush()


def log_events(
    path: Path,
    stats: ReplayStats,
    keep_all_payloads: bool = False,
    writer: Writer | None = None,
    progress: Progress | None = None,
) -> Iterator[tuple[str, list[Any]]]:
    """The events of one ``TORCH_TRACE`` log, record by record: ``(record type, events)``. The one read loop: replay feeds
    them to its assembler, a baseline keeps the cache keys. What cannot be read is counted in ``stats`` (a file that
    cannot be opened is one of its ``problems``); a rank's file name gives its records their rank."""
    rank_hint = RANK_IN_NAME.search(path.name)
    interned: dict[int, str] = {}
    try:
        fh = open_log(path)
    except OSError as exc:
        stats.problems.append(f"{path}: cannot read ({exc.strerror or exc})")
        return
    raw = getattr(fh, "fileobj", fh)  # a gzip file's position in the compressed bytes
    with fh:
        for md, payload, size in iter_records(fh, stats, keep_all_payloads, writer):
            stats.records += 1
            if progress is not None and stats.records % 200 == 0:
                progress.update(raw.tell(), stats.records, path.name)
            if rank_hint and "rank" not in md:
                md["rank"] = int(rank_hint.group(1))
            try:
                record_type, events = parse_record(md, payload, interned, payload_size=size)
            except RecordError as exc:
                stats.skipped[str(exc)] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - a record of unexpected shape is a skipped line, never a crash
                stats.skipped[f"unusable {type(exc).__name__}"] += 1
                continue
            if events is None:
                stats.unknown_record_types[record_type] += 1
                continue
            if record_type != "str":
                stats.record_types[record_type] += 1
            yield record_type, events


class LogFiles:
    """The reader of ``TORCH_TRACE`` logs the pipelines give their features' states (a baseline given as a previous
    run's logs: torch_otel._features.feature.LogReader)."""

    def files(self, path: str) -> list[str]:
        """The logs at ``path`` (a log, or a job's directory of them); what is not a log is left out."""
        return [str(f) for f in log_files(Path(path)) if not not_a_trace_log(f)]

    def records(self, file: str, problems: list[str]) -> Iterator[tuple[str, list[Any]]]:
        """One log's records, as :func:`log_events` reads them; what it could not read goes to ``problems``."""
        stats = ReplayStats()
        yield from log_events(Path(file), stats)
        problems.extend(stats.problems)


LOG_FILES = LogFiles()
