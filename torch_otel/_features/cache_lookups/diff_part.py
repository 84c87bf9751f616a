"""Cache lookups in ``torch-otel diff``: the hit rates on both sides, the misses by cause, and why each new miss missed
(against the base side's keys: the base side's state hands them to the new side's, torch_otel._features.cache_lookups.
state); its lines of the text, each rank's row, and the gate's ``cache`` condition (a hit rate fell)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._core.merge import num
from ..._core.text import cut
from ..views import Condition
from .key_changes import CLASSES

__all__ = ["CONDITION", "compare", "per_rank", "text"]

KEY = "caches"  # the run summary's part compared (torch_otel._features.cache_lookups.summary_part)


def compare(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, Any]:
    cb, cn = b.get(KEY) or {}, n.get(KEY) or {}
    rates: dict[str, Any] = {}
    hb, hn = cb.get("hit_rate") or {}, cn.get("hit_rate") or {}
    byp_b, byp_n = _bypassed(cb), _bypassed(cn)
    for cache in sorted(set(hb) | set(hn) | set(byp_b) | set(byp_n)):
        x, y = hb.get(cache), hn.get(cache)
        rates[cache] = {
            "base": None if x is None else num(x.get("rate")),
            "new": None if y is None else num(y.get("rate")),
            "base_lookups": 0 if x is None else int(num(x.get("hits")) + num(x.get("misses"))),
            "new_lookups": 0 if y is None else int(num(y.get("hits")) + num(y.get("misses"))),
            "base_hits": 0 if x is None else int(num(x.get("hits"))),
            "base_bypasses": byp_b.get(cache, 0),
            "new_bypasses": byp_n.get(cache, 0),
        }
    kb, kn = _keys(cb), _keys(cn)
    by_keys = kb is not None and kn is not None
    new_misses = _new_misses_by_key(cb, cn, kb, kn) if kb is not None and kn is not None else _new_misses_by_count(cb, cn)
    return {
        "hit_rate": rates,
        "misses": {"base": int(num(cb.get("misses"))), "new": int(num(cn.get("misses")))},
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
        out[str(r.get("cache"))] = out.get(str(r.get("cache")), 0) + int(num(r.get("count")))
    return out


def _new_bypasses(cb: Mapping[str, Any], cn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Bypass reasons (torch's words) the new side has more of than the base."""
    rb = {(r.get("cache"), r.get("reason")): int(num(r.get("count"))) for r in cb.get("bypasses") or [] if isinstance(r, Mapping)}
    out = []
    for r in cn.get("bypasses") or []:
        if not isinstance(r, Mapping):
            continue
        k, was = (r.get("cache"), r.get("reason")), rb.get((r.get("cache"), r.get("reason")), 0)
        if int(num(r.get("count"))) > was:
            out.append(
                {"cache": k[0], "reason": k[1], "category": r.get("category"), "base": was, "new": int(num(r.get("count")))}
            )
    return out


def _keys(c: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """A side's lookups with their keys; None where its summary has none to compare (an older torch-otel's) or left
    some out (past its bound)."""
    k = c.get("keys")
    if not isinstance(k, list) or num(c.get("keys_left_out")) > 0:
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
    mb = {(m.get("cache"), m.get("cause")): int(num(m.get("count"))) for m in cb.get("misses_by_cache_and_cause") or []}
    mn = {(m.get("cache"), m.get("cause")): int(num(m.get("count"))) for m in cn.get("misses_by_cache_and_cause") or []}
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


def _rate(v: float | None, bypassed: Any = 0) -> str:
    """A hit rate; none (no hit or miss): ``bypassed`` where torch bypassed the cache, else ``-``."""
    return ("bypassed" if bypassed else "-") if v is None else f"{v:.0%}"


def text(c: Any, w: int) -> list[str]:
    """The diff's lines: each cache's hit rate and the misses on both sides, then each new miss's cause and why."""
    rates = ", ".join(
        f"{k} {_rate(v['base'], v.get('base_bypasses'))} -> {_rate(v['new'], v.get('new_bypasses'))}"
        for k, v in c["hit_rate"].items()
    )
    lines = [f"cache hit rate: {rates}" if rates else "cache: no lookups on either side"]
    lines[0] += f"; misses {c['misses']['base']} -> {c['misses']['new']}" if rates else ""
    for x in c.get("new_bypasses") or []:  # torch's reason, in its words: the change to undo
        lines.append(cut(f"  new bypass  {x['cache']} {x['base']} -> {x['new']}: {x['reason']}", w))
    for x in c["new_misses"]:
        why = f": {x['reasons'][0]}" if x.get("reasons") else ""
        # the counts and the change lead; what it was compared with ("against 0/0 in the base run") may be cut
        lines.append(cut(f"  new misses  {x['cache']} {x['cause']} {x['base']} -> {x['new']}{why}", w))
    return [cut(x, w) for x in lines]


def per_rank(c: Any) -> dict[str, Any]:
    """What a rank's row of the diff keeps: its hit rates and new misses."""
    return {"hit_rate": c["hit_rate"], "new_misses": c["new_misses"]}


def _fell(c: Any, thresholds: tuple[float | None, float | None]) -> list[str]:
    pct = thresholds[0] or 0.0
    out = []
    for cache, r in c["hit_rate"].items():
        if r["base"] is not None and r["new"] is not None and r["new_lookups"] and 100 * (r["base"] - r["new"]) > pct:
            out.append(f"{cache} hit rate fell: {r['base']:.0%} -> {r['new']:.0%}")
        if r.get("base_hits") and r.get("new_bypasses", 0) > r.get("base_bypasses", 0):
            # a cache the base hit, now bypassed: no hit rate to fall, every compile of it done afresh
            why = next((x["reason"] for x in c.get("new_bypasses") or [] if x["cache"] == cache), None)
            out.append(f"{cache} bypassed: hit {r['base_hits']} -> bypassed {r['new_bypasses']}" + (f": {why}" if why else ""))
    return out


# --fail-on cache (cache:5%: a hit rate fell by more than 5 points)
CONDITION = Condition(
    "cache", _fell, defaults=(0.0, None), units=("%",), units_hint="use points of hit rate: cache:5%", aliases=("cache-hit-rate",)
)
