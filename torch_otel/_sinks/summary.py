"""Where a run's compile time went: totals over every compile the assembler finished, live or replayed.

:class:`RunSummary` is one more sink of the assembler, so a live run, a replayed log and the demo
summarise the same records the spans are built from. Its memory is bounded whatever the run's
length: phases and frames are totals by name, and only the slowest compiles keep their phase tree
(for the HTML page); the rest are folded into their frame.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from .._analysis.eager import EagerFrames, eager_lines
from .._analysis.recompiles import RecompilingFrames, add_call_evidence, frame_lines
from .._core.categories import REASON_CHARS, recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.errors import warn_once
from .._core.graph_breaks import graph_break_code
from .._core.merge import Merge, basename, counts, first, merge_with, num, rows, sum_int, sum_known_s, sum_s, union
from .._core.paths import in_installed_package, path_problem
from .._core.ranks import env_rank
from .._core.text import cut_middle, cut_where, shorten_reason
from .._features.feature import Feature
from .._features.graph_calls import compile_calls
from .._features.registry import features_or_default
from .._model.compilation_metrics import user_contexts
from .._model.record import ROOT_NAMES, RUNTIME, CompileRecord, PhaseNode, Sink

__all__ = ["MERGE", "Merge", "RunSummary", "SummariesByRank", "format_text", "merge_rules", "merge_summaries"]

# The summary's JSON (TORCH_OTEL_SUMMARY=x.json, replay --json, demo --json): docs/replay.md lists its keys. A key
# that changes meaning or goes away is a new version; new keys are not.
SCHEMA_VERSION = 1
MAX_TREE_COMPILES = 500  # compiles that keep their phase tree for the picture (the slowest)
MAX_FRAMES = 1000  # distinct frames; past this, "(other frames)"
MAX_PHASE_NAMES = 512  # distinct phase names; past this, "(other phases)"
MAX_REASONS = 1000  # distinct recompile reasons kept as text
MAX_TREE_CHILDREN = 200  # distinct phase names under one phase of the picture
SLOWEST = 10
MAX_LINES = 45  # the text summary's lines: one terminal screen
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


_CALLS = "_calls"  # a compile's graphs (its calls are read when the summary is written)


def _public(facts: dict[str, Any]) -> dict[str, Any]:
    """A compile's facts as the JSON has them: with ``calls``, how many times its graph ran (None: not known)."""
    out = {k: v for k, v in facts.items() if k != _CALLS}
    cc = facts.get(_CALLS)
    out["calls"] = cc.calls() if cc is not None else None
    return out


def _where(fn: str, path: str | None, line: int | None, call_site: str | None = None) -> str:
    """``forward (model.py:32)``; a library's frame with the user's line that called it: ``wrapper (generic.py:1030)
    from train.py:42``."""
    if path is None:
        return fn
    site = f" from {call_site}" if call_site and in_installed_package(path) else ""  # a library's frame only
    return f"{fn} ({os.path.basename(path)}:{line if line is not None else '?'}){site}"


def _row_where(r: Mapping[str, Any]) -> str:
    return _where(str(r.get("function")), r.get("file"), r.get("line"), r.get("call_site"))


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
        # each added feature's part (torch_otel._features): the cache lookups' is ``caches``, cold and warm starts
        self.features = features_or_default(features)
        self.parts = [(k.summary.key, k.summary.part()) for k in self.features if k.summary is not None]
        # graph breaks by location, failures by frame, the frames that recompile: what torch-otel diff compares
        self.extra = _Extra(capture_payloads, source == "live")
        # the slowest compiles: (duration, seq, facts) in a min-heap; and those keeping their tree
        self._slowest: list[tuple[int, int, dict[str, Any]]] = []
        self._trees: list[tuple[int, int, FrameKey, dict[str, Any], _Tree]] = []
        self._seq = itertools.count()

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
        facts[_CALLS] = compile_calls(rec)  # read when the summary is written (torch_otel._features.graph_calls)
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
        for _, part in self.parts:
            part.add(rec)
        self.extra.add(rec, key, failed)
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
    def _frame_key(rec: CompileRecord) -> FrameKey:
        """The frame a compile counts for: its code (a backward's is its forward's, derived by the assembler)."""
        code = rec.code
        if code.function is not None and code.file is not None:
            site = rec.call_site
            called_from = None
            if site is not None and site.file and in_installed_package(code.file):
                called_from = f"{os.path.basename(site.file)}:{site.line if site.line is not None else '?'}"
            return (code.function, code.file, code.line, called_from)
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
        add_call_evidence(d["recompiling_frames"], d.get("graph_calls"))  # the graphs each recompile left behind
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
        for key, part in self.parts:  # the added features' parts, after torch's cache counts
            d[key] = part.to_dict(d)
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
            node["calls"] = _public(facts)["calls"]
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


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_MORE = "--json or the HTML page lists them"


@dataclass(slots=True)
class _Block:
    """A block of the text summary, drawn for ``n`` of its rows (``render(n)``): its usual ``n``, the fewest it gives way
    to when the screen is full, and where it stands in the order blocks give way (lower first)."""

    render: Callable[[int], list[str]]  # n -> lines; a block cut below its usual rows says how many more, and where
    n: int
    least: int
    gives_way: int = 99  # never


def _rows_block(head: list[str], rows: list[str], n: int, usual: int, what: str) -> list[str]:
    """``head``, then ``n`` of ``rows``; cut below its usual ``usual``, it says how many more there are."""
    more = len(rows) - n
    tail = [f"  ({more} more {what}: {_MORE})"] if n < usual and more > 0 else []
    return [*head, *rows[:n], *tail]


def format_text(facts: dict[str, Any], width: int = 100, features: tuple[Feature, ...] | None = None) -> str:
    """The summary's facts (:meth:`RunSummary.to_dict`) as one screen of text (the added features' lines with them).

    The frames torch left in eager come first: they are the costliest outcome, and the compile time alone reads
    like an improvement. A line cut to the width keeps its numbers: names are cut, never values. At most
    :data:`MAX_LINES` lines: where the blocks do not fit, the less useful ones give way first (the slowest compiles,
    the phases, the costliest frames, then the added features', the graph breaks' and the reasons' rows), each saying how
    many rows more the JSON and the page have, so that the frames that keep recompiling keep their place.
    """
    w = max(60, width)
    name_w = w - 42
    by_kind = ", ".join(f"{n} {k}" for k, n in facts["by_kind"].items())
    wall = facts["wall_s"]
    cpu = f", {facts['cpu_s']:.2f} s CPU" if facts.get("cpu_s") is not None else ""
    head = (
        f"torch.compile run summary ({facts['source']}): {facts['compiles']} compile{'' if facts['compiles'] == 1 else 's'}"
        + (f" ({by_kind})" if by_kind else "")
        + f", {wall:.2f} s compiling{cpu}"
    )
    if not facts["compiles"]:
        return "\n".join([head, "no compiles"]) + "\n"

    def fixed(lines: list[str]) -> _Block:  # a block that never gives way
        return _Block(lambda n: lines, 0, 0)

    blocks: list[_Block] = [fixed([head, *eager_lines(facts.get("eager_frames") or [], w, _row_where)])]

    phases = facts["phases"]

    def phase_lines(n: int) -> list[str]:
        out = [
            "",
            f"{'time by phase (self time: not in a sub-phase)':<{name_w}} {'count':>7} {'total s':>10} {'self s':>10} {'self %':>7}",
        ]
        for p in phases[:n]:
            pct = 100 * p["self_s"] / wall if wall else 0.0
            # more than the compile time: the phase ran on several threads at once (inductor's parallel kernel builds)
            tag = " (ran in parallel)" if pct > 100 else ""
            label = _cut(p["name"], name_w - 2 - len(tag)) + tag
            out.append(f"  {label:<{name_w - 2}} {p['count']:>7} {p['total_s']:>10.3f} {p['self_s']:>10.3f} {pct:>6.1f}%")
        if len(phases) > n:
            rest = phases[n:]
            self_rest = sum(p["self_s"] for p in rest)
            pct = 100 * self_rest / wall if wall else 0.0
            label = f"({len(rest)} more phases" + (f": {_MORE})" if n < 10 else ")")
            out.append(f"  {_cut(label, name_w - 2):<{name_w - 2}} {'':>7} {'':>10} {self_rest:>10.3f} {pct:>6.1f}%")
        self_sum = sum(p["self_s"] for p in phases)
        if wall and self_sum > wall * 1.005:  # parallel builds each count their own time: say so where the % stand
            out.append(f"  (self % adds up to {100 * self_sum / wall:.0f}%: builds that ran in parallel each count their time)")
        return out

    blocks.append(_Block(phase_lines, 10, 3, 2))
    frame_w = w - 22  # two columns beside it: a frame's name, file:line and call site get the rest of the width
    frame_rows = [
        f"  {cut_where(_row_where(f), frame_w - 2):<{frame_w - 2}} {f['compiles']:>8} {f['total_s']:>10.3f}"
        for f in facts["frames"]
    ]
    frames_head = ["", f"{'frames that cost most (compiles: with their backwards)':<{frame_w}} {'compiles':>8} {'total s':>10}"]
    blocks.append(_Block(lambda n: _rows_block(frames_head, frame_rows, n, 5, "frames"), 5, 2, 3))
    slow_rows = []
    for c in facts["slowest"]:
        mark = "  FAILED" if c["status"] == "error" else ""
        rank = f" rank {c['rank']}" if "rank" in c else ""
        slow_rows.append(
            f"  {c['duration_s']:>8.3f} s  {c['id']:<8} {c['kind']:<9} {cut_where(_row_where(c), w - 34 - len(rank) - len(mark))}{rank}{mark}"
        )
    blocks.append(_Block(lambda n: _rows_block(["", "slowest compiles"], slow_rows, n, 5, "compiles"), 5, 1, 1))
    rc = facts["recompiles"]
    cats = ", ".join(f"{k} {v}" for k, v in rc["by_category"].items())

    def reason_lines(n: int) -> list[str]:
        out = ["", f"recompiles: {rc['total']}" + (f" ({cats})" if cats else "")]
        for r in rc["top_reasons"][:n]:
            out.append(f"  {r['count']:>5}  {shorten_reason(r['category'] + ': ' + r['reason'], w - 9)}")
        rest = rc["top_reasons"][n:]
        if rest:  # the reasons past those shown: how many, and how many recompiles they account for
            more = rc["total"] - sum(r["count"] for r in rc["top_reasons"][:n])
            out.append(f"  {more:>5}  ({len(rest)} more reason{'s' if len(rest) > 1 else ''}: {_MORE})")
        said = rc.get("user_contexts") or []
        if said:  # the user's own hooks (torch's recompile_user_contexts): when in their run the recompiles came
            listed = ", ".join(f"{c['context']} ({c['count']})" for c in said[:5])
            out.append(cut_middle(f"  your recompile hooks said: {listed}" + (" ..." if len(said) > 5 else ""), w))
        return out

    blocks.append(_Block(reason_lines, 3, 1, 8))
    gb = facts["graph_breaks"]
    codes = ", ".join(f"{g['code']} {g['count']}" for g in gb["by_code"][:6])
    unhandled = gb.get("unhandled") or 0  # each is its compile's failure, counted there (docs/metrics.md)
    ending = gb.get("ends_frame") or 0
    gb_line = (
        f"graph breaks: {gb['total']}"
        + (f" ({codes})" if codes else "")
        + (f"; {ending} more ended their frame (the rest of the function ran in eager)" if ending else "")
        + (f"; {unhandled} not handled (their frames run in eager)" if unhandled else "")
    )

    def code_lines(n: int) -> list[str]:
        out = [gb_line]
        for g in gb["by_code"][:n]:
            out.append(f"  {g['count']:>5}  {_cut(g['code'] + ' ' + g['type'], w - 9)}")
        if len(gb["by_code"]) > n:
            more = gb["total"] - sum(g["count"] for g in gb["by_code"][:n])
            k = len(gb["by_code"]) - n
            out.append(f"  {more:>5}  ({k} more graph-break code{'s' if k > 1 else ''}: {_MORE})")
        return out

    blocks.append(_Block(code_lines, 3, 1, 6))
    ends = []
    for g in gb.get("ends_frame_by_location") or []:
        at = f" at {os.path.basename(str(g['file']))}:{g.get('line')}" if g.get("file") else ""
        ends.append(_cut(f"  {g['count']:>5}  {g['code']}{at} ended {g.get('frame')}: the rest of it ran in eager", w))
    blocks.append(
        _Block(lambda n: _rows_block([], ends, n, 2, "places a break ended its frame"), min(2, len(ends)), min(1, len(ends)), 7)
    )
    for feature in features_or_default(features):
        if feature.summary is not None:
            lines = feature.summary.text(facts, w)

            def feature_lines(n: int, lines: list[str] = lines) -> list[str]:
                return lines if n >= len(lines) else [*lines[: n - 1], f"  ({len(lines) - n + 1} more lines: {_MORE})"]

            blocks.append(_Block(feature_lines, len(lines), min(2, len(lines)), 4 if feature.summary.key == "graph_calls" else 5))
    fl = facts["failures"]
    types = ", ".join(f"{k} {v}" for k, v in fl["by_type"].items())
    # frames, where the summary lists them (an older summary has the compiles that left their frame in eager only)
    eager_frames = facts.get("eager_frames")
    n_eager = facts["eager_fallbacks"]
    in_eager = (
        f"frames left in eager: {len(eager_frames)}" + (f" ({n_eager} compiles)" if n_eager != len(eager_frames) else "")
        if isinstance(eager_frames, list)
        else f"compiles that left a frame in eager: {n_eager}"
    )
    tail = [
        f"failures: {fl['total']}"
        + (f" ({types})" if types else "")
        + f"; recompile-limit hits: {facts['recompile_limit_hits']}; {in_eager}"
    ]
    rt = facts.get("runtime") or {}
    if rt.get("records"):
        tail.append(f"after their compiles (autotuning, cudagraph set-up): {rt['records']} records, {rt['total_s']:.3f} s")
    blocks.append(fixed(tail))
    recompiling = facts.get("recompiling_frames") or []
    # the most useful block: the frames that keep recompiling, and their fix. The others give way to its first three
    # frames (at least its costliest); it then takes whatever room is left
    want = len(frame_lines(recompiling, w, 10**6, _row_where, most=3))
    least = len(frame_lines(recompiling, w, 0, _row_where))
    blocks.append(_Block(lambda n: frame_lines(recompiling, w, n, _row_where), want, least, 98))
    return "\n".join(_fit(blocks, MAX_LINES)) + "\n"


def _fit(blocks: list[_Block], max_lines: int) -> list[str]:
    """The blocks in at most ``max_lines`` lines: the block that gives way first loses a row at a time, down to its
    fewest, then the next (the last block last); the last block then takes whatever room is left. Where even the
    fewest do not fit, the screen runs longer: no block vanishes."""

    def total() -> int:
        return sum(len(b.render(b.n)) for b in blocks)

    for b in sorted((b for b in blocks if b.gives_way < 99), key=lambda b: b.gives_way):
        while b.n > b.least and total() > max_lines:
            b.n -= 1
    last = blocks[-1]
    last.n = max(last.n, max_lines - sum(len(b.render(b.n)) for b in blocks[:-1]))
    return [ln for b in blocks for ln in b.render(b.n)]


# -- several runs' summaries as one: a job's ranks, one summary each (TORCH_OTEL_SUMMARY=summary-{rank}.json) --------
# The summary's JSON has one owner, this module: what :meth:`RunSummary.to_dict` writes is declared here once more,
# with how it adds up over ranks, and tests/fast/test_summary_schema.py fails on a key written without a rule. A key
# that cannot add up (one run's picture, one run's time span) says why.


def _frame_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r.get("function"), basename(r.get("file")), r.get("line"), r.get("call_site"))


def _recompiling_frames(values: list[Any]) -> list[dict[str, Any]]:
    frames = rows(_frame_key, ("recompiles", "compiles", "limit_hits", "cost_s"))(values)
    by_cat: dict[tuple[Any, ...], dict[str, int]] = {}
    for part in values:
        for f in part or []:
            k = _frame_key(f)
            for c, n in (f.get("by_category") or {}).items():
                by_cat.setdefault(k, {})[c] = by_cat.setdefault(k, {}).get(c, 0) + int(num(n))
    keeps = {_frame_key(f) for part in values for f in part or [] if f.get("keeps_recompiling")}
    for f in frames:
        f["by_category"] = by_cat.get(_frame_key(f), {})
        if "keeps_recompiling" in f:  # on any rank
            f["keeps_recompiling"] = _frame_key(f) in keeps
    return sorted(frames, key=lambda f: -num(f.get("cost_s")))


def _slowest(values: list[Any]) -> list[dict[str, Any]]:
    kept = [dict(r) for v in values for r in v or [] if isinstance(r, Mapping)]
    return sorted(kept, key=lambda r: -num(r.get("duration_s")))[:SLOWEST]


# The summary's own keys; each added feature declares its part's (torch_otel._features: ``summary.merge``).
MERGE: dict[str, Merge] = {
    "schema_version": Merge(lambda values: SCHEMA_VERSION),
    "source": Merge(first),
    "compiles": Merge(sum_int),
    "by_kind": Merge(counts),
    "wall_s": Merge(sum_s),
    "cpu_s": Merge(sum_known_s),
    "cpu_child_processes_s": Merge(sum_known_s),
    "first_to_last_s": Merge(why="the ranks compiled at the same time: each run's span is its own"),
    "phases": Merge(rows(lambda r: r.get("name"), ("count", "total_s", "self_s"))),
    "frames": Merge(rows(_frame_key, ("compiles", "total_s"))),
    "slowest": Merge(_slowest),
    "recompiles": Merge(
        section={
            "total": Merge(sum_int),
            "by_category": Merge(counts),
            "top_reasons": Merge(rows(lambda r: (r.get("category"), r.get("reason")), ("count",))),
            "user_contexts": Merge(rows(lambda r: r.get("context"), ("count",)), when_all=True),
        }
    ),
    "graph_breaks": Merge(
        section={
            "total": Merge(sum_int),
            "unhandled": Merge(sum_int),
            "ends_frame": Merge(sum_int),
            "by_code": Merge(rows(lambda r: (r.get("code"), r.get("type")), ("count",))),
            "by_location": Merge(
                rows(lambda r: (r.get("code"), basename(r.get("file")), r.get("line"), r.get("frame")), ("count",)),
                when_all=True,
            ),
            "ends_frame_by_location": Merge(
                rows(lambda r: (r.get("code"), basename(r.get("file")), r.get("line"), r.get("frame")), ("count",)),
                when_all=True,
            ),
        }
    ),
    "cache": Merge(rows(lambda r: (r.get("cache"), r.get("location"), r.get("result")), ("count",))),
    "failures": Merge(
        section={
            "total": Merge(sum_int),
            "by_type": Merge(counts),
            "by_frame": Merge(
                rows(
                    lambda r: (r.get("type"), r.get("function"), basename(r.get("file")), r.get("line"), r.get("call_site")),
                    ("count",),
                ),
                when_all=True,
            ),
        }
    ),
    "recompile_limit_hits": Merge(sum_int),
    "eager_fallbacks": Merge(sum_int),
    "eager_frames": Merge(rows(_frame_key, ("compiles",)), when_all=True),
    "runtime": Merge(section={"records": Merge(sum_int), "total_s": Merge(sum_s)}),
    "tree": Merge(why="the picture of one run's slowest compiles"),
    "recompiling_frames": Merge(_recompiling_frames, when_all=True),
    "ranks": Merge(union),
    "torch_versions": Merge(union),
}


def merge_rules(features: tuple[Feature, ...] | None = None) -> dict[str, Merge]:
    """How every key of the summary adds up: :data:`MERGE`, and each added feature's part (its ``summary.merge``)."""
    return {**MERGE, **{k.summary.key: k.summary.merge for k in features_or_default(features) if k.summary is not None}}


def merge_summaries(parts: list[Mapping[str, Any]], features: tuple[Feature, ...] | None = None) -> dict[str, Any]:
    """Several runs' summaries (``to_dict()``, one per rank of a job) as one, key by key as :func:`merge_rules` say."""
    return merge_with(merge_rules(features), [p for p in parts if isinstance(p, Mapping)])


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

    def add(self, rec: CompileRecord, key: FrameKey, failed: str | None) -> None:
        for gb in rec.handled_graph_breaks:
            k = (graph_break_code(gb.gb_type, gb.reason), gb.gb_type or "", gb.filename, gb.lineno, key[0])
            if k in self.breaks or len(self.breaks) < MAX_LOCATIONS:
                self.breaks[k] += 1
        for gb in rec.frame_ending_graph_breaks:
            k = (graph_break_code(gb.gb_type, gb.reason), gb.gb_type or "", gb.filename, gb.lineno, key[0])
            if k in self.ending or len(self.ending) < MAX_LOCATIONS:
                self.ending[k] += 1
        self.eager.add(rec, key)
        if failed:
            f = (failed, *key)
            if f in self.failed or len(self.failed) < MAX_LOCATIONS:
                self.failed[f] += 1
        self.recompiling.add(rec, key)
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
