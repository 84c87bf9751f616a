"""``torch-otel diff``: what changed between two runs' compiles, fact by fact.

Each side is a run summary's facts (:meth:`torch_otel._sinks.summary.RunSummary.to_dict`), whatever it was read from
(a ``TORCH_TRACE`` log or directory, a summary's JSON, an OTLP-JSON traces file: :mod:`torch_otel._pipeline.diff_command`),
and, for a job of several ranks, one per rank. :func:`compare` matches frames by function and code location
(compile ids shift when code changes), and says per frame and phase what the compile time did, which graph breaks,
recompile categories, failures and recompile-limit hits are new or gone, and how the caches changed, with the cause
of each new miss; the gate (torch_otel._analysis.diff_gate) turns that into an exit status for CI (docs/diff.md), and
diff_text puts it on one screen.

Everything here reads plain dicts: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.frame_names import match, row_where
from .._core.merge import basename as _base
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._features.views import DiffView
from .diff_gate import EXIT_GATE_FAILED, EXIT_OK, Gate, flags

__all__ = ["SCHEMA_VERSION", "Side", "compare", "compare_summaries", "ranks_text"]
SCHEMA_VERSION = 1  # of the diff's own JSON (new keys may come; a key that changes meaning is a new version)


@dataclass
class Side:
    """One side of the diff: where it came from, the run's facts, and each rank's (empty: the side says no ranks)."""

    path: str
    form: str  # what it was read from: "TORCH_TRACE log", "TORCH_TRACE directory", "run summary", ...
    summary: dict[str, Any]
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what this form cannot say

    def describe(self) -> str:
        s = self.summary
        versions = ", ".join(s.get("torch_versions") or [])
        ranks = sorted(self.ranks) or list(s.get("ranks") or [])
        who = f"{len(ranks)} ranks" if len(ranks) > 1 else f"rank {ranks[0]}" if ranks else ""
        parts = [self.form, f"{s.get('compiles', 0)} compiles", who, f"torch {versions}" if versions else ""]
        return ", ".join(p for p in parts if p)


# -- comparing two runs' facts -------------------------------------------------------------------------------------


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _pct(base: float, new: float) -> float | None:
    return None if base <= 0 else round(100.0 * (new - base) / base, 1)


def _frames(s: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for f in s.get("frames") or [] if isinstance(f, Mapping)]


def _compare_frames(b: Mapping[str, Any], n: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for fb, fn in match(_frames(b), _frames(n)):
        ref = fn or fb
        assert ref is not None
        bs, ns = _num((fb or {}).get("total_s")), _num((fn or {}).get("total_s"))
        out.append(
            {
                "function": ref.get("function"),
                "file": ref.get("file"),
                "line": ref.get("line"),
                "call_site": ref.get("call_site"),
                "base_line": (fb or {}).get("line"),
                "base_compiles": int(_num((fb or {}).get("compiles"))),
                "new_compiles": int(_num((fn or {}).get("compiles"))),
                "base_s": round(bs, 6),
                "new_s": round(ns, 6),
                "change_s": round(ns - bs, 6),
                "change_pct": _pct(bs, ns),
                "status": "new" if fb is None else "gone" if fn is None else "both",
            }
        )
    out.sort(key=lambda f: (-abs(_num(f["change_s"])), str(f["function"])))
    return out


def _compare_phases(b: Mapping[str, Any], n: Mapping[str, Any]) -> list[dict[str, Any]]:
    pb = {p["name"]: p for p in b.get("phases") or [] if isinstance(p, Mapping) and "name" in p}
    pn = {p["name"]: p for p in n.get("phases") or [] if isinstance(p, Mapping) and "name" in p}
    out = []
    for name in set(pb) | set(pn):
        bs, ns = _num(pb.get(name, {}).get("self_s")), _num(pn.get(name, {}).get("self_s"))
        out.append(
            {
                "name": name,
                "base_self_s": round(bs, 6),
                "new_self_s": round(ns, 6),
                "change_s": round(ns - bs, 6),
                "base_count": int(_num(pb.get(name, {}).get("count"))),
                "new_count": int(_num(pn.get(name, {}).get("count"))),
            }
        )
    out.sort(key=lambda p: (-abs(p["change_s"]), p["name"]))
    return out


def _compare_graph_breaks(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    gb, gn = b.get("graph_breaks") or {}, n.get("graph_breaks") or {}
    out: dict[str, Any] = {
        "base_total": int(_num(gb.get("total"))),
        "new_total": int(_num(gn.get("total"))),
        # the two kinds torch does not count in counters["graph_break"]: one it could not handle (its frame runs in
        # eager), one it could not resume after (the rest of the function ran in eager)
        "unhandled": {"base": int(_num(gb.get("unhandled"))), "new": int(_num(gn.get("unhandled")))},
        "ends_frame": {"base": int(_num(gb.get("ends_frame"))), "new": int(_num(gn.get("ends_frame")))},
        "new_ends_frame": [],
    }
    eb, en = gb.get("ends_frame_by_location"), gn.get("ends_frame_by_location")
    if isinstance(en, list):
        for x, y in match(eb if isinstance(eb, list) else [], en, fn="code", path="file", line="line"):
            if y is not None and (x is None or _num(y.get("count")) > _num(x.get("count"))):
                out["new_ends_frame"].append({**y, "count": int(_num(y.get("count")) - _num((x or {}).get("count")))})
    lb, ln = gb.get("by_location"), gn.get("by_location")
    if isinstance(lb, list) and isinstance(ln, list):  # by code and location
        new, gone, moved = [], [], []
        for x, y in match(lb, ln, fn="code", path="file", line="line"):
            if x is None and y is not None:
                new.append(dict(y))
            elif y is None and x is not None:
                gone.append(dict(x))
            elif x is not None and y is not None:
                if x.get("line") != y.get("line"):
                    moved.append({**y, "base_line": x.get("line")})
                if _num(y.get("count")) > _num(x.get("count")):
                    new.append({**y, "count": int(_num(y.get("count")) - _num(x.get("count"))), "more": True})
        out.update(new=new, gone=gone, moved=moved, by="location")
        return out
    cb = {(c.get("code"), c.get("type")): int(_num(c.get("count"))) for c in gb.get("by_code") or []}
    cn = {(c.get("code"), c.get("type")): int(_num(c.get("count"))) for c in gn.get("by_code") or []}
    out.update(
        new=[{"code": k[0], "type": k[1], "file": None, "line": None, "count": v} for k, v in cn.items() if k not in cb],
        gone=[{"code": k[0], "type": k[1], "file": None, "line": None, "count": v} for k, v in cb.items() if k not in cn],
        moved=[],
        by="code",  # a summary without locations (an older torch-otel's)
    )
    return out


def _recompiling(s: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    r = s.get("recompiling_frames")
    return [f for f in r if isinstance(f, Mapping)] if isinstance(r, list) else None


def _compare_recompiles(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    rb, rn = b.get("recompiles") or {}, n.get("recompiles") or {}
    cb, cn = rb.get("by_category") or {}, rn.get("by_category") or {}
    reasons_n = [r for r in rn.get("top_reasons") or [] if isinstance(r, Mapping)]
    reasons_b = [r for r in rb.get("top_reasons") or [] if isinstance(r, Mapping)]
    out: dict[str, Any] = {
        "base_total": int(_num(rb.get("total"))),
        "new_total": int(_num(rn.get("total"))),
        "by_category": {c: {"base": int(_num(cb.get(c))), "new": int(_num(cn.get(c)))} for c in sorted(set(cb) | set(cn))},
    }
    fb, fn = _recompiling(b), _recompiling(n)
    new: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    if fb is not None and fn is not None:  # per frame: a category this frame did not recompile for before
        for x, y in match(fb, fn):
            xc = (x or {}).get("by_category") or {}
            yc = (y or {}).get("by_category") or {}
            ref = y or x
            assert ref is not None
            label = row_where(ref)
            for c, k in yc.items():
                if c not in xc:
                    top = [r for r in (y or {}).get("top_reasons") or [] if r.get("category") == c]
                    new.append(
                        {"category": c, "frame": label, "count": int(_num(k)), "reasons": [r.get("reason") for r in top[:3]]}
                    )
            for c, k in xc.items():
                if c not in yc:
                    gone.append({"category": c, "frame": label, "count": int(_num(k)), "reasons": []})
        out["by"] = "frame"
    else:
        for c, k in cn.items():
            if c not in cb:
                new.append(
                    {
                        "category": c,
                        "frame": None,
                        "count": int(_num(k)),
                        "reasons": [r.get("reason") for r in reasons_n if r.get("category") == c][:3],
                    }
                )
        for c, k in cb.items():
            if c not in cn:
                gone.append(
                    {
                        "category": c,
                        "frame": None,
                        "count": int(_num(k)),
                        "reasons": [r.get("reason") for r in reasons_b if r.get("category") == c][:3],
                    }
                )
        out["by"] = "run"
    out["new"], out["gone"] = new, gone
    return out


def _compare_failures(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    fb, fn = b.get("failures") or {}, n.get("failures") or {}
    out: dict[str, Any] = {"base_total": int(_num(fb.get("total"))), "new_total": int(_num(fn.get("total")))}
    lb, ln = fb.get("by_frame"), fn.get("by_frame")
    if isinstance(lb, list) and isinstance(ln, list):
        seen = {(x.get("type"), x.get("function"), _base(x.get("file"))) for x in lb if isinstance(x, Mapping)}
        out["new"] = [
            dict(y) for y in ln if isinstance(y, Mapping) and (y.get("type"), y.get("function"), _base(y.get("file"))) not in seen
        ]
    else:
        tb = fb.get("by_type") or {}
        out["new"] = [
            {"type": t, "function": None, "file": None, "line": None, "count": k}
            for t, k in (fn.get("by_type") or {}).items()
            if t not in tb
        ]
    # recompile-limit hits, by frame where the summaries say (else by count)
    rb, rn = _recompiling(b), _recompiling(n)
    hits: list[dict[str, Any]] = []
    if rb is not None and rn is not None:
        for x, y in match(rb, rn):
            if y is not None and _num(y.get("limit_hits")) > 0 and (x is None or _num(x.get("limit_hits")) == 0):
                hits.append({"frame": row_where(y), "count": int(_num(y.get("limit_hits")))})
    elif _num(n.get("recompile_limit_hits")) > _num(b.get("recompile_limit_hits")):
        hits.append({"frame": None, "count": int(_num(n.get("recompile_limit_hits")) - _num(b.get("recompile_limit_hits")))})
    out["limit_hits"] = {
        "base": int(_num(b.get("recompile_limit_hits"))),
        "new": int(_num(n.get("recompile_limit_hits"))),
        "new_frames": hits,
    }
    return out


def _compare_recompiling_frames(b: Mapping[str, Any], n: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The new side's frames that recompiled, the costliest first, each with its base's count: the facts and hints."""
    rb, rn = _recompiling(b) or [], _recompiling(n) or []
    out = []
    for x, y in match(rb, rn):
        if y is None:
            continue
        out.append(
            {**y, "base_recompiles": int(_num((x or {}).get("recompiles"))), "base_limit_status": (x or {}).get("limit_status")}
        )
    out.sort(key=lambda f: (-_num(f.get("cost_s")), -(f.get("recompiles") or 0) + f["base_recompiles"], str(f.get("function"))))
    return out


def _eager(s: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    r = s.get("eager_frames")
    return [f for f in r if isinstance(f, Mapping)] if isinstance(r, list) else None


def _compare_eager(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    """The frames torch left in eager on each side: those new (the costliest news a diff can bring: the frame runs
    uncompiled, and its compile time is gone) and those gone."""
    eb, en = _eager(b), _eager(n)
    out: dict[str, Any] = {
        "base": len(eb) if eb is not None else None,
        "new": len(en) if en is not None else None,
        "base_compiles": int(_num(b.get("eager_fallbacks"))),
        "new_compiles": int(_num(n.get("eager_fallbacks"))),
        "new_frames": [],
        "gone_frames": [],
    }
    if en is None:
        return out
    for x, y in match(eb or [], en):
        if y is not None and x is None:
            out["new_frames"].append(dict(y))
        elif x is not None and y is None and eb is not None:
            out["gone_frames"].append(dict(x))
    return out


def compare_summaries(b: Mapping[str, Any], n: Mapping[str, Any], features: tuple[Feature, ...] | None = None) -> dict[str, Any]:
    """Every fact the diff shows, of two run summaries (``RunSummary.to_dict()``): the record's own, then each feature's
    comparison (``DiffView``), after them or before the one it names."""
    bs, ns = _num(b.get("wall_s")), _num(n.get("wall_s"))
    own: dict[str, Any] = {
        "total": {
            "base_s": round(bs, 6),
            "new_s": round(ns, 6),
            "change_s": round(ns - bs, 6),
            "change_pct": _pct(bs, ns),
            "base_compiles": int(_num(b.get("compiles"))),
            "new_compiles": int(_num(n.get("compiles"))),
        },
        "frames": _compare_frames(b, n),
        "phases": _compare_phases(b, n),
        "graph_breaks": _compare_graph_breaks(b, n),
        "recompiles": _compare_recompiles(b, n),
        "failures": _compare_failures(b, n),
        "eager_frames": _compare_eager(b, n),
        "recompiling_frames": _compare_recompiling_frames(b, n),
    }
    for view in _views(features):
        own = _placed(own, view.key, view.compare(b, n), view.before)
    return own


def _views(features: tuple[Feature, ...] | None) -> list[DiffView]:
    return [f.diff for f in features_or_default(features) if f.diff is not None]


def _placed(d: dict[str, Any], key: str, value: Any, before: str | None) -> dict[str, Any]:
    """``d`` with ``key`` added before the key ``before`` (at the end where it has none)."""
    if before is None or before not in d:
        d[key] = value
        return d
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k == before:
            out[key] = value
        out[k] = v
    return out


def compare(base: Side, new: Side, gate: Gate | None = None, features: tuple[Feature, ...] | None = None) -> dict[str, Any]:
    """The diff's facts: both sides, what is compared and what not, the run's changes, each rank's, the gate."""
    gate = gate or Gate()
    compared: list[str] = []
    b_sum, n_sum = base.summary, new.summary
    rb, rn = sorted(base.ranks), sorted(new.ranks)
    per_rank: dict[int, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
    if len(rb) > 1 and len(rn) > 1:
        common = sorted(set(rb) & set(rn))
        per_rank = {r: (base.ranks[r], new.ranks[r]) for r in common}
        if set(rb) != set(rn):
            compared.append(
                f"base has {len(rb)} ranks ({ranks_text(rb)}), new has {len(rn)} ({ranks_text(rn)}): ranks {ranks_text(common) or 'none'} "
                "are compared one to one; the totals cover each side's ranks"
            )
    elif len(rb) > 1 or len(rn) > 1:  # one process against a job: against the job's rank of the same number
        single, many, single_side = (base, new, "base") if len(rn) > 1 else (new, base, "new")
        own = sorted(single.ranks) or list(single.summary.get("ranks") or []) or [0]
        r = own[0]
        if r in many.ranks:
            other = sorted(set(many.ranks) - {r})
            compared.append(
                f"{single_side} is one process (rank {r}), the other side {len(many.ranks)} ranks: comparing with its rank {r}; "
                f"ranks {ranks_text(other)} are not compared"
            )
            if single_side == "base":
                n_sum = many.ranks[r]
            else:
                b_sum = many.ranks[r]
        else:
            compared.append(
                f"{single_side} is one process (rank {r}), the other side {len(many.ranks)} ranks without a rank {r}: "
                "the totals compare one process against the whole job; no rank is compared"
            )
    for side, name in ((base, "base"), (new, "new")):
        for note in side.notes:
            compared.append(f"{name}: {note}")
    vb, vn = set(b_sum.get("torch_versions") or []), set(n_sum.get("torch_versions") or [])
    if vb and vn and vb != vn:
        compared.append(
            f"torch releases differ ({', '.join(sorted(vb))} -> {', '.join(sorted(vn))}): compile times, phases and cache "
            "keys change with the release; every fact is compared, the cause of a cache miss names the version"
        )
    for view in _views(features):  # what a feature says it cannot compare
        if view.notes is not None:
            compared.extend(view.notes(b_sum, n_sum))
    facts = compare_summaries(b_sum, n_sum, features)
    facts["flags"] = flags(facts, gate, features)
    ranks_out: dict[str, Any] = {}
    if per_rank:
        changed = []
        rows = []
        for r, (x, y) in sorted(per_rank.items()):
            rf = compare_summaries(x, y, features)
            fl = flags(rf, gate, features)
            rows.append(
                {
                    "rank": r,
                    "total": rf["total"],
                    "flags": fl,
                    "graph_breaks": {k: rf["graph_breaks"][k] for k in ("new", "gone", "base_total", "new_total")},
                    "recompiles": {k: rf["recompiles"][k] for k in ("new", "gone", "base_total", "new_total")},
                    "failures": {"new": rf["failures"]["new"], "limit_hits": rf["failures"]["limit_hits"]},
                    # each feature's part of a rank's row (the caches': hit rates and new misses)
                    **{v.key: v.per_rank(rf[v.key]) for v in _views(features) if v.per_rank is not None},
                }
            )
            if fl:
                changed.append(r)
        ranks_out = {
            "base": rb,
            "new": rn,
            "compared": sorted(per_rank),
            "only_base": sorted(set(rb) - set(rn)),
            "only_new": sorted(set(rn) - set(rb)),
            "changed": changed,
            "per_rank": rows,
        }
    failed: list[dict[str, str]] = []
    if gate.conditions:
        # a rank's own changes name the rank; the run's time is the run's (each rank's is part of it)
        by_rank: dict[str, tuple[str, list[int]]] = {}
        for row in ranks_out.get("per_rank", []):
            for f in row["flags"]:
                if f["kind"] != "time":
                    by_rank.setdefault(f["text"], (f["kind"], []))[1].append(row["rank"])
        for f in facts["flags"]:
            rs = by_rank.pop(f["text"], (f["kind"], []))[1]
            failed.append({**f, "text": f["text"] + (f" (rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)})" if rs else "")})
        for text, (kind, rs) in by_rank.items():
            failed.append({"kind": kind, "text": f"rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)}: {text}"})
    return {
        "schema_version": SCHEMA_VERSION,
        "base": {
            "path": base.path,
            "form": base.form,
            "describe": base.describe(),
            "ranks": rb or list(base.summary.get("ranks") or []),
        },
        "new": {
            "path": new.path,
            "form": new.form,
            "describe": new.describe(),
            "ranks": rn or list(new.summary.get("ranks") or []),
        },
        "compared": compared,
        **facts,
        "ranks": ranks_out,
        "gate": {
            "conditions": gate.describe(),
            "failed": failed,
            "passed": not failed,
            "exit": EXIT_GATE_FAILED if failed else EXIT_OK,
        }
        if gate.conditions
        else None,
    }


def ranks_text(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    if not rs:
        return ""
    out, start, prev = [], rs[0], rs[0]
    for r in [*rs[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(out)
