"""Replay ``TORCH_TRACE`` logs into the same spans and metrics a live run produces.

Streaming: one record in memory at a time, and a payload's text is kept only
for the kinds the mapping reads (chromium events, graph-break reasons) or when
payloads were asked for; other payloads are only measured and hashed.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ._assembler import Assembler, CacheKeys, Tracing
from ._cache import KeyHistory, KeySeen, cache_lookup
from ._events import ArtifactEvent, GraphBreakEvent, MetricsEvent, PhaseEvent
from ._parse import ARTIFACTS, RecordError, parse_record
from ._record import CompileRecord, Sink
from ._summary import RunSummary

# glog prefix as torch writes it (and tlparse reads it): "V1122 17:02:04.816000 3142 path.py:123] {json}"
_GLOG_RE = re.compile(r"^[VIWEC](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) [^\]]*\] ")
# days before each month, in a leap year: a line's clock is read as of the year 2000 (see Writer.line_ns)
_MONTH_DAYS = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)
_ZONE_STEP_NS = 900 * 10**9  # time zones are whole quarter hours apart
_RANK_RE = re.compile(r"rank_(\d+)")
_KEEP_PAYLOAD = {"chromium_event"}  # and the artifacts of the parser's table (ARTIFACTS)


@dataclass
class ReplayStats:
    files: int = 0
    bytes: int = 0
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    unmatched: Counter[str] = field(default_factory=Counter)  # phase begins never ended, ends with nothing open
    unknown_kinds: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)  # records parsed, by kind
    problems: list[str] = field(default_factory=list)
    run: RunSummary | None = None  # the compiles found, and where their time went (replay_paths)


_OTLP_JSON_KEYS = (b'"resourceSpans"', b'"resourceMetrics"', b'"resourceLogs"')


def not_a_trace_log(path: Path) -> str | None:
    """Why ``path`` is plainly not a TORCH_TRACE log (empty, or OpenTelemetry's own JSON), else None."""
    try:
        if path.stat().st_size == 0:
            return (
                "the file is empty; torch writes a TORCH_TRACE log only once something compiles (set TORCH_TRACE=DIR for the job)"
            )
        with _open(path) as fh:
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


def _open(path: Path) -> io.BufferedIOBase:
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
    size = lines = 0

    def finish() -> tuple[dict[str, Any], str | None, int]:
        assert md is not None
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
            kind = next(iter(md))
            art = md.get("artifact")
            keep = (
                keep_all_payloads
                or kind in _KEEP_PAYLOAD
                or (kind == "artifact" and isinstance(art, dict) and art.get("name") in ARTIFACTS)
            )
            chunks, size, lines = [], 0, 0
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


def _stamp(writer: Writer) -> Callable[[CompileRecord, bool], None]:
    """Replay's own word on each compile (the assembler's ``stamp``): the process that wrote it, its log, its torch."""

    def stamp(record: CompileRecord, ended: bool) -> None:
        if not ended:
            record.process_id = writer.pid
            record.trace_file = writer.path
            return
        if record.process_id is None:
            record.process_id = writer.pid
        version = (record.metrics or {}).get("pytorch_version")
        record.torch_version = version if isinstance(version, str) and version else writer.torch_version

    return stamp


def _torch_version(payload: str | None) -> str | None:
    try:
        v = json.loads(payload or "null")
    except ValueError:
        return None
    version = v.get("pytorch_version") if isinstance(v, dict) else None
    return version if isinstance(version, str) and version else None


def replay_file(
    path: Path,
    sinks: list[Sink],
    stats: ReplayStats,
    keep_all_payloads: bool = False,
    progress: Progress | None = None,
    artifacts: bool = False,
    tracing: Tracing | None = None,
    cache_keys: CacheKeys | None = None,
) -> None:
    stats.files += 1
    rank_hint = _RANK_RE.search(path.name)
    interned: dict[int, str] = {}
    writer = Writer(path=str(path))
    assembler = Assembler(sinks, max_open=4096, tracing=tracing, cache_keys=cache_keys, stamp=_stamp(writer))
    try:
        fh = _open(path)
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
                kind, events = parse_record(md, payload, interned, payload_size=size)
            except RecordError as exc:
                stats.skipped[str(exc)] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - a record of unexpected shape is a skipped line, never a crash
                stats.skipped[f"unusable {type(exc).__name__}"] += 1
                continue
            if events is None:
                stats.unknown_kinds[kind] += 1
                continue
            if kind != "str":
                stats.kinds[kind] += 1
            for ev in events:
                if isinstance(ev, PhaseEvent):
                    if writer.offset_ns is None:
                        writer.calibrate(ev.ts_ns)
                elif isinstance(ev, (GraphBreakEvent, ArtifactEvent)) and ev.ts_ns is None:
                    ev.ts_ns = writer.line_ns()  # its own line's time (else: the compile's latest event's)
                if isinstance(ev, ArtifactEvent) and ev.name == "torch_version":
                    writer.torch_version = _torch_version(ev.payload) or writer.torch_version
                if isinstance(ev, ArtifactEvent) and cache_keys is not None:
                    remember_key(cache_keys, ev, writer.torch_version)
                if isinstance(ev, ArtifactEvent) and not artifacts:
                    continue  # default capture: the same events a live default capture sees
                assembler.feed(ev)
    assembler.flush("the log ends before the compile ended")
    for k, v in assembler.stats.items():
        if k.startswith("orphan"):
            stats.skipped[f"{k.replace('_', ' ')} (no compile open for them)"] += v
    stats.unmatched["begins never ended"] += assembler.stats["unmatched_phase_begins"]
    stats.unmatched["ends with no begin open"] += assembler.stats["unmatched_phase_ends"]


def print_summary(stats: ReplayStats, out: IO[str]) -> None:
    """The run summary of what was replayed, then what the replay itself met (unmatched events, skipped lines)."""
    out.write(f"replayed {stats.files} file(s), {stats.bytes / 1e6:.1f} MB, {stats.records} records\n")
    if stats.run is not None:
        out.write(stats.run.format_text())
    if not (stats.run and stats.run.by_kind) and stats.kinds:
        held = ", ".join(f"{n} {k}" for k, n in stats.kinds.most_common(8) if k != "str")
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
    out.write("event kinds not recognised:" + (" none" if not stats.unknown_kinds else "") + "\n")
    for k, v in stats.unknown_kinds.most_common():
        out.write(f"  {v:6d}  {k}\n")


def replay_paths(
    paths: list[str],
    sinks: list[Sink],
    keep_all_payloads: bool = False,
    out: IO[str] = sys.stdout,
    artifacts: bool = False,
    tracing: Tracing | None = None,
    cache_keys: CacheKeys | None = None,
) -> tuple[int, ReplayStats]:
    """Replay every path. Exit status: 2 for a missing path, 1 if nothing could be parsed, else 0."""
    run = RunSummary("replay", capture_payloads=keep_all_payloads)
    stats = ReplayStats(run=run)
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            sys.stderr.write(
                f"torch-otel replay: {p}: no such file or directory; pass a TORCH_TRACE log, a .gz of one, or its directory\n"
            )
            return 2, stats
        found = log_files(path)
        if not found:
            stats.problems.append(
                f"{p}: the directory holds no files; pass the directory TORCH_TRACE named when the job ran (it writes one "
                "log per process there)"
            )
        for f in found:
            why = not_a_trace_log(f)
            if why:
                stats.problems.append(f"{f}: {why}")
            else:
                files.append(f)
    total_bytes = sum(f.stat().st_size for f in files)
    stats.bytes = total_bytes
    progress = Progress(total_bytes, sys.stderr) if sys.stderr.isatty() else None
    for f in files:
        replay_file(f, [*sinks, run], stats, keep_all_payloads, progress, artifacts, tracing, cache_keys)
        if progress is not None:
            progress.file_done(f.stat().st_size)
    if progress is not None:
        progress.close()
    if files:
        print_summary(stats, out)
    for p in stats.problems:
        sys.stderr.write(f"torch-otel replay: {p}\n")
    if not stats.kinds and not stats.unknown_kinds:
        if files:
            sys.stderr.write("torch-otel replay: nothing in the given path(s) could be parsed as a TORCH_TRACE log\n")
        return 1, stats
    return 0, stats


# torch's artifacts that record one cache lookup each, in both of inductor's paths (the FX graph loads inside an
# AOTAutograd hit log no instant event, only these): replay and a baseline learn the keys from them
_KEY_ARTIFACTS = {"fx_graph_cache_": "fx_graph", "aotautograd_cache_": "aot_autograd"}


def remember_key(history: Any, ev: ArtifactEvent, version: str | None) -> bool:
    """A lookup artifact's key into ``history`` (a :class:`KeyHistory`): known, not a lookup of the record."""
    cache = next((c for p, c in _KEY_ARTIFACTS.items() if ev.name.startswith(p)), None)
    if cache is None or not isinstance(history, KeyHistory):
        return False
    try:
        info = json.loads(ev.payload or "null")
    except ValueError:
        return False
    lk = cache_lookup(cache, ev.name.rsplit("_", 1)[-1], None, info, ev.compile_id)
    if lk is None or not lk.key:
        return False
    history.remember(lk, ev.compile_id, ev.rank, version)
    return True


def keys_of_logs(path: Path, where: str, problems: list[str]) -> list[KeySeen]:
    """Every cache key a previous run's TORCH_TRACE logs hold, with its parts: a baseline to explain misses against.

    Read from the lookup artifacts, which torch writes for every lookup of both caches (live capture and replay
    see the lookups through torch's instant events, which the FX graph loads inside an AOTAutograd hit lack).
    """
    history = KeyHistory(where=where, max_keys=1 << 20)
    stats = ReplayStats()
    found = 0
    for f in log_files(path):
        if not_a_trace_log(f):
            continue
        rank_hint = _RANK_RE.search(f.name)
        version: str | None = None
        try:
            fh = _open(f)
        except OSError as exc:
            problems.append(f"{f}: cannot read ({exc.strerror or exc})")
            continue
        with fh:
            for md, payload, size in iter_records(fh, stats):
                if rank_hint and "rank" not in md:
                    md["rank"] = int(rank_hint.group(1))
                try:
                    kind, events = parse_record(md, payload, None, payload_size=size)
                except Exception:  # noqa: BLE001 - a record of another shape: not a key
                    continue
                for ev in events or ():
                    if kind in ("compilation_metrics", "bwd_compilation_metrics") and isinstance(ev, MetricsEvent):
                        v = ev.fields.get("pytorch_version")
                        version = v if isinstance(v, str) and v else version
                    elif isinstance(ev, ArtifactEvent) and ev.name == "torch_version":
                        # written before the first compile: the first lookups' keys know their release
                        version = _torch_version(ev.payload) or version
                    elif isinstance(ev, ArtifactEvent) and remember_key(history, ev, version):
                        found += 1
    if not found:
        problems.append(
            f"{path} holds no cache lookup torch-otel can read (a TORCH_TRACE log of a run that compiled with inductor "
            "has them); misses are explained against this run only"
        )
    return history.seen()
