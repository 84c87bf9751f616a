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
from .caches import CLASSES
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


def _compare_cache(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    cb, cn = b.get("caches") or {}, n.get("caches") or {}
    rates: dict[str, Any] = {}
    hb, hn = cb.get("hit_rate") or {}, cn.get("hit_rate") or {}
    byp_b, byp_n = _bypassed(cb), _bypassed(cn)
    for cache in sorted(set(hb) | set(hn) | set(byp_b) | set(byp_n)):
        x, y = hb.get(cache), hn.get(cache)
        rates[cache] = {
            "base": None if x is None else _num(x.get("rate")),
            "new": None if y is None else _num(y.get("rate")),
            "base_lookups": 0 if x is None else int(_num(x.get("hits")) + _num(x.get("misses"))),
            "new_lookups": 0 if y is None else int(_num(y.get("hits")) + _num(y.get("misses"))),
            "base_hits": 0 if x is None else int(_num(x.get("hits"))),
            "base_bypasses": byp_b.get(cache, 0),
            "new_bypasses": byp_n.get(cache, 0),
        }
    kb, kn = _keys(cb), _keys(cn)
    by_keys = kb is not None and kn is not None
    new_misses = _new_misses_by_key(cb, cn, kb, kn) if kb is not None and kn is not None else _new_misses_by_count(cb, cn)
    return {
        "hit_rate": rates,
        "misses": {"base": int(_num(cb.get("misses"))), "new": int(_num(cn.get("misses")))},
        "new_misses": new_misses,
        "new_misses_by": "key" if by_keys else "count",
        "new_bypasses": _new_bypasses(cb, cn),
    }


def _bypassed(c: Mapping[str, Any]) -> dict[str, int]:
    """A side's bypassed lookups per cache: its summary's reasons, else the lookups it logged."""
    out: dict[str, int] = {}
    rows = [r for r in c.get("bypasses") or [] if isinstance(r, Mapping)]
    if not rows:
        rows = [r for r in c.get("lookups") or [] if isinstance(r, Mapping) and r.get("result") == "bypass"]
    for r in rows:
        out[str(r.get("cache"))] = out.get(str(r.get("cache")), 0) + int(_num(r.get("count")))
    return out


def _new_bypasses(cb: Mapping[str, Any], cn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Bypass reasons (torch's words) the new side has more of than the base."""
    rb = {
        (r.get("cache"), r.get("reason")): int(_num(r.get("count"))) for r in cb.get("bypasses") or [] if isinstance(r, Mapping)
    }
    out = []
    for r in cn.get("bypasses") or []:
        if not isinstance(r, Mapping):
            continue
        k, was = (r.get("cache"), r.get("reason")), rb.get((r.get("cache"), r.get("reason")), 0)
        if int(_num(r.get("count"))) > was:
            out.append(
                {"cache": k[0], "reason": k[1], "category": r.get("category"), "base": was, "new": int(_num(r.get("count")))}
            )
    return out


def _keys(c: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """A side's lookups with their keys; None where its summary has none to compare (an older torch-otel's) or left
    some out (past its bound)."""
    k = c.get("keys")
    if not isinstance(k, list) or _num(c.get("keys_left_out")) > 0:
        return None
    return [r for r in k if isinstance(r, Mapping)]


def _slot(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """The graph a lookup is of: its cache, its frame (the compile id without the compile's number) and its pass."""
    return (r.get("cache"), _frame_of(r), r.get("pass"))


def _frame_of(r: Mapping[str, Any]) -> str:
    cid = str(r.get("id") or "")
    return cid.rsplit("/", 1)[0] if "/" in cid else cid


# A new miss's cause against the base, where the keys say it (docs/diff.md): the base hit it, or never looked the graph up
_BASE_SAYS = {
    "not_in_cache": "the base run hit the same key: this run's cache did not have it (a new or cleared cache directory, "
    "another node's local cache, an evicted entry)",
    "first_seen": "the base run did not look this graph up",
}


def _parts(r: Mapping[str, Any]) -> Mapping[str, Any] | None:
    p = r.get("parts")
    return p if isinstance(p, Mapping) and p else None


def _changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """The classes of part that differ between two keys of one graph (their ``parts``: hashes per class), most
    telling first; the graph's code first where its tensor inputs changed in number (a graph break shortened it)."""
    a, b = _parts(old) or {}, _parts(new) or {}
    changed = [c for c in CLASSES if a.get(c) != b.get(c)]
    if "graph" in changed and a.get("tensors") != b.get("tensors") and changed[0] == "inputs":
        changed.remove("graph")
        changed.insert(0, "graph")
    return changed


def _causes_against(kb: list[Mapping[str, Any]], kn: list[Mapping[str, Any]]) -> dict[int, str]:
    """Each new miss (index into ``kn``) the base did not miss, with its cause against the base, from the keys alone:
    the same whether each side came from a log, a summary or a traces file.

    - ``not_in_cache``: the base hit the same key;
    - ``first_seen``: the base never looked that graph up (an FX graph inside an AOTAutograd hit was looked up);
    - else the class of part that changed against the base's nearest key of that graph (a hash per class each side
      keeps), as a run explains its own misses: autocast (in an AOTAutograd key) leads the FX graphs it changed; a
      backward whose forward's code changed leads with its code; an AOTAutograd key with no parts listed takes its
      FX graphs' cause, else its own side's; ``other`` where nothing says."""
    missed = {(r.get("cache"), r.get("key")) for r in kb if r.get("result") == "miss"}
    hit = {(r.get("cache"), r.get("key")) for r in kb if r.get("result") == "hit"}
    by_slot: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    aot_frames = set()
    for r in kb:
        if r.get("result") in ("hit", "miss"):
            by_slot.setdefault(_slot(r), []).append(r)
            if r.get("cache") == "aot_autograd":
                aot_frames.add((r.get("rank"), _frame_of(r)))
    out: dict[int, str] = {}
    pending: list[int] = []
    for i, r in enumerate(kn):
        k = (r.get("cache"), r.get("key"))
        if r.get("result") != "miss" or k in missed:
            continue
        if k in hit:
            out[i] = "not_in_cache"
            continue
        olds = by_slot.get(_slot(r), [])
        inside_aot = r.get("cache") == "fx_graph" and any(f == _frame_of(r) for _, f in aot_frames)
        if not olds and not inside_aot:
            out[i] = "first_seen"
            continue
        with_parts = [o for o in olds if _parts(o)]
        if _parts(r) and with_parts:
            nearest = min(with_parts, key=lambda o: len(_changed(r, o)))
            changed = _changed(r, nearest)
            autocast = (_parts(nearest) or {}).get("autocast") != (_parts(r) or {}).get("autocast")
            out[i] = "config" if autocast and r.get("cache") == "aot_autograd" else changed[0] if changed else "other"
        else:
            pending.append(i)
    # by compile (rank and id): autocast in its AOTAutograd key leads its FX graphs; a backward follows its forward's
    # changed code; an AOTAutograd key with no parts takes its FX graphs' cause
    compile_of = {i: (kn[i].get("rank"), kn[i].get("id")) for i in out}
    aot_config = {c for i, c in compile_of.items() if kn[i].get("cache") == "aot_autograd" and out[i] == "config"}
    forward_graph = {c for i, c in compile_of.items() if kn[i].get("pass") == "forward" and out[i] == "graph"}
    for i, c in compile_of.items():
        r = kn[i]
        if r.get("cache") == "fx_graph" and c in aot_config and out[i] in ("graph", "inputs"):
            out[i] = "config"
        elif r.get("pass") == "backward" and c in forward_graph and out[i] == "inputs":
            out[i] = "graph"
    for i in pending:
        r = kn[i]
        c = (r.get("rank"), r.get("id"))
        fx = [out[j] for j, cj in compile_of.items() if cj == c and kn[j].get("cache") == "fx_graph"]
        own = str(r.get("cause") or "other")
        out[i] = fx[0] if fx else own if own in CLASSES else "other"
    return out


def _new_misses_by_key(
    cb: Mapping[str, Any], cn: Mapping[str, Any], kb: list[Mapping[str, Any]], kn: list[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The new side's misses of keys the base did not miss, each with its cause against the base
    (:func:`_causes_against`); ``base``: the base's misses of the same graphs (with other keys)."""
    causes = _causes_against(kb, kn)
    found: dict[tuple[str, str], list[int]] = {}
    for i, cause in causes.items():
        found.setdefault((str(kn[i].get("cache")), cause), []).append(i)
    reasons_b = {(r.get("cache"), r.get("reason")) for r in cb.get("top_reasons") or []}
    out = []
    for (cache, cause), idx in sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        slots = {_slot(kn[i]) for i in idx}
        base = sum(1 for r in kb if r.get("result") == "miss" and _slot(r) in slots)
        if cause in _BASE_SAYS:
            why = [_BASE_SAYS[cause]]
        else:  # the new run's own words for its misses of this cache (against what it compared with), its cause's first
            own = [
                r
                for r in cn.get("top_reasons") or []
                if r.get("cache") == cache and (r.get("cache"), r.get("reason")) not in reasons_b
            ]
            why = [str(r.get("reason")) for r in sorted(own, key=lambda r: _reason_cause(r) != cause)][:3] or [
                f"its {cause} parts differ from the base run's key of this graph"
            ]
        out.append({"cache": cache, "cause": cause, "base": base, "new": len(idx), "reasons": why})
    return out


def _new_misses_by_count(cb: Mapping[str, Any], cn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A side without keys (a summary of an older torch-otel): misses by cache and cause that grew."""
    mb = {(m.get("cache"), m.get("cause")): int(_num(m.get("count"))) for m in cb.get("misses_by_cache_and_cause") or []}
    mn = {(m.get("cache"), m.get("cause")): int(_num(m.get("count"))) for m in cn.get("misses_by_cache_and_cause") or []}
    reasons_b = {(r.get("cache"), r.get("reason")) for r in cb.get("top_reasons") or []}
    new_misses = []
    for (cache, cause), k in sorted(mn.items(), key=lambda kv: -kv[1]):
        if k > mb.get((cache, cause), 0):
            why = [
                r.get("reason")
                for r in cn.get("top_reasons") or []
                if r.get("cache") == cache
                and _reason_cause(r) in (cause, "changed" if cause not in ("first_seen", "not_in_cache") else None)
                and (r.get("cache"), r.get("reason")) not in reasons_b
            ]
            new_misses.append({"cache": cache, "cause": cause, "base": mb.get((cache, cause), 0), "new": k, "reasons": why[:3]})
    return new_misses


def _reason_cause(r: Mapping[str, Any]) -> str:
    """A miss reason's cause: the row's own (``cause``), else, for a summary of an older torch-otel, what its words
    say: the two causes that have fixed words, else ``changed`` (one of the classes of a changed part)."""
    cause = r.get("cause")
    if isinstance(cause, str):
        return cause
    text = str(r.get("reason") or "")
    return (
        "first_seen" if text.startswith("first seen") else "not_in_cache" if text.startswith("not in this cache") else "changed"
    )


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


def _graph_calls(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    c = s.get("graph_calls")
    return c if isinstance(c, Mapping) else None


def _once(c: Mapping[str, Any]) -> Mapping[str, Any]:
    """The graphs that ran at most once (the call that compiled them), and their compile seconds."""
    return next((r for r in c.get("ran_at_most") or [] if isinstance(r, Mapping) and r.get("calls") == 1), {})


def _compare_graph_calls(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any] | None:
    """How often each frame's compiled graphs ran on both sides, where both runs counted them (a live run's summary or
    traces; a ``TORCH_TRACE`` log holds no calls): per frame, its calls, graphs, and those that ran at most once."""
    cb, cn = _graph_calls(b), _graph_calls(n)
    if cb is None or cn is None:
        return None
    frames = []
    fb = [f for f in cb.get("frames") or [] if isinstance(f, Mapping)]
    fn = [f for f in cn.get("frames") or [] if isinstance(f, Mapping)]
    for x, y in match(fb, fn):
        ref = y or x
        assert ref is not None
        frames.append(
            {
                "function": ref.get("function"),
                "file": ref.get("file"),
                "line": ref.get("line"),
                "status": "both" if x is not None and y is not None else "new" if y is not None else "gone",
                **{
                    f"{side}_{k}": int(_num((d or {}).get(k)))
                    for side, d in (("base", x), ("new", y))
                    for k in ("calls", "compiles", "dead")
                },
                **{
                    f"{side}_dead_compile_s": round(_num((d or {}).get("dead_compile_s")), 6)
                    for side, d in (("base", x), ("new", y))
                },
            }
        )
    ob, on = _once(cb), _once(cn)
    return {
        "base_graphs": int(_num(cb.get("graphs"))),
        "new_graphs": int(_num(cn.get("graphs"))),
        "base_calls": int(_num(cb.get("calls"))),
        "new_calls": int(_num(cn.get("calls"))),
        "base_ran_once": int(_num(ob.get("compiles"))),
        "new_ran_once": int(_num(on.get("compiles"))),
        "base_ran_once_compile_s": round(_num(ob.get("compile_s")), 6),
        "new_ran_once_compile_s": round(_num(on.get("compile_s")), 6),
        "frames": sorted(frames, key=lambda f: -(f["base_calls"] + f["new_calls"])),
    }


def compare_summaries(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    """Every fact the diff shows, of two run summaries (``RunSummary.to_dict()``)."""
    bs, ns = _num(b.get("wall_s")), _num(n.get("wall_s"))
    return {
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
        "cache": _compare_cache(b, n),
        "recompiling_frames": _compare_recompiling_frames(b, n),
        "graph_calls": _compare_graph_calls(b, n),
    }


def compare(base: Side, new: Side, gate: Gate | None = None) -> dict[str, Any]:
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
    facts = compare_summaries(b_sum, n_sum)
    facts["flags"] = flags(facts, gate)
    ranks_out: dict[str, Any] = {}
    if per_rank:
        changed = []
        rows = []
        for r, (x, y) in sorted(per_rank.items()):
            rf = compare_summaries(x, y)
            fl = flags(rf, gate)
            rows.append(
                {
                    "rank": r,
                    "total": rf["total"],
                    "flags": fl,
                    "graph_breaks": {k: rf["graph_breaks"][k] for k in ("new", "gone", "base_total", "new_total")},
                    "recompiles": {k: rf["recompiles"][k] for k in ("new", "gone", "base_total", "new_total")},
                    "failures": {"new": rf["failures"]["new"], "limit_hits": rf["failures"]["limit_hits"]},
                    "cache": {"hit_rate": rf["cache"]["hit_rate"], "new_misses": rf["cache"]["new_misses"]},
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
