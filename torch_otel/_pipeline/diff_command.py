"""The two sides of ``torch-otel diff``, read from what a run leaves: logs, run summaries, OTLP-JSON traces.

- a ``TORCH_TRACE`` log or directory of ranks: replayed by replay's own reader and assembler into a
  :class:`RunSummary` (and one per rank), with no span built. The base's cache keys are kept, so the new side's
  misses are explained against the base run;
- a run summary's JSON (``TORCH_OTEL_SUMMARY=x.json``, ``replay --json``, ``demo --json``), ``schema_version`` 1,
  or a directory of them (``summary-{rank}.json``);
- an OTLP-JSON traces file (``TORCH_OTEL_TRACES_FILE``, the demo's ``--traces-file``, ``replay -o``), or a
  directory of them: each compile's root span and its phases are rebuilt into a compile record with the names the
  span mapper writes (torch_otel._sinks.span_model), and summed by the same :class:`RunSummary`.

Each reader is streaming and bounded: a log is replayed record by record, a traces file line by line.
:func:`run_diff` is the command: it reads both sides, compares them (:mod:`torch_otel._analysis.diff_compare`), prints one screen
and writes ``--json`` and ``--html``.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._analysis.diff_compare import Side, compare
from .._analysis.diff_gate import EXIT_MISSING_PATH, EXIT_NOTHING_PARSED, EXIT_OK, parse_fail_on
from .._analysis.diff_text import format_text
from .._core.paths import check_writable
from .._model.record import CompileRecord, PhaseNode
from .._otel.replay_tracers import REPLAYED
from .._parse.trace_log import ReplayStats, log_files
from .._sinks.replay_report import problem_lines
from .._sinks.span_model import Root, late_span_names, otlp_attributes, own_root_readers, read_late_span, record_of_spans
from .._sinks.summary import SCHEMA_VERSION
from .._sinks.summary_merge import merge_summaries
from .build import PipelineSpec, build_pipeline
from .replay import replay_paths

__all__ = ["DiffOptions", "read_side", "run_diff"]

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


def read_side(path: str, err: IO[str], previous: Mapping[str, Any] | None = None) -> tuple[Side | None, int, dict[str, Any]]:
    """One side of the diff; the exit status (replay's: 2 a missing path, 1 nothing readable), and what its pipeline's
    features' states hand over to the other side's (``previous``: the base side's)."""
    p = Path(path)
    if not p.exists():
        _problem(
            path,
            "no such file or directory; pass a TORCH_TRACE log or directory, a run summary's JSON, or an OTLP-JSON traces file",
            err,
        )
        return None, EXIT_MISSING_PATH, {}
    if p.is_dir():
        files = log_files(p)
        kinds = {f: _kind_of_file(f) for f in files}
        if files and all(k == "summary" for k in kinds.values()):
            return _summaries_side(path, files, err)
        if files and all(k == "otlp" for k in kinds.values()):
            return _otlp_side(path, files, err)
        return _log_side(path, err, previous, directory=True)
    kind = _kind_of_file(p)
    if kind == "summary":
        return _summaries_side(path, [p], err)
    if kind == "otlp":
        return _otlp_side(path, [p], err)
    return _log_side(path, err, previous, directory=False)


# -- TORCH_TRACE logs ------------------------------------------------------------------------------------------


def _log_side(
    path: str, err: IO[str], previous: Mapping[str, Any] | None, directory: bool
) -> tuple[Side | None, int, dict[str, Any]]:
    # the new side's states start from the base side's (another run: a cache key both missed is no news)
    pipeline = build_pipeline(PipelineSpec("diff", per_rank=directory, previous=previous))
    stats = ReplayStats()
    code = replay_paths([path], pipeline, stats)
    pipeline.shutdown()
    for line in problem_lines(stats, "torch-otel diff"):  # the reader's, as replay says them
        sys.stderr.write(line)
    if code != EXIT_OK or pipeline.summary is None:
        return None, code, {}
    per_rank = pipeline.by_rank
    notes = []
    if per_rank is not None and per_rank.overflow:
        notes.append(f"more than {per_rank.max_ranks} ranks: only the whole job is compared")
    skipped = sum(stats.skipped.values())
    if skipped:
        notes.append(f"{skipped} log lines could not be read (torch-otel replay {path} lists them)")
    ranks = {r: s.to_dict() for r, s in per_rank.ranks.items()} if per_rank is not None and len(per_rank.ranks) > 1 else {}
    form = f"TORCH_TRACE directory, {stats.files} logs" if directory and stats.files > 1 else "TORCH_TRACE log"
    return Side(path, form, pipeline.summary.to_dict(), ranks, notes), EXIT_OK, pipeline.handover()


# -- run summaries ---------------------------------------------------------------------------------------------


def _summaries_side(path: str, files: list[Path], err: IO[str]) -> tuple[Side | None, int, dict[str, Any]]:
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
            return None, EXIT_NOTHING_PARSED, {}
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if version != SCHEMA_VERSION:
            _problem(
                str(f),
                f"a run summary of schema_version {version!r}; this torch-otel reads schema_version "
                f"{SCHEMA_VERSION} (diff the TORCH_TRACE logs instead, or use the torch-otel that wrote it)",
                err,
            )
            return None, EXIT_NOTHING_PARSED, {}
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
        return Side(path, "run summary", doc, {}, notes), EXIT_OK, {}
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
    return Side(path, f"run summaries, {len(docs)} files", whole, ranks, notes), EXIT_OK, {}


def _read_text(f: Path) -> str:
    with f.open("rb") as fh:
        raw = fh.read(2)
        fh.seek(0)
        data = gzip.GzipFile(fileobj=fh).read() if raw == b"\x1f\x8b" else fh.read()
    return data.decode("utf-8")


# -- OTLP-JSON traces ------------------------------------------------------------------------------------------


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
                resource = otlp_attributes((rs.get("resource") or {}).get("attributes"))
                for ss in rs.get("scopeSpans") or []:
                    for sp in ss.get("spans") or []:
                        if isinstance(sp, dict):
                            sp["_attrs"] = otlp_attributes(sp.get("attributes"))
                            yield sp, resource


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _otlp_side(path: str, files: list[Path], err: IO[str]) -> tuple[Side | None, int, dict[str, Any]]:
    pipeline = build_pipeline(PipelineSpec("diff", per_rank=True, summary_source="live"))
    whole, per_rank = pipeline.summary, pipeline.by_rank
    assert whole is not None and per_rank is not None
    found = 0
    notes: list[str] = []
    late_names = late_span_names()
    own_readers = own_root_readers()  # traces a feature writes of its own (a start-up): its summary part, by rank
    own: dict[str, tuple[Any, dict[int | None, Any]]] = {}
    for f in files:
        pending: OrderedDict[str, list[Mapping[str, Any]]] = OrderedDict()  # trace id -> its spans seen so far
        # compile roots read so far, by span id: a span written at exit (a graph's calls) comes long after its root
        roots: OrderedDict[str, CompileRecord] = OrderedDict()
        held = 0
        try:
            for sp, resource in _spans(f, err):
                trace = str(sp.get("traceId"))
                if sp.get("name") in late_names and str(sp.get("parentSpanId")) in roots:
                    read_late_span(sp, roots[str(sp.get("parentSpanId"))])
                    continue
                reader = own_readers.get(str(sp.get("name"))) if not sp.get("parentSpanId") else None
                if reader is not None:
                    feature, read = reader
                    value = read(
                        sp["_attrs"], resource, _int_or_0(sp.get("startTimeUnixNano")), _int_or_0(sp.get("endTimeUnixNano"))
                    )
                    if value is not None:
                        rank = resource.get(Root.RANK)
                        key = feature.summary.key if feature.summary is not None else feature.name
                        own.setdefault(key, (feature, {}))[1][rank if isinstance(rank, int) else None] = value
                    continue
                if Root.KIND not in sp["_attrs"]:
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
                if resource.get(REPLAYED) is True:
                    whole.source = per_rank.source = "replay"
                rec = record_of_spans(sp, mine, resource)
                if rec is None:
                    continue
                if rec.derived:  # a stand-in sharing its derived facts, which a late span fills in (no phase tree)
                    roots[str(sp.get("spanId"))] = CompileRecord(
                        rec.kind, rec.compile_id, PhaseNode(rec.root.name, 0), derived=rec.derived
                    )
                    if len(roots) > MAX_PENDING_SPANS:
                        roots.popitem(last=False)
                found += 1
                pipeline.finish(rec)
        except (OSError, UnicodeDecodeError, EOFError) as exc:
            _problem(str(f), f"cannot be read ({exc}); pass an OTLP-JSON traces file", err)
            return None, EXIT_NOTHING_PARSED, {}
    if not found:
        _problem(
            path, "holds no torch.compile span (an OTLP-JSON traces file of a run with the bridge on has one per compile)", err
        )
        return None, EXIT_NOTHING_PARSED, {}
    ranks = {r: s.to_dict() for r, s in per_rank.ranks.items()} if len(per_rank.ranks) > 1 else {}
    doc = whole.to_dict()
    for key, (feature, by_rank) in own.items():  # each rank's, and the whole job's by the feature's own merge
        for r, value in by_rank.items():
            if r in ranks:
                ranks[r][key] = value
        add = feature.summary.merge.add if feature.summary is not None else None
        doc[key] = add(list(by_rank.values())) if add is not None else next(iter(by_rank.values()))
    form = "OTLP-JSON traces" + (f", {len(files)} files" if len(files) > 1 else "")
    return Side(path, form, doc, ranks, notes), EXIT_OK, {}


def _int_or_0(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


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


def _write(path: str, text: str) -> None:
    """Write an output file, its missing parent directories created (as every command's outputs are)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")


def run_diff(opts: DiffOptions) -> int:
    """``torch-otel diff BASE NEW``: the exit status (0 done or the gate passed, 1 or 2 unreadable input, 4 the gate failed)."""
    err = sys.stderr
    gate, problems = parse_fail_on(opts.fail_on)
    for p in problems:
        err.write(f"torch-otel diff: {p}\n")
    # the output paths, before either side is read: a CI job must not pass (exit 0) without the artifact it asked for
    for option, path in (("--json", opts.json_path), ("--html", opts.html)):
        line = check_writable(path, option) if path and path != "-" else None
        if line:
            problems.append(line)
            err.write(f"torch-otel diff: {line}\n")
    if problems:
        return EXIT_MISSING_PATH
    base, code, handed = read_side(opts.base, err)
    if base is None:
        return code
    new, code, _ = read_side(opts.new, err, previous=handed)
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
                _write(opts.json_path, text)
            except OSError as exc:
                err.write(
                    f"torch-otel diff: cannot write --json {opts.json_path} ({exc.strerror or exc}); pass a writable path\n"
                )
    if opts.html:
        from .._sinks.diff_html import render_diff_html

        try:
            _write(opts.html, render_diff_html(doc))
            err.write(f"diff page written to {opts.html}\n")
        except OSError as exc:
            err.write(f"torch-otel diff: cannot write --html {opts.html} ({exc.strerror or exc}); pass a writable path\n")
    gate_doc = doc.get("gate")
    return int(gate_doc["exit"]) if gate_doc else EXIT_OK
