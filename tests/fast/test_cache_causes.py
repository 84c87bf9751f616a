"""Fast tier: why a cache miss missed, where torch's record says little (issue 42, item 6).

The same answers on real inductor runs, live and on replay: tests/test_caches.py.
"""

from __future__ import annotations

from tests.fast.fastkit import cid
from torch_otel._features.cache_lookups.events import CacheLookupEvent, Component
from torch_otel._features.cache_lookups.explain import KeyHistory
from torch_otel._features.cache_lookups.key_changes import compare
from torch_otel._model.record import CompileRecord, PhaseNode


def _rec(compile_id: str, functorch: str | None = None) -> CompileRecord:
    rec = CompileRecord("frame", cid(compile_id), PhaseNode("dynamo", 0, 1))
    if functorch is not None:  # torch 2.13 and later record the functorch config in CompilationMetrics
        rec.metrics = {"functorch_config": functorch}
    return rec


def _aot_miss_after_hits(first: str | None, second: str | None) -> tuple[str, tuple[str, ...]]:
    """An AOTAutograd key missed (its parts not logged) while both FX graphs it compiles hit; each compile's
    functorch config as its metrics say (None: a torch before 2.13)."""
    history = KeyHistory()
    history.explain(
        _rec("0/0", first),
        [
            CacheLookupEvent(cid("0/0"), "aot_autograd", "miss", key="a1"),
            CacheLookupEvent(cid("0/0"), "fx_graph", "miss", key="f1", backward=False),
            CacheLookupEvent(cid("0/0"), "fx_graph", "miss", key="b1", backward=True),
        ],
    )
    again = [
        CacheLookupEvent(cid("0/1"), "aot_autograd", "miss", key="a2"),
        CacheLookupEvent(cid("0/1"), "fx_graph", "hit", key="f1", backward=False),
        CacheLookupEvent(cid("0/1"), "fx_graph", "hit", key="b1", backward=True),
    ]
    (aot, _, _) = history.explain(_rec("0/1", second), again)
    assert aot is not None
    return aot.cause, aot.changes


def test_an_aotautograd_miss_whose_fx_graphs_hit_blames_the_graph_dynamo_handed_over() -> None:
    """Both FX graphs hit: what inductor compiles is unchanged, so grad mode, autocast and the inductor config (which
    change those graphs) did not change either, and are not named. The functorch config is the same (the compile's
    metrics say so): the graph dynamo handed over is what changed (a renamed module: tests/test_caches.py, rename)."""
    cause, (words, advice) = _aot_miss_after_hits('{"a": 1}', '{"a": 1}')
    assert cause == "graph"
    assert words.startswith("the graph dynamo handed over changed in what the compiled graphs do not keep")
    assert "its 2 FX graphs hit" in words and "functorch" not in words
    for unchanged in ("grad mode", "autocast", "inductor config"):
        assert unchanged not in words and unchanged not in advice
    # the way to name the part, and its condition: the run compared with must have been logged the same way
    assert advice.startswith("TORCH_LOGS=+torch._functorch._aot_autograd.autograd_cache lists the key's parts")
    assert advice.endswith("if the run compared with was logged the same way")


def test_an_aotautograd_miss_whose_fx_graphs_hit_names_a_changed_functorch_config() -> None:
    cause, (words, _) = _aot_miss_after_hits('{"a": 1}', '{"a": 2}')
    assert (
        cause == "config" and words == "functorch config changed (its 2 FX graphs hit, so the graphs inductor compiles did not)"
    )


def test_before_2_13_the_functorch_config_stays_a_suspect_beside_the_graph() -> None:
    cause, (words, _) = _aot_miss_after_hits(None, None)
    assert cause == "graph" and words.startswith("the graph dynamo handed over changed")
    assert words.endswith("; or a functorch config changed (torch before 2.13 does not record it)")


def test_a_graph_with_fewer_tensor_inputs_leads_with_its_code() -> None:
    """A graph break shortened the graph: it takes fewer tensors. The code leads; the inputs follow from it, and are
    not listed one by one (compared by position, "input 0: shape [8, 8] → [4, 8]" compares the weight with x)."""
    t = "TensorMetadata(dtype=torch.float32, shape=torch.Size([{}, 8]), stride=(8, 1))"
    old = [Component("gm", "g1"), *(Component(f"example_inputs[{i}]", f"i{i}", t.format(8)) for i in range(3))]
    new = [Component("gm", "g2"), Component("example_inputs[0]", "x", t.format(4))]
    assert compare(new, old) == [("graph code changed (and with it its inputs: 3 tensors → 1)", "graph", "gm")]
    # a size made dynamic adds a symbolic int, not a tensor: the inputs' change leads, as before
    sym = [Component("gm", "g2"), Component("example_inputs[0]", "s", "s77"), Component("example_inputs[1]", "x", t.format(4))]
    grown = compare(sym, old[:2])
    assert grown[0][1] == "inputs", grown


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


def _fx_miss(i: str, key: str, backward: bool, fusion: str, code: str, inputs: list[str]) -> CacheLookupEvent:
    parts = (
        Component("inductor_config[epilogue_fusion]", "e" + fusion, fusion),
        Component("gm", code),
        *(Component(f"example_inputs[{n}]", h, None) for n, h in enumerate(inputs)),
    )
    return CacheLookupEvent(cid(i), "fx_graph", "miss", key=key, components=parts, backward=backward)


def test_a_backward_whose_forwards_config_and_code_changed_leads_with_both_not_its_inputs_by_position() -> None:
    """An inductor config flipped, and with it the forward's code: the lazy backward's saved tensors are other tensors,
    compared by position. Its code leads them, after the config (the inputs came first when the forward's cause was
    the config, though its code changed too: a real HF model's backward listed 30 inputs before its code)."""
    history = KeyHistory()
    history.explain(_rec("0/0"), [_fx_miss("0/0", "f1", False, "True", "c1", ["i1"])])
    history.explain(
        CompileRecord("backward", cid("0/0"), PhaseNode("x", 0, 1)), [_fx_miss("0/0", "b1", True, "True", "d1", ["s1", "t1"])]
    )
    (fwd,) = history.explain(_rec("0/1"), [_fx_miss("0/1", "f2", False, "False", "c2", ["i1"])])
    (bwd,) = history.explain(
        CompileRecord("backward", cid("0/1"), PhaseNode("x", 0, 1)), [_fx_miss("0/1", "b2", True, "False", "d2", ["s2", "t2"])]
    )
    assert fwd is not None and bwd is not None
    assert fwd.changes == ("inductor config epilogue_fusion: True → False", "graph code changed")
    assert bwd.changes[:2] == (
        "inductor config epilogue_fusion: True → False",
        "graph code changed (and with it 2 of its inputs)",
    )
