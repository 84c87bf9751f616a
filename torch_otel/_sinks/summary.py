"""Where a run's compile time went: totals over every compile the assembler finished, live or replayed.

:class:`RunSummary` is one more sink of the assembler, so a live run, a replayed log and the demo
summarise the same records the spans are built from. Its memory is bounded whatever the run's
length: phases and frames are totals by name, and only the slowest compiles keep their phase tree
(for the HTML page); the rest are folded into their frame. What it says: its JSON here (``to_dict``), its text in
summary_text, how several ranks' summaries add up in summary_merge.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from .._analysis.eager import EagerFrames
from .._analysis.recompiling_frames import RecompilingFrames
from .._core.categories import REASON_CHARS, recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.errors import warn_once
from .._core.graph_breaks import graph_break_code
from .._core.paths import library_call_site, path_problem
from .._core.ranks import env_rank
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._model.compilation_metrics import user_contexts
from .._model.record import ROOT_NAMES, RUNTIME, CompileRecord, PhaseNode, Sink
from .summary_text import format_text
from .summary_text import row_where as _row_where
from .summary_text import where as _where

__all__ = ["SCHEMA_VERSION", "RunSummary", "SummariesByRank"]

# The summary's JSON (TORCH_OTEL_SUMMARY=x.json, replay --json, demo --json): docs/replay.md lists its keys. A key
# that changes meaning or goes away is a new version; new keys are not.
SCHEMA_VERSION = 1
MAX_TREE_COMPILES = 500  # compiles that keep their phase tree for the picture (the slowest)
MAX_FRAMES = 1000  # distinct frames; past this, "(other frames)"
MAX_PHASE_NAMES = 512  # distinct phase names; past this, "(other phases)"
MAX_REASONS = 1000  # distinct recompile reasons kept as text
MAX_TREE_CHILDREN = 200  # distinct phase names under one phase of the picture
SLOWEST = 10
OTHER_FRAMES = ("(other frames)", None, None, None)

# A frame: its function, file and first line, and for a frame in an installed package the user's line that called
# it ("train.py:42"): two models compiled through one library wrapper are two frames, as torch's cache keeps them
FrameKey = tuple[str, str | None, int | None, str | None]


@dataclass(slots=True)
class _Tree:
    """A phase of the picture: same-named siblings are merged (their times and counts add up)."""

    total_ns: int = 0
    self_ns: int = 0
    count: int = 0
    children: dict[str, _Tree] = field(default_factory=dict)

    def to_dict(self, name: str, kind: str = "phase") -> dict[str, Any]:
        kids = sorted(self.children.items(), key=lambda kv: -kv[1].total_ns)
        return {
            "name": name,
            "kind": kind,
            "total_s": _s(self.total_ns),
            "self_s": _s(self.self_ns),
            "count": self.count,
            "children": [t.to_dict(n) for n, t in kids],
        }


@dataclass(slots=True)
class _Frame:
    compiles: int = 0
    total_ns: int = 0
    more: int = 0  # compiles no longer kept in detail
    more_ns: int = 0


def _s(ns: int) -> float:
    return round(ns / 1e9, 6)


def _dur(node: PhaseNode) -> int:
    return max(0, (node.end_ns if node.end_ns is not None else node.start_ns) - node.start_ns)


_MORE = "_more"  # what the features add to a compile the summary lists, read when the summary is written


def _public(facts: dict[str, Any]) -> dict[str, Any]:
    """A compile's facts as the JSON has them: its own, then each feature's (``SummaryView.compile_facts``)."""
    out = {k: v for k, v in facts.items() if k != _MORE}
    out.update(_more(facts))
    return out


def _more(facts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for read in facts.get(_MORE) or ():
        out.update(read())
    return out


class RunSummary(Sink):
    """Totals of a run's compiles: time by phase (total and self), frames, recompiles, graph breaks, caches, failures.

    ``source`` is ``"live"`` or ``"replay"``. Recompile reasons are scrubbed of literal values, as on
    spans, unless ``capture_payloads``. ``destinations`` (``TORCH_OTEL_SUMMARY``'s: ``stderr``, ``stdout`` or
    paths, ``{rank}`` and ``{pid}`` filled in) are written at :meth:`shutdown`.
    """

    def __init__(
        self,
        source: str = "live",
        capture_payloads: bool = False,
        max_tree_compiles: int = MAX_TREE_COMPILES,
        destinations: tuple[str, ...] = (),
        features: tuple[Feature, ...] | None = None,
        states: Mapping[str, Any] | None = None,
    ) -> None:
        self.source = source
        self.destinations = destinations
        self._written = False
        self._pid = os.getpid()  # the process that writes it: a forked child (a DataLoader worker) writes none
        self.capture_payloads = capture_payloads
        self.max_tree_compiles = max_tree_compiles
        self._lock = threading.Lock()
        self.by_kind: Counter[str] = Counter()
        self.wall_ns = 0
        self.cpu_ns = 0
        self.child_cpu_ns = 0  # of it, in the processes working for the compiles (compilers, compile workers)
        self.cpu_known = 0  # compiles whose CPU time is known (live)
        self.phase_total: Counter[str] = Counter()
        self.phase_self: Counter[str] = Counter()
        self.phase_count: Counter[str] = Counter()
        self.frames: dict[FrameKey, _Frame] = {}
        self.recompiles: Counter[str] = Counter()  # by category
        self.reasons: Counter[tuple[str, str]] = Counter()  # (category, text)
        self.user_contexts: Counter[str] = Counter()  # what the user's recompile hooks said at each recompile
        self.graph_breaks: Counter[tuple[str, str]] = Counter()  # (code, type): torch's counters["graph_break"]
        self.unhandled_graph_breaks = 0  # graph breaks torch could not handle: each is its compile's failure
        self.frame_ending_graph_breaks = 0  # graph breaks torch could not resume after: the rest ran in eager
        self.cache: Counter[tuple[str, str, str]] = Counter()
        self.failures: Counter[str] = Counter()
        self.recompile_limit_hits = 0
        self.eager_fallbacks = 0
        self.runtime_records = 0
        self.runtime_ns = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        # each feature's part (torch_otel._features), given its live state, and what each adds to a compile the
        # summary lists
        self.features = features_or_default(features)
        self.views = tuple(f.summary for f in self.features if f.summary is not None)
        self._compile_facts = tuple(v.compile_facts for v in self.views if v.compile_facts is not None)
        self.bind(states or {})
        # graph breaks by location, failures by frame, the frames that recompile: what torch-otel diff compares
        self.extra = _Extra(capture_payloads, source == "live")
        # the slowest compiles: (duration, seq, facts) in a min-heap; and those keeping their tree
        self._slowest: list[tuple[int, int, dict[str, Any]]] = []
        self._trees: list[tuple[int, int, FrameKey, dict[str, Any], _Tree]] = []
        self._seq = itertools.count()

    def bind(self, states: Mapping[str, Any]) -> None:
        """The features' parts, made with the features' live states of the summary's pipeline (the pipeline's builder
        binds a summary made before it, ``instrument(summary=...)``, before any compile)."""
        self.parts = [
            (f.summary.key, f.summary.part(states.get(f.name)), f.summary.optional)
            for f in self.features
            if f.summary is not None
        ]

    # -- the sink --------------------------------------------------------------
    def on_finish(self, record: CompileRecord) -> None:
        with self._lock:
            self._add(record)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Write the summary to each destination, once; a path that cannot be written is one line."""
        if self._written or os.getpid() != self._pid:
            return
        self._written = True
        rank = env_rank()
        for d in self.destinations:
            path = d if d in ("stderr", "stdout") else d.format(rank=rank, pid=os.getpid())
            try:
                self.write(path)
                if d not in ("stderr", "stdout"):  # where it went, said: a file is not seen as it is written
                    what = "the run summary's page" if path.endswith((".html", ".htm")) else "the run summary"
                    sys.stderr.write(f"torch-otel: {what} written to {path}\n")
                    sys.stderr.flush()
            except Exception as exc:  # noqa: BLE001 - the run is over; never fail its exit
                warn_once(
                    f"summary:{path}",
                    "cannot write the run summary to %s (%s); set TORCH_OTEL_SUMMARY to a writable path or to stderr",
                    path,
                    (path_problem(path) if d not in ("stderr", "stdout") else None) or getattr(exc, "strerror", None) or exc,
                )

    def _add(self, rec: CompileRecord) -> None:
        if rec.kind == RUNTIME:
            self.runtime_records += 1
            self.runtime_ns += _dur(rec.root)
            return
        dur = rec.duration_ns  # torch's duration_us where it has one, as the metrics and the root's attribute say
        self.by_kind[rec.kind] += 1
        self.wall_ns += dur
        if rec.cpu_ns is not None:
            self.cpu_ns += rec.cpu_ns
            self.child_cpu_ns += rec.child_cpu_ns or 0
            self.cpu_known += 1
        start = rec.root.start_ns
        self.first_ns = start if self.first_ns is None else min(self.first_ns, start)
        end = start + dur
        self.last_ns = end if self.last_ns is None else max(self.last_ns, end)
        tree = self._phases(rec, dur)
        key = self._frame_key(rec)
        frame = self.frames.get(key)
        if frame is None:
            if len(self.frames) >= MAX_FRAMES:
                key = OTHER_FRAMES
            frame = self.frames.setdefault(key, _Frame())
        frame.compiles += 1
        frame.total_ns += dur
        failed = rec.fail_type or ("Incomplete" if rec.incomplete else None)
        facts: dict[str, Any] = {
            "id": rec.id_str,
            "kind": rec.kind,
            "function": key[0],
            "file": key[1],
            "line": key[2],
            "call_site": key[3],
            "duration_s": _s(dur),
            "status": "error" if failed else "ok",
        }
        if rec.rank is not None:
            facts["rank"] = rec.rank
        facts[_MORE] = [f for f in (read(rec) for read in self._compile_facts) if f is not None]
        seq = next(self._seq)
        self._keep(self._slowest, (dur, seq, facts), SLOWEST)
        dropped = self._keep(self._trees, (dur, seq, key, facts, tree), self.max_tree_compiles)
        if dropped is not None:
            gone = self.frames.get(dropped[2])
            if gone is not None:
                gone.more += 1
                gone.more_ns += dropped[0]
        reason = rec.recompile_reason or (rec.recompile_reasons[0] if rec.recompile_reasons else None)
        if reason:
            category = recompile_category(reason)
            self.recompiles[category] += 1
            text = strip_recompile_prefix(reason)
            if not self.capture_payloads:
                text = scrub_guard_text(text)
            rkey = (category, text[:REASON_CHARS])  # whole: the text view shortens it, keeping its meaning
            if rkey in self.reasons or len(self.reasons) < MAX_REASONS:
                self.reasons[rkey] += 1
            else:
                self.reasons[(category, "(other reasons)")] += 1
            for c in user_contexts(rec.metrics):
                if c in self.user_contexts or len(self.user_contexts) < MAX_REASONS:
                    self.user_contexts[c] += 1
        for gb in rec.handled_graph_breaks:
            self.graph_breaks[(graph_break_code(gb.gb_type, gb.reason), gb.gb_type or "")] += 1
        ends = len(rec.frame_ending_graph_breaks)
        self.frame_ending_graph_breaks += ends
        self.unhandled_graph_breaks += len(rec.graph_breaks) - len(rec.handled_graph_breaks) - ends
        for k, n in rec.cache_counts().items():
            self.cache[k] += n
        for _, part, _ in self.parts:
            part.add(rec)
        self.extra.add(rec, key, failed, self._frame_key(rec, limit=True) if rec.shared_frame else key)
        if failed:
            self.failures[failed] += 1
        if rec.recompile_limit_hit:
            self.recompile_limit_hits += 1
        if rec.eager_fallback:
            self.eager_fallbacks += 1

    @staticmethod
    def _keep(heap: list[Any], item: Any, limit: int) -> Any:
        """Push ``item`` onto a min-heap of at most ``limit``; returns what fell out, if anything."""
        if len(heap) < limit:
            heapq.heappush(heap, item)
            return None
        return heapq.heappushpop(heap, item)

    @staticmethod
    def _frame_key(rec: CompileRecord, limit: bool = False) -> FrameKey:
        """The frame a compile counts for: its code (a backward's is its forward's, derived by the assembler); with
        ``limit``, the frame its recompile limit counts it in: torch's, where several classes share that frame and its
        limit (``CompileRecord.limit_frame``: the frames that recompile, those left in eager)."""
        code = rec.limit_frame() if limit else rec.code
        if code.function is not None and code.file is not None:
            return (code.function, code.file, code.line, library_call_site(code.file, rec.call_site))
        return (f"({ROOT_NAMES.get(rec.kind, rec.kind)})", None, None, None)

    def _phases(self, rec: CompileRecord, duration_ns: int) -> _Tree:
        """Adds the compile's phases to the totals; returns its tree (siblings of a name merged).

        The root counts the compile's duration (``duration_ns``: torch's, where it records one), not its span's.
        """
        top = _Tree()
        stack: list[tuple[PhaseNode, _Tree, bool]] = [(rec.root, top, True)]
        names = self.phase_total
        while stack:
            node, tree, is_root = stack.pop()
            dur = duration_ns if is_root else _dur(node)
            own = node.self_ns(dur)  # less its sub-phases on its own thread (a compile worker's build ran beside it)
            name = ROOT_NAMES.get(rec.kind, "torch.compile") if is_root else node.name
            if name not in names and len(names) >= MAX_PHASE_NAMES:
                name = "(other phases)"
            self.phase_total[name] += dur
            self.phase_self[name] += own
            self.phase_count[name] += 1
            tree.total_ns += dur
            tree.self_ns += own
            tree.count += 1
            for child in node.children:
                sub = tree.children.get(child.name)
                if sub is None:
                    if len(tree.children) >= MAX_TREE_CHILDREN:
                        continue  # counted in the totals above, not drawn
                    sub = tree.children[child.name] = _Tree()
                stack.append((child, sub, False))
        return top

    # -- what it says ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every fact of the summary, as plain JSON-able data (``--json``, the HTML page)."""
        with self._lock:
            d = self.extra.extend(self._dict())
        for view in self.views:  # each feature's last word on the whole document
            if view.finish is not None:
                view.finish(d)
        return d

    def _dict(self) -> dict[str, Any]:
        compiles = sum(self.by_kind.values())
        phases = [
            {
                "name": n,
                "count": self.phase_count[n],
                "total_s": _s(self.phase_total[n]),
                "self_s": _s(self.phase_self[n]),
            }
            for n in sorted(self.phase_total, key=lambda n: (-self.phase_self[n], -self.phase_total[n], n))
        ]
        frames = sorted(self.frames.items(), key=lambda kv: -kv[1].total_ns)
        reasons = sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        d: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "compiles": compiles,
            "by_kind": dict(sorted(self.by_kind.items())),
            "wall_s": _s(self.wall_ns),
            "cpu_s": _s(self.cpu_ns) if self.cpu_known and self.cpu_known == compiles else None,
            "cpu_child_processes_s": _s(self.child_cpu_ns) if self.cpu_known and self.cpu_known == compiles else None,
            "first_to_last_s": _s(self.last_ns - self.first_ns)
            if self.first_ns is not None and self.last_ns is not None
            else 0.0,
            "phases": phases,
            "frames": [
                {
                    "function": k[0],
                    "file": k[1],
                    "line": k[2],
                    "call_site": k[3],
                    "compiles": f.compiles,
                    "total_s": _s(f.total_ns),
                }
                for k, f in frames[:50]
            ],
            "slowest": [_public(facts) for _, _, facts in sorted(self._slowest, key=lambda t: (-t[0], t[1]))],
            "recompiles": {
                "total": sum(self.recompiles.values()),
                "by_category": dict(self.recompiles.most_common()),
                "top_reasons": [{"category": c, "reason": r, "count": n} for (c, r), n in reasons[:20]],
                "user_contexts": [
                    {"context": c, "count": n} for c, n in sorted(self.user_contexts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
                ],
            },
            "graph_breaks": {
                "total": sum(self.graph_breaks.values()),
                "unhandled": self.unhandled_graph_breaks,
                "ends_frame": self.frame_ending_graph_breaks,
                "by_code": [
                    {"code": c, "type": t, "count": n}
                    for (c, t), n in sorted(self.graph_breaks.items(), key=lambda kv: (-kv[1], kv[0]))
                ],
            },
            "cache": [{"cache": c, "location": loc, "result": r, "count": n} for (c, loc, r), n in sorted(self.cache.items())],
        }
        for key, part, optional in self.parts:  # the features' parts, after torch's cache counts
            value = part.to_dict(d)
            if value is not None or not optional:
                d[key] = value
        d.update(
            {
                "failures": {"total": sum(self.failures.values()), "by_type": dict(self.failures.most_common())},
                "recompile_limit_hits": self.recompile_limit_hits,
                "eager_fallbacks": self.eager_fallbacks,
                "runtime": {"records": self.runtime_records, "total_s": _s(self.runtime_ns)},
                "tree": self._tree(),
            }
        )
        return d

    def _tree(self) -> dict[str, Any]:
        """The picture: the run, its frames, their slowest compiles, their phases."""
        kept: dict[FrameKey, list[dict[str, Any]]] = {}
        for _, _, key, facts, tree in sorted(self._trees, key=lambda t: (-t[0], t[1])):
            node = tree.to_dict(f"{facts['kind']} {facts['id']}", "compile")
            node["status"] = facts["status"]
            node.update(_more(facts))
            node["detail"] = f"{facts['kind']} compile of {_row_where(facts)}"
            kept.setdefault(key, []).append(node)
        frames = []
        for key, f in sorted(self.frames.items(), key=lambda kv: -kv[1].total_ns):
            children = kept.get(key, [])
            if f.more:
                children.append(
                    {
                        "name": f"({f.more} more compile{'s' if f.more > 1 else ''})",
                        "kind": "more",
                        "total_s": _s(f.more_ns),
                        "self_s": _s(f.more_ns),
                        "count": f.more,
                        "children": [],
                    }
                )
            frames.append(
                {
                    "name": _where(*key),
                    "kind": "frame",
                    "total_s": _s(f.total_ns),
                    "self_s": 0.0,
                    "count": f.compiles,
                    "children": children,
                }
            )
        return {"name": "run", "kind": "run", "total_s": _s(self.wall_ns), "self_s": 0.0, "count": 1, "children": frames}

    def format_text(self, width: int = 100) -> str:
        """One terminal screen: the totals, then the top rows of each table."""
        return format_text(self.to_dict(), width, self.features)

    def write(self, destination: str) -> None:
        """Write to ``stderr``/``stdout`` (text) or a file: ``.json`` JSON, ``.html`` the page, else text."""
        facts = self.to_dict()
        if destination in ("stderr", "stdout"):
            stream: IO[str] = getattr(sys, destination)
            stream.write(format_text(facts, features=self.features))
            stream.flush()
            return
        if destination.endswith(".json"):
            body = json.dumps(facts, indent=1) + "\n"
        elif destination.endswith((".html", ".htm")):
            from .html import render_html

            body = render_html(facts)
        else:
            body = format_text(facts, features=self.features)
        parent = os.path.dirname(destination)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(destination, "w", encoding="utf-8") as fh:
            fh.write(body)


class SummariesByRank(Sink):
    """One :class:`RunSummary` per rank (at most ``max_ranks``; past it, ``overflow``): a job's ranks compared one to one."""

    def __init__(self, source: str = "replay", max_ranks: int = 4096) -> None:
        self.source = source
        self.max_ranks = max_ranks
        self.ranks: dict[int, RunSummary] = {}
        self.overflow = False

    def on_finish(self, record: CompileRecord) -> None:
        r = record.rank
        if r is None:
            return
        s = self.ranks.get(r)
        if s is None:
            if len(self.ranks) >= self.max_ranks:
                self.overflow = True
                return
            s = self.ranks[r] = RunSummary(self.source, max_tree_compiles=0)
        s.on_finish(record)


# -- what `torch-otel diff` compares, beside the totals above (new keys of the same schema_version) ------------------
MAX_LOCATIONS = 1000  # distinct (graph-break code, location) and (failure type, frame) kept


class _Extra:
    """Graph breaks by code and location, failures by frame, the frames that recompile, the ranks and torch versions."""

    def __init__(self, capture_payloads: bool, live: bool) -> None:
        self.live = live
        self.breaks: Counter[tuple[str, str, str | None, int | None, str]] = Counter()  # code, type, file, line, frame
        self.ending: Counter[tuple[str, str, str | None, int | None, str]] = Counter()  # the same, of frame-ending ones
        self.eager = EagerFrames()
        self.failed: Counter[tuple[str, str, str | None, int | None, str | None]] = Counter()  # type and the frame
        self.recompiling = RecompilingFrames(capture_payloads)
        self.ranks: set[int] = set()
        self.versions: set[str] = set()

    def add(self, rec: CompileRecord, key: FrameKey, failed: str | None, limit_key: FrameKey) -> None:
        """``limit_key``: the frame the compile's recompile limit counts it in (torch's, where several classes share it)."""
        for gb in rec.handled_graph_breaks:
            k = (graph_break_code(gb.gb_type, gb.reason), gb.gb_type or "", gb.filename, gb.lineno, key[0])
            if k in self.breaks or len(self.breaks) < MAX_LOCATIONS:
                self.breaks[k] += 1
        for gb in rec.frame_ending_graph_breaks:
            k = (graph_break_code(gb.gb_type, gb.reason), gb.gb_type or "", gb.filename, gb.lineno, key[0])
            if k in self.ending or len(self.ending) < MAX_LOCATIONS:
                self.ending[k] += 1
        self.eager.add(rec, limit_key)
        if failed:
            f = (failed, *key)
            if f in self.failed or len(self.failed) < MAX_LOCATIONS:
                self.failed[f] += 1
        self.recompiling.add(rec, limit_key)
        if rec.rank is not None and len(self.ranks) < 65536:
            self.ranks.add(rec.rank)
        version = rec.torch_version or (_live_torch_version() if self.live else None)
        if version and len(self.versions) < 16:
            self.versions.add(version)

    def extend(self, d: dict[str, Any]) -> dict[str, Any]:
        d["graph_breaks"]["by_location"] = [
            {"code": c, "type": t, "file": f, "line": ln, "frame": fr, "count": n}
            for (c, t, f, ln, fr), n in sorted(self.breaks.items(), key=lambda kv: (-kv[1], str(kv[0])))
        ]
        d["graph_breaks"]["ends_frame_by_location"] = [
            {"code": c, "type": t, "file": f, "line": ln, "frame": fr, "count": n}
            for (c, t, f, ln, fr), n in sorted(self.ending.items(), key=lambda kv: (-kv[1], str(kv[0])))
        ]
        d["eager_frames"] = self.eager.to_dict()
        d["failures"]["by_frame"] = [
            {"type": t, "function": fn, "file": f, "line": ln, "call_site": site, "count": n}
            for (t, fn, f, ln, site), n in sorted(self.failed.items(), key=lambda kv: (-kv[1], str(kv[0])))
        ]
        d["recompiling_frames"] = self.recompiling.to_dict()
        d["ranks"] = sorted(self.ranks)
        d["torch_versions"] = sorted(self.versions)
        return d


def _live_torch_version() -> str | None:
    torch = sys.modules.get("torch")
    v = getattr(torch, "__version__", None) if torch is not None else None
    return str(v) if v else None
