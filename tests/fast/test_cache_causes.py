"""Fast tier: why a cache miss missed, where torch's record says little (issue 42, item 6).

The same answers on real inductor runs, live and on replay: tests/test_caches.py.
"""

from __future__ import annotations

from fastkit import cid

from torch_otel._analysis.caches import KeyHistory, compare
from torch_otel._kinds.cache_lookups import CacheLookupEvent, Component
from torch_otel._model.record import CompileRecord, PhaseNode


def _rec(compile_id: str) -> CompileRecord:
    return CompileRecord("frame", cid(compile_id), PhaseNode("dynamo", 0, 1))


def test_an_aotautograd_miss_with_no_parts_whose_fx_graphs_hit_says_the_graphs_did_not_change() -> None:
    """torch lists no parts for the AOTAutograd key (its logger is not at DEBUG); both FX graphs inside it hit: the
    graphs did not change, another part of the AOTAutograd key did. Not a bare "the key changed"."""
    history = KeyHistory()
    first = [
        CacheLookupEvent(cid("0/0"), "aot_autograd", "miss", key="a1"),
        CacheLookupEvent(cid("0/0"), "fx_graph", "miss", key="f1", backward=False),
        CacheLookupEvent(cid("0/0"), "fx_graph", "miss", key="b1", backward=True),
    ]
    history.explain(_rec("0/0"), first)
    again = [
        CacheLookupEvent(cid("0/1"), "aot_autograd", "miss", key="a2"),
        CacheLookupEvent(cid("0/1"), "fx_graph", "hit", key="f1", backward=False),
        CacheLookupEvent(cid("0/1"), "fx_graph", "hit", key="b1", backward=True),
    ]
    (aot, _, _) = history.explain(_rec("0/1"), again)
    assert aot is not None and aot.cause == "other"
    (words,) = aot.changes
    assert words.startswith("its 2 FX graphs hit, so the graphs it compiles did not change: another part of its key did")
    assert "TORCH_LOGS=+torch._functorch._aot_autograd.autograd_cache" in words


def test_autocast_in_an_aotautograd_key_is_named_as_autocast() -> None:
    old = [Component("autocast_state", "h1", "{'cpu': None}"), Component("grad_enabled", "g", "True")]
    new = [Component("autocast_state", "h2", "{'cpu': torch.bfloat16}"), Component("grad_enabled", "g", "True")]
    ((words, cls, name),) = compare(new, old)
    assert (words, cls, name) == ("autocast: {'cpu': None} → {'cpu': torch.bfloat16}", "config", "autocast_state")
    # torch 2.13 keys it per device, present only where autocast is on
    on = compare([Component("autocast_state[cpu]", "h", "torch.bfloat16")], [])
    off = compare([], [Component("autocast_state[cpu]", "h", "torch.bfloat16")])
    assert [w for w, _, _ in on + off] == ["autocast on cpu turned on (torch.bfloat16)", "autocast on cpu turned off"]


def test_a_changed_graph_leads_the_inputs_that_follow_from_it() -> None:
    """A backward whose forward's code changed: its code leads, its inputs' changes are listed after it."""
    old = [Component("gm", "c1"), Component("example_inputs[2]", "i1", None)]
    new = [Component("gm", "c2"), Component("example_inputs[2]", "i2", None)]
    plain = compare(new, old)
    led = compare(new, old, code_leads=True)
    assert [c for _, c, _ in plain] == ["inputs", "graph"]
    assert [c for _, c, _ in led] == ["graph", "inputs"]
    assert led[0][0] == "graph code changed (and with it one of its inputs)"
