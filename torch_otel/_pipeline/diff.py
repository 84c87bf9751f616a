"""The two sides of ``torch-otel diff``, read from what a run leaves: logs, run summaries, OTLP-JSON traces.

- a ``TORCH_TRACE`` log or directory of ranks: replayed by replay's own reader and assembler into a
  :class:`RunSummary` (and one per rank), with no span built. The base's cache keys are kept, so the new side's
  misses are explained against the base run;
- a run summary's JSON (``TORCH_OTEL_SUMMARY=x.json``, ``replay --json``, ``demo --json``), ``schema_version`` 1,
  or a directory of them (``summary-{rank}.json``);
- an OTLP-JSON traces file (``TORCH_OTEL_TRACES_FILE``, the demo's ``--traces-file``, ``replay -o``), or a
  directory of them: each compile's root span and its phases are rebuilt into a compile record from the
  attributes and events of docs/span-model.md, and summed by the same :class:`RunSummary`.

Each reader is streaming and bounded: a log is replayed record by record, a traces file line by line.
:func:`run_diff` is the command: it reads both sides, compares them (:mod:`torch_otel._diff`), prints one screen
and writes ``--json`` and ``--html``.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import re
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._analysis.caches import KeyHistory, KeySeen
from .._analysis.diff import (
    EXIT_MISSING_PATH,
    EXIT_NOTHING_PARSED,
    EXIT_OK,
    Side,
    compare,
    format_text,
    merge_summaries,
    parse_fail_on,
)
from .._core.compile_id import parse_compile_id
from .._model.events import CacheLookupEvent, GraphBreakEvent
from .._model.record import CodeLocation, CompileRecord, PhaseNode, Sink
from .._parse.trace_log import log_files
from .._sinks.spans import _NUMERIC_FIELDS
from .._sinks.summary import SCHEMA_VERSION, RunSummary
from .replay import replay_paths

__all__ = ["DiffOptions", "read_side", "run_diff"]

BASE_RUN = "in the base run"
MAX_RANKS = 4096  # ranks summarised one by one; past it, only the whole
MAX_PENDING_SPANS = 200_000  # spans of traces whose root has not come yet (a traces file)
_RANK_IN_NAME = re.compile(r"(?:rank[_-]?|-|_)(\d+)\.[a-z]+$")


@dataclass(frozen=True)
class DiffOptions:
    """What ``torch-otel diff`` was asked for."""

    base: str
    new: str
    json_path: str | None = None  # "-": stdout (the text goes to stderr)
    html: str | None = None
    fail_on: tuple[str, ...] = ()


class _PerRank(Sink):
    """One :class:`RunSummary` per rank of a replayed directory (at most :data:`MAX_RANKS`)."""

    def __init__(self, source: str = "replay") -> None:
        self.source = source
        self.ranks: dict[int, RunSummary] = {}
        self.overflow = False

    def on_finish(self, record: CompileRecord) -> None:
        r = record.rank
        if r is None:
            return
        s = self.ranks.get(r)
        if s is None:
            if len(self.ranks) >= MAX_RANKS:
                self.overflow = True
                return
            s = self.ranks[r] = RunSummary(self.source, max_tree_compiles=0)
        s.on_finish(record)


def _problem(path: str, text: str, err: IO[str]) -> None:
    err.write(f"torch-otel diff: {path}: {text}\n")


def _head(path: Path) -> bytes:
    with path.open("rb") as fh:
        raw = fh.read(2)
        fh.seek(0)
        if raw == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=fh) as gz:
                return gz.read(4096)
        return fh.read(4096)


def _kind_of_file(path: Path) -> str:
    """``summary``, ``otlp`` or ``log`` (anything else is a log: replay says what it could not read)."""
    try:
        head = _head(path).lstrip()
    except OSError:
        return "log"
    if head.startswith(b"{"):
        if b'"resourceSpans"' in head or b'"resourceMetrics"' in head or b'"resourceLogs"' in head:
            return "otlp"
        if b'"schema_version"' in head or path.suffix == ".json":
            return "summary"
    return "log"


def read_side(path: str, err: IO[str], baseline: list[KeySeen] | None = None) -> tuple[Side | None, int, list[KeySeen]]:
    """One side of the diff; the exit status (replay's: 2 a missing path, 1 nothing readable) and its cache keys."""
    p = Path(path)
    if not p.exists():
        _problem(
            path,
            "no such file or directory; pass a TORCH_TRACE log or directory, a run summary's JSON, or an OTLP-JSON traces file",
            err,
        )
        return None, EXIT_MISSING_PATH, []
    if p.is_dir():
        files = log_files(p)
        kinds = {f: _kind_of_file(f) for f in files}
        if files and all(k == "summary" for k in kinds.values()):
            return _summaries_side(path, files, err)
        if files and all(k == "otlp" for k in kinds.values()):
            return _otlp_side(path, files, err)
        return _log_side(path, err, baseline, directory=True)
    kind = _kind_of_file(p)
    if kind == "summary":
        return _summaries_side(path, [p], err)
    if kind == "otlp":
        return _otlp_side(path, [p], err)
    return _log_side(path, err, baseline, directory=False)


# -- TORCH_TRACE logs ------------------------------------------------------------------------------------------


def _log_side(path: str, err: IO[str], baseline: list[KeySeen] | None, directory: bool) -> tuple[Side | None, int, list[KeySeen]]:
    per_rank = _PerRank()
    history = KeyHistory(baseline or ())
    code, stats = replay_paths([path], [per_rank] if directory else [], out=io.StringIO(), cache_keys=history)
    if code != EXIT_OK or stats.run is None:
        return None, code, []
    notes = []
    if per_rank.overflow:
        notes.append(f"more than {MAX_RANKS} ranks: only the whole job is compared")
    skipped = sum(stats.skipped.values())
    if skipped:
        notes.append(f"{skipped} log lines could not be read (torch-otel replay {path} lists them)")
    ranks = {r: s.to_dict() for r, s in per_rank.ranks.items()} if len(per_rank.ranks) > 1 else {}
    form = f"TORCH_TRACE directory, {stats.files} logs" if directory and stats.files > 1 else "TORCH_TRACE log"
    seen = [dataclasses.replace(k, where=BASE_RUN) for k in history.seen()]
    return Side(path, form, stats.run.to_dict(), ranks, notes), EXIT_OK, seen


# -- run summaries ---------------------------------------------------------------------------------------------


def _summaries_side(path: str, files: list[Path], err: IO[str]) -> tuple[Side | None, int, list[KeySeen]]:
    docs: list[tuple[Path, dict[str, Any]]] = []
    for f in files:
        try:
            doc = json.loads(_read_text(f))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            _problem(
                str(f),
                f"cannot be read as a run summary's JSON ({exc}); pass the file TORCH_OTEL_SUMMARY or replay --json wrote",
                err,
            )
            return None, EXIT_NOTHING_PARSED, []
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if version != SCHEMA_VERSION:
            _problem(
                str(f),
                f"a run summary of schema_version {version!r}; this torch-otel reads schema_version "
                f"{SCHEMA_VERSION} (diff the TORCH_TRACE logs instead, or use the torch-otel that wrote it)",
                err,
            )
            return None, EXIT_NOTHING_PARSED, []
        docs.append((f, doc))
    notes = []
    if not all("recompiling_frames" in d and "by_location" in (d.get("graph_breaks") or {}) for _, d in docs):
        notes.append("written by an older torch-otel: graph breaks by code only, recompiles by run, not by frame")
    if len(docs) == 1:
        doc = docs[0][1]
        many = len(doc.get("ranks") or []) > 1
        if many:
            notes.append(
                "one summary of several ranks: no rank is compared (one summary per rank, "
                "TORCH_OTEL_SUMMARY=summary-{rank}.json, or the TORCH_TRACE directory compares them)"
            )
        if len(doc.get("frames") or []) >= 50:
            notes.append("a summary lists its 50 costliest frames: the others are not compared")
        return Side(path, "run summary", doc, {}, notes), EXIT_OK, []
    ranks: dict[int, dict[str, Any]] = {}
    for f, d in docs:
        own = d.get("ranks") or []
        m = _RANK_IN_NAME.search(f.name)
        r = own[0] if len(own) == 1 else int(m.group(1)) if m else None
        if r is None or r in ranks:
            notes.append(f"{f.name}: its rank is unknown (no rank in it or in its name): only the whole is compared")
            ranks = {}
            break
        ranks[r] = d
    whole = merge_summaries([d for _, d in docs])
    return Side(path, f"run summaries, {len(docs)} files", whole, ranks, notes), EXIT_OK, []


def _read_text(f: Path) -> str:
    with f.open("rb") as fh:
        raw = fh.read(2)
        fh.seek(0)
        data = gzip.GzipFile(fileobj=fh).read() if raw == b"\x1f\x8b" else fh.read()
    return data.decode("utf-8")


# -- OTLP-JSON traces ------------------------------------------------------------------------------------------

_INVERSE_FIELDS = {attr: name for name, attr in _NUMERIC_FIELDS.items()}


def _value(v: Mapping[str, Any]) -> Any:
    if "arrayValue" in v:
        return [_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return None
    return next(iter(v.values())) if v else None


def _attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items or []:
        if isinstance(kv, Mapping) and isinstance(kv.get("key"), str) and isinstance(kv.get("value"), Mapping):
            out[kv["key"]] = _value(kv["value"])
    return out


class _Explained:
    """A miss's explanation as a span carries it: the cause, its words and the changes (as _cache.Explanation)."""

    def __init__(self, cause: str, reason: str, changes: list[str]) -> None:
        self.cause, self.reason, self.changes = cause, reason, changes

    def text(self) -> str:
        return self.reason

    def short(self) -> str:
        return "; ".join(self.changes) if self.changes else self.reason


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def record_of_spans(
    root: Mapping[str, Any], descendants: list[Mapping[str, Any]], resource: Mapping[str, Any]
) -> CompileRecord | None:
    """A compile record rebuilt from its root span and phase spans (docs/span-model.md), for :class:`RunSummary`."""
    a = root["_attrs"]
    kind = a.get("torch.compile.kind")
    if not isinstance(kind, str):
        return None
    cid = parse_compile_id(a.get("torch.compile.id"))
    start, end = int(root.get("startTimeUnixNano") or 0), int(root.get("endTimeUnixNano") or 0)
    nodes: dict[str, PhaseNode] = {}
    top = PhaseNode(str(root.get("name")), start, end)
    nodes[str(root.get("spanId"))] = top
    pending = sorted(descendants, key=lambda s: int(s.get("startTimeUnixNano") or 0))
    placed = True
    while pending and placed:  # parents before children, whatever order the file holds them in
        placed = False
        rest = []
        for s in pending:
            parent = nodes.get(str(s.get("parentSpanId")))
            if parent is None:
                rest.append(s)
                continue
            sa = s["_attrs"]
            args = {k.removeprefix("torch.compile."): v for k, v in sa.items() if k.startswith("torch.compile.")}
            node = PhaseNode(
                str(s.get("name")), int(s.get("startTimeUnixNano") or 0), int(s.get("endTimeUnixNano") or 0), args=args
            )
            parent.children.append(node)
            nodes[str(s.get("spanId"))] = node
            placed = True
        pending = rest
    metrics: dict[str, Any] = {}
    for attr, name in _INVERSE_FIELDS.items():
        if attr in a:
            metrics[name] = a[attr]
    duration = a.get("torch.compile.duration_s")
    if isinstance(duration, (int, float)) and kind in ("frame", "backward"):
        metrics["duration_us"] = float(duration) * 1e6
    if isinstance(a.get("torch.compile.recompile_reason"), str):
        metrics["recompile_reason"] = a["torch.compile.recompile_reason"]
    if isinstance(a.get("torch.compile.has_guarded_code"), bool):
        metrics["has_guarded_code"] = a["torch.compile.has_guarded_code"]
    error = a.get("error.type")
    events = root.get("events") or []
    if isinstance(error, str) and error != "Incomplete":
        metrics["fail_type"] = error
        exc = next((e for e in events if e.get("name") == "exception"), None)
        message = _attrs(exc.get("attributes")).get("exception.message") if exc else None
        metrics["fail_reason"] = message if isinstance(message, str) else error
        if a.get("torch.compile.recompile_limit_exceeded"):
            metrics["fail_reason"] = f"recompile limit exceeded: {metrics['fail_reason']}"
    rec = CompileRecord(
        kind, cid, top, attempt=_int(a.get("torch.compile.attempt")) or 0, rank=_int(a.get("torch.distributed.rank"))
    )
    if rec.rank is None:
        rec.rank = _int(resource.get("torch.distributed.rank"))
    rec.metrics = metrics
    if error == "Incomplete":
        rec.incomplete = str((root.get("status") or {}).get("message") or "incomplete")
    reasons = a.get("torch.compile.recompile_reasons")
    if isinstance(reasons, list):
        rec.recompile_reasons = [str(r) for r in reasons]
    rec.code = CodeLocation(
        a.get("code.function.name") if isinstance(a.get("code.function.name"), str) else None,
        a.get("code.file.path") if isinstance(a.get("code.file.path"), str) else None,
        _int(a.get("code.line.number")),
    )
    version = resource.get("torch.version")
    rec.torch_version = version if isinstance(version, str) else None
    size = _int(a.get("torch.compile.cache_size"))
    rec.frame_recompiles = size
    rec.recompile_limit = _int(a.get("torch.compile.recompile_limit"))
    for e in events:
        name, ea = e.get("name"), _attrs(e.get("attributes"))
        if name in ("torch.compile.graph_break", "torch.compile.unhandled_graph_break"):
            code = ea.get("torch.compile.graph_break.code")
            reason = str(ea.get("torch.compile.graph_break.reason") or "")
            if isinstance(code, str) and code.startswith("GB") and code[2:].isdigit():
                reason += f"\n(https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{code[2:]}.html)"  # its code
            rec.graph_breaks.append(
                GraphBreakEvent(
                    cid,
                    reason,
                    ea.get("torch.compile.graph_break.type")
                    if isinstance(ea.get("torch.compile.graph_break.type"), str)
                    else None,
                    ea.get("code.file.path") if isinstance(ea.get("code.file.path"), str) else None,
                    _int(ea.get("code.line.number")),
                    skipped_frame=name == "torch.compile.unhandled_graph_break" or bool(ea.get("torch.compile.eager_fallback")),
                )
            )
        elif name == "torch.compile.cache_lookup":
            cache, result = ea.get("torch.compile.cache.name"), ea.get("torch.compile.cache.result")
            if not isinstance(cache, str) or not isinstance(result, str):
                continue
            lk = CacheLookupEvent(cid, cache, result, key=ea.get("torch.compile.cache.key"))
            t = ea.get("torch.compile.cache.time_s")
            lk.phase_ns = int(t * 1e9) if isinstance(t, (int, float)) else None
            b = ea.get("torch.compile.cache.backward")
            lk.backward = b if isinstance(b, bool) else None
            cause = ea.get("torch.compile.cache.miss_cause")
            if result == "miss" and isinstance(cause, str):
                changes = ea.get("torch.compile.cache.miss_changes")
                lk.explanation = _Explained(
                    cause,
                    str(ea.get("torch.compile.cache.miss_reason") or cause),
                    [str(c) for c in changes] if isinstance(changes, list) else [],
                )
            rec.cache_lookups.append(lk)
        elif name == "torch.compile.recompile_limit_near":
            rec.recompile_limit = _int(ea.get("torch.compile.recompile_limit")) or rec.recompile_limit
            rec.recompile_limit_near = True
    return rec


def _spans(path: Path, err: IO[str]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Every span of an OTLP-JSON lines file, with its resource's attributes, line by line."""
    fh: IO[str] = gzip.open(path, "rt", encoding="utf-8") if _is_gzip(path) else open(path, encoding="utf-8")  # noqa: SIM115
    with fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line)
            except ValueError:
                _problem(str(path), f"line {n} is not JSON: skipped", err)
                continue
            for rs in req.get("resourceSpans") or []:
                resource = _attrs((rs.get("resource") or {}).get("attributes"))
                for ss in rs.get("scopeSpans") or []:
                    for sp in ss.get("spans") or []:
                        if isinstance(sp, dict):
                            sp["_attrs"] = _attrs(sp.get("attributes"))
                            yield sp, resource


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _otlp_side(path: str, files: list[Path], err: IO[str]) -> tuple[Side | None, int, list[KeySeen]]:
    whole = RunSummary("live")
    per_rank = _PerRank("live")
    found = 0
    notes: list[str] = []
    for f in files:
        pending: OrderedDict[str, list[Mapping[str, Any]]] = OrderedDict()  # trace id -> its spans seen so far
        held = 0
        try:
            for sp, resource in _spans(f, err):
                trace = str(sp.get("traceId"))
                if "torch.compile.kind" not in sp["_attrs"]:
                    pending.setdefault(trace, []).append(sp)
                    held += 1
                    while held > MAX_PENDING_SPANS and pending:
                        _, dropped = pending.popitem(last=False)
                        held -= len(dropped)
                    continue
                spans = pending.get(trace, [])
                mine = _descendants(str(sp.get("spanId")), spans)
                if mine:
                    ids = {id(s) for s in mine}
                    rest = [s for s in spans if id(s) not in ids]
                    held -= len(mine)
                    if rest:
                        pending[trace] = rest
                    else:
                        pending.pop(trace, None)
                if resource.get("torch_otel.replay") is True:
                    whole.source = per_rank.source = "replay"
                rec = record_of_spans(sp, mine, resource)
                if rec is None:
                    continue
                found += 1
                whole.on_finish(rec)
                per_rank.on_finish(rec)
        except (OSError, UnicodeDecodeError, EOFError) as exc:
            _problem(str(f), f"cannot be read ({exc}); pass an OTLP-JSON traces file", err)
            return None, EXIT_NOTHING_PARSED, []
    if not found:
        _problem(
            path, "holds no torch.compile span (an OTLP-JSON traces file of a run with the bridge on has one per compile)", err
        )
        return None, EXIT_NOTHING_PARSED, []
    ranks = {r: s.to_dict() for r, s in per_rank.ranks.items()} if len(per_rank.ranks) > 1 else {}
    form = "OTLP-JSON traces" + (f", {len(files)} files" if len(files) > 1 else "")
    return Side(path, form, whole.to_dict(), ranks, notes), EXIT_OK, []


def _descendants(root_id: str, spans: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    kids: dict[str, list[Mapping[str, Any]]] = {}
    for s in spans:
        kids.setdefault(str(s.get("parentSpanId")), []).append(s)
    out: list[Mapping[str, Any]] = []
    stack = [root_id]
    while stack:
        for s in kids.get(stack.pop(), []):
            out.append(s)
            stack.append(str(s.get("spanId")))
    return out


# -- the command ---------------------------------------------------------------------------------------------------


def run_diff(opts: DiffOptions) -> int:
    """``torch-otel diff BASE NEW``: the exit status (0 done or the gate passed, 1 or 2 unreadable input, 4 the gate failed)."""
    err = sys.stderr
    gate, problems = parse_fail_on(opts.fail_on)
    for p in problems:
        err.write(f"torch-otel diff: {p}\n")
    if problems:
        return EXIT_MISSING_PATH
    base, code, keys = read_side(opts.base, err)
    if base is None:
        return code
    new, code, _ = read_side(opts.new, err, baseline=keys)
    if new is None:
        return code
    doc = compare(base, new, gate)
    out = err if opts.json_path == "-" else sys.stdout
    out.write(format_text(doc))
    out.flush()
    if opts.json_path:
        text = json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"
        if opts.json_path == "-":
            sys.stdout.write(text)
        else:
            try:
                Path(opts.json_path).write_text(text, encoding="utf-8")
            except OSError as exc:
                err.write(
                    f"torch-otel diff: cannot write --json {opts.json_path} ({exc.strerror or exc}); pass a writable path\n"
                )
    if opts.html:
        from .._sinks.diff_html import render_diff_html

        try:
            Path(opts.html).write_text(render_diff_html(doc), encoding="utf-8")
            err.write(f"diff page written to {opts.html}\n")
        except OSError as exc:
            err.write(f"torch-otel diff: cannot write --html {opts.html} ({exc.strerror or exc}); pass a writable path\n")
    gate_doc = doc.get("gate")
    return int(gate_doc["exit"]) if gate_doc else EXIT_OK
