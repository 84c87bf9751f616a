"""Graph calls' part of the run summary (``graph_calls``): calls per compiled graph, compile seconds per call, the
compiles that never paid off; its text lines, and how it adds up over a job's ranks."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ..._core.frame_names import row_where
from ..._core.merge import Merge, basename, merge_with, num, sum_int, sum_s
from ..._core.text import cut
from ..._model.record import CompileRecord
from .calls import DEAD_CALLS, NAME, CompileCalls, compile_calls, earliest, latest
from .counters import MAX_GRAPHS

__all__ = ["AT_MOST", "MERGE", "CallsPart", "add_call_evidence", "compile_facts", "finish", "summary_text"]


AT_MOST = (0, 1, 10, 100)  # the run summary's shares: compile time in graphs that ran at most N times


MAX_COMPILES = MAX_GRAPHS  # compiles the part keeps
MAX_FRAMES = 50  # frames listed
MAX_FRAME_GRAPHS = 32  # graphs listed per frame
MAX_DEAD = 20  # compiles listed among those that never paid off


FrameKey = tuple[str, str | None, int | None, str | None]  # function, file, line, a library frame's call site
RowKey = tuple[str, str, int]  # compile id, kind, and which of the process's compiles of that id (torch's ids start
# again after torch._dynamo.reset(): two graphs 0/0, each a row of its own)


def _s(ns: float) -> float:
    return round(ns / 1e9, 6)


def _t(ns: int | None) -> float | None:
    return round(ns / 1e9, 3) if ns else None


def _frame_key(cc: CompileCalls) -> FrameKey:
    if cc.function is not None and cc.file is not None:
        return (cc.function, cc.file, cc.line, cc.called_from)
    return (f"({'torch.compile.backward' if cc.kind == 'backward' else 'torch.compile'})", None, None, None)


class CallsPart:
    """A run's compiles and the calls of their graphs, read when the summary is written (bounded)."""

    def __init__(self, max_compiles: int = MAX_COMPILES) -> None:
        self.max_compiles = max_compiles
        self.kept: list[CompileCalls] = []
        self.more = 0  # compiles with graphs past the bound

    def add(self, record: CompileRecord) -> None:
        cc = compile_calls(record)
        if cc is None:
            return
        if len(self.kept) < self.max_compiles:
            self.kept.append(cc)
        else:
            self.more += 1

    def to_dict(self, facts: Mapping[str, Any]) -> Any:
        known = [cc for cc in self.kept if cc.calls() is not None]
        if not known and not any(cc.uncounted for cc in self.kept):
            return None  # no compile of this run had its calls counted (replay, counting off, a trace without them)
        all_s = num(facts.get("wall_s"))
        rows: dict[RowKey, dict[str, Any]] = {}  # one per compile (and per backward compiled with its forward)
        frames: dict[FrameKey, list[RowKey]] = {}
        seen: dict[tuple[str, str], int] = {}  # each (id, kind): its compiles so far in this process

        def row(cid: str, kind: str, cc: CompileCalls) -> dict[str, Any]:
            n = seen[(cid, kind)] = seen.get((cid, kind), -1) + 1
            k = (cid, kind, n)
            r = rows[k] = {"id": cid, "kind": kind, "calls": 0, "compile_s": 0.0, "timed_calls": 0,
                           "run_s_total": 0.0, "first_call": None, "last_call": None}  # fmt: skip
            frames.setdefault(_frame_key(cc), []).append(k)
            return r

        for cc in known:
            r = row(cc.compile_id, cc.kind, cc)
            timed, run_ns = cc.timing()
            r["calls"] += cc.calls() or 0
            r["compile_s"] = round(r["compile_s"] + cc.compile_ns / 1e9, 6)
            r["timed_calls"] += timed
            r["run_s_total"] = round(r["run_s_total"] + run_ns / 1e9, 9)
            _dates(r, cc.first_ns(), cc.last_ns())
            b = cc.backward_calls()
            if b is not None:  # a backward compiled with its forward (dynamic shapes, or a cache that served both):
                # a graph of its own, as a lazily compiled one is; its compile time is in its forward's
                rb = row(cc.compile_id, "backward", cc)
                rb["calls"] += b
                rb["with_forward"] = True
                bt = [(g.timed_calls, g.run_ns) for g in cc.with_forward]
                rb["timed_calls"] += sum(t for t, _ in bt)
                rb["run_s_total"] = round(rb["run_s_total"] + sum(n for _, n in bt) / 1e9, 9)
                _dates(rb, earliest(cc.with_forward), latest(cc.with_forward))
        for r in rows.values():
            _finish_row(r)
        out_frames = []
        for (fn, path, line, site), keys in frames.items():
            graphs = [rows[k] for k in sorted(keys, key=lambda k: (k[2], *_id_order(k[0], k[1])))]  # a reset's after those before
            out_frames.append(
                {
                    "function": fn,
                    "file": path,
                    "line": line,
                    "call_site": site,
                    "compiles": len(graphs),
                    "calls": sum(r["calls"] for r in graphs if r["kind"] != "backward"),
                    "compile_s": round(sum(r["compile_s"] for r in graphs), 6),
                    "dead": sum(1 for r in graphs if r["calls"] <= DEAD_CALLS),
                    "dead_compile_s": round(sum(r["compile_s"] for r in graphs if r["calls"] <= DEAD_CALLS), 6),
                    "graphs": graphs[:MAX_FRAME_GRAPHS],
                    "more_graphs": max(0, len(graphs) - MAX_FRAME_GRAPHS),
                }
            )
        out_frames.sort(key=lambda f: (-f["compile_s"], str(f["function"])))
        dead = sorted((dict(r, **_where(frames, k)) for k, r in rows.items() if r["calls"] <= DEAD_CALLS),
                      key=lambda r: (-r["compile_s"], _id_order(r["id"], r["kind"])))  # fmt: skip
        return {
            "graphs": len(rows),
            "uncounted": sum(1 for cc in self.kept if cc.calls() is None) + self.more,
            "calls": sum(r["calls"] for r in rows.values()),
            "compile_s": round(sum(r["compile_s"] for r in rows.values()), 6),
            "ran_at_most": [_at_most(rows.values(), n, all_s) for n in AT_MOST],
            "dead": dead[:MAX_DEAD],
            "frames": out_frames[:MAX_FRAMES],
        }


def _dates(r: dict[str, Any], first_ns: int | None, last_ns: int | None) -> None:
    first, last = _t(first_ns), _t(last_ns)
    r["first_call"] = first if r["first_call"] is None or (first and first < r["first_call"]) else r["first_call"]
    r["last_call"] = last if r["last_call"] is None or (last and last > r["last_call"]) else r["last_call"]


def _where(frames: Mapping[FrameKey, list[RowKey]], k: RowKey) -> dict[str, Any]:
    for (fn, path, line, site), keys in frames.items():
        if k in keys:
            return {"function": fn, "file": path, "line": line, "call_site": site}
    return {}


def _id_order(cid: Any, kind: Any) -> tuple[Any, ...]:
    parts = [int(p) if p.isdigit() else p for p in str(cid).replace("!", "").split("/")]
    return (*[(0, p) if isinstance(p, int) else (1, p) for p in parts], 0 if kind == "frame" else 1, str(kind))


def _finish_row(r: dict[str, Any]) -> dict[str, Any]:
    """The per-call figures of a graph row, from its sums (after a merge too)."""
    n = int(num(r.get("calls")))
    # a backward compiled with its forward has no compile time of its own (it is in its forward's)
    r["compile_s_per_call"] = round(num(r.get("compile_s")) / n, 9) if n and not r.get("with_forward") else None
    timed = int(num(r.get("timed_calls")))
    r["run_s_mean"] = round(num(r.get("run_s_total")) / timed, 9) if timed else None
    return r


def _at_most(rows: Any, n: int, all_s: float) -> dict[str, Any]:
    picked = [r for r in rows if r["calls"] <= n]
    s = round(sum(r["compile_s"] for r in picked), 6)
    return {"calls": n, "compiles": len(picked), "compile_s": s, "of_compile_s": round(all_s, 6),
            "share": round(s / all_s, 4) if all_s else 0.0}  # fmt: skip


def _ids(rows: list[Mapping[str, Any]]) -> str:
    ids = [str(r["id"]) for r in rows]
    return ids[0] if len(ids) == 1 else f"{ids[0]} to {ids[-1]}" if len(ids) > 2 else " and ".join(ids)


def _per_call(s: float) -> str:
    """Seconds of compiling per call, always with a decimal point: two significant digits where they stay under a
    second (``0.13``, ``0.00004``, never ``4e-05``), tenths from there (``1.0``: 0.996 too, never ``1``)."""
    two = Decimal(f"{s:.2g}")
    return f"{s:.1f}" if two >= 1 else format(two, "f")


def summary_text(facts: Mapping[str, Any], width: int) -> list[str]:
    """The summary's lines: calls in all, the compiles that never paid off and their share, the frames that cost most."""
    c = facts.get(NAME)
    if not isinstance(c, Mapping) or not c.get("graphs"):
        return []
    at_most = {r["calls"]: r for r in c.get("ran_at_most") or []}
    once = at_most.get(1) or {}
    out = [
        f"graph calls: {c['graphs']} compiled graph{'s' if c['graphs'] != 1 else ''} ran {c['calls']:,} times; {once.get('compiles', 0)} ran at most once: "
        f"{num(once.get('compile_s')):.2f} s, {num(once.get('share')):.0%} of compile time"
    ]
    shares = " / ".join(f"{num(at_most[n].get('share')):.0%}" for n in AT_MOST if n in at_most)
    out.append(f"  share of compile time in graphs that ran at most {' / '.join(str(n) for n in AT_MOST)} times: {shares}")
    of_all = num((at_most.get(AT_MOST[-1]) or {}).get("of_compile_s"))
    rest = 1 - num(c.get("compile_s")) / of_all if of_all else 0.0
    if rest >= 0.01:  # the shares stop short of all (by 1% or more, as they print): say where the rest went
        out.append(
            cut(
                f"  the other {rest:.0%}: compiles with no graph counted (none installed, failed, past the counters' bound)",
                width,
            )
        )
    for f in (c.get("frames") or [])[:2]:
        graphs = [g for g in f.get("graphs") or [] if g.get("kind") != "backward"]
        dead = int(num(f.get("dead")))
        head = f"  {row_where(f)}: {f['compile_s']:.2f} s compiling" + (
            f", {dead} graph{'s' if dead != 1 else ''} ran at most once ({num(f.get('dead_compile_s')):.2f} s)" if dead else ""
        )
        listed = ", ".join(
            f"{g['id']} {g['calls']:,}" + (f" ({_per_call(g['compile_s_per_call'])})" if g.get("compile_s_per_call") else "")
            for g in graphs[:8]
        )
        more = len(graphs) - 8 + int(num(f.get("more_graphs")))
        out.append(cut(head, width))
        out.append(cut(f"    calls per graph (compile s per call): {listed}" + (f" (+{more} more)" if more > 0 else ""), width))
    return out


def _merge_frames(values: list[Any]) -> list[dict[str, Any]]:
    """Frames of several ranks' summaries as one: their graphs by id, calls and compile seconds added up."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in values:
        for f in part or []:
            if not isinstance(f, Mapping):
                continue
            k = (f.get("function"), basename(f.get("file")), f.get("line"), f.get("call_site"))
            m = merged.setdefault(k, {**dict(f), "graphs": [], "more_graphs": 0, "compiles": 0, "calls": 0,
                                      "compile_s": 0.0, "dead": 0, "dead_compile_s": 0.0})  # fmt: skip
            m["more_graphs"] += int(num(f.get("more_graphs")))
            by_id = {(g["id"], g["kind"]): g for g in m["graphs"]}
            for g in f.get("graphs") or []:
                gk = (g.get("id"), g.get("kind"))
                if gk in by_id:
                    _add_rows(by_id[gk], g)
                else:
                    by_id[gk] = dict(g)
                    m["graphs"].append(by_id[gk])
    out = []
    for m in merged.values():
        graphs = sorted((_finish_row(g) for g in m["graphs"]), key=lambda r: _id_order(r["id"], r["kind"]))
        m["graphs"] = graphs[:MAX_FRAME_GRAPHS]
        m["more_graphs"] += max(0, len(graphs) - MAX_FRAME_GRAPHS)
        m["compiles"] = len(graphs)
        m["calls"] = sum(int(num(g["calls"])) for g in graphs if g.get("kind") != "backward")
        m["compile_s"] = round(sum(num(g["compile_s"]) for g in graphs), 6)
        m["dead"] = sum(1 for g in graphs if num(g["calls"]) <= DEAD_CALLS)
        m["dead_compile_s"] = round(sum(num(g["compile_s"]) for g in graphs if num(g["calls"]) <= DEAD_CALLS), 6)
        out.append(m)
    return sorted(out, key=lambda f: (-f["compile_s"], str(f["function"])))[:MAX_FRAMES]


def _add_rows(into: dict[str, Any], g: Mapping[str, Any]) -> None:
    for k in ("calls", "timed_calls", "backward_calls"):
        if k in g or k in into:
            into[k] = int(num(into.get(k)) + num(g.get(k)))
    for k in ("compile_s", "run_s_total"):
        into[k] = round(num(into.get(k)) + num(g.get(k)), 9)
    firsts = [v for v in (into.get("first_call"), g.get("first_call")) if isinstance(v, (int, float))]
    lasts = [v for v in (into.get("last_call"), g.get("last_call")) if isinstance(v, (int, float))]
    into["first_call"] = min(firsts) if firsts else None
    into["last_call"] = max(lasts) if lasts else None


def _merge_at_most(values: list[Any]) -> list[dict[str, Any]]:
    by_n: dict[Any, dict[str, Any]] = {}
    for part in values:
        for r in part or []:
            if isinstance(r, Mapping):
                m = by_n.setdefault(
                    r.get("calls"), {"calls": r.get("calls"), "compiles": 0, "compile_s": 0.0, "of_compile_s": 0.0}
                )
                m["compiles"] += int(num(r.get("compiles")))
                m["compile_s"] = round(m["compile_s"] + num(r.get("compile_s")), 6)
                m["of_compile_s"] = round(m["of_compile_s"] + num(r.get("of_compile_s")), 6)
    for m in by_n.values():
        m["share"] = round(m["compile_s"] / m["of_compile_s"], 4) if m["of_compile_s"] else 0.0
    return [by_n[n] for n in sorted(by_n, key=lambda n: num(n))]


def _merge_dead(values: list[Any]) -> list[dict[str, Any]]:
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in values:
        for r in part or []:
            if not isinstance(r, Mapping):
                continue
            k = (r.get("id"), r.get("kind"), r.get("function"), basename(r.get("file")), r.get("line"), r.get("call_site"))
            if k in merged:
                _add_rows(merged[k], r)
            else:
                merged[k] = dict(r)
    rows = [_finish_row(r) for r in merged.values()]
    return sorted(rows, key=lambda r: (-num(r.get("compile_s")), _id_order(r.get("id"), r.get("kind"))))[:MAX_DEAD]


SECTION = {
    "graphs": Merge(sum_int),
    "uncounted": Merge(sum_int),
    "calls": Merge(sum_int),
    "compile_s": Merge(sum_s),
    "ran_at_most": Merge(_merge_at_most),
    "dead": Merge(_merge_dead),
    "frames": Merge(_merge_frames),
}


def _merge_part(values: list[Any]) -> dict[str, Any] | None:
    """The ranks' parts key by key; None when no rank counted its calls (a replayed job)."""
    parts = [v for v in values if isinstance(v, Mapping)]
    return merge_with(SECTION, parts) if parts else None


MERGE = Merge(_merge_part)


# -- what graph calls adds to the rest of the summary -----------------------------------------------------------------


def compile_facts(rec: CompileRecord) -> Any:
    """``calls`` of each compile the summary lists: how many times its graph ran, read when the summary is written
    (None: not known)."""
    cc = compile_calls(rec)
    return lambda: {"calls": cc.calls() if cc is not None else None}


def finish(doc: dict[str, Any]) -> None:
    """Each recompiling frame's evidence from its graphs' calls (a live run's summary)."""
    add_call_evidence(doc.get("recompiling_frames") or [], doc.get(NAME))


def add_call_evidence(frames: list[dict[str, Any]], graph_calls: Mapping[str, Any] | None) -> None:
    """Each recompiling frame's evidence from its graphs' calls (a live run's summary): the graphs that ran at most
    once, what compiling them cost, and the fix that would have saved it: ``frame["evidence"]``."""
    if not isinstance(graph_calls, Mapping):
        return
    by_frame = {
        (g.get("function"), basename(g.get("file")), g.get("line"), g.get("call_site")): g
        for g in graph_calls.get("frames") or []
        if isinstance(g, Mapping)
    }
    for f in frames:
        # a library's frame is its call site's (two models through one wrapper); the user's own code is one frame
        code = (f.get("function"), basename(f.get("file")), f.get("line"))
        calls = by_frame.get((*code, f.get("call_site"))) or by_frame.get((*code, None))
        graphs = [g for g in (calls or {}).get("graphs") or [] if isinstance(g, Mapping) and g.get("kind") == "frame"]
        once = [g for g in graphs if isinstance(g.get("calls"), int) and g["calls"] <= 1]
        if not once:
            continue
        ids = [str(g.get("id")) for g in once]
        named = _named(ids)
        cost = sum(float(g.get("compile_s") or 0) for g in once)
        fixes = [h for h in f.get("hints") or f.get("fixes") or [] if isinstance(h, Mapping) and h.get("fix")]
        line = (
            f"graph{'s' if len(ids) > 1 else ''} {named} ran {'at most once each' if len(ids) > 1 else 'at most once'} "
            f"and cost {cost:.2f} s of compiling" + (f": {fixes[0]['fix']} would have saved it" if fixes else "")
        )
        f["evidence"] = {"ran_once": len(ids), "of": len(graphs), "ids": ids[:64], "compile_s": round(cost, 6), "line": line}


def _named(ids: list[str]) -> str:
    """``0/1``, ``0/1 and 0/3``, ``0/1 to 0/7`` (every graph between), or ``0/1, 0/3, 0/5`` (at most 4 named)."""
    if len(ids) <= 2:
        return " and ".join(ids)
    try:
        numbers = [int(i.rsplit("/", 1)[1]) for i in ids]
        frames = {i.rsplit("/", 1)[0] for i in ids}
    except (IndexError, ValueError):
        numbers, frames = [], set()
    if len(frames) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{ids[0]} to {ids[-1]}"
    return ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
