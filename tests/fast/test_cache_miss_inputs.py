"""Fast tier: a cache miss's inputs are matched by torch's hash of each, not by position (hunt 4, B).

torch's real ``fx_graph_cache_miss`` and ``aotautograd_cache_miss`` artifacts (torch 2.13, inductor, cold cache),
kept in tests/data/cache-miss-dynamic-inputs.json.gz (what it keeps of them: its ``about``), are read as replay
reads them (:func:`key_of_artifact`) and explained as live and replay do (:class:`KeyHistory`):

- ``dynamic``: ``f(x, w)`` with x [4, 16], then [6, 16]. torch's keys, as tlparse shows them (its
  ``fx_graph_cache_miss`` artifacts of 0/0 and 0/1): 0/0's inputs are x [4, 16] and w [16, 16] (hash ``b2a3uet…``);
  0/1's are ``('s77',)``, x [s77, 16] and w [16, 16] with the same hash ``b2a3uet…``. x became dynamic, a symbolic
  int was added in front, and w did not change. torch is right: its hash of each input says which changed. The
  bridge compared them by position and read "input 1: shape [16, 16] → [s77, 16]", w against x.
- ``llama``: a tiny Llama trained with activation checkpointing, sequence length 16, then 24. By position, the bridge
  compared the embedding's weight with input_ids ("input 1: dtype torch.float32 → torch.int64"); no input's dtype
  changed (torch's hashes: input_ids alone changed in the forward, which took ``s27`` in front).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from tests.fast.fastkit import cid
from torch_otel._features.cache_lookups.events import CacheLookupEvent, Component, key_of_artifact
from torch_otel._features.cache_lookups.explain import Explanation, KeyHistory
from torch_otel._features.cache_lookups.key_changes import compare
from torch_otel._model.record import CompileRecord, PhaseNode

DATA = Path(__file__).resolve().parents[1] / "data" / "cache-miss-dynamic-inputs.json.gz"


@cache
def _case(name: str) -> tuple[tuple[str, CacheLookupEvent], ...]:
    """A case's lookups, as replay reads them from their artifacts: (compile id, lookup), in log order."""
    data: dict[str, Any] = json.loads(gzip.decompress(DATA.read_bytes()))
    out = []
    for a in data[name]:
        lk = key_of_artifact(a["artifact"], json.dumps(a["payload"]), cid(a["compile_id"]))
        assert lk is not None and lk.result == "miss", a["artifact"]
        out.append((a["compile_id"], lk))
    return tuple(out)


def _explained(name: str) -> dict[tuple[str, str], Explanation]:
    """Each compile's misses explained, compile by compile, as the assembler does: (compile id, what) -> why."""
    history = KeyHistory()
    out: dict[tuple[str, str], Explanation] = {}
    for compile_id in dict.fromkeys(c for c, _ in _case(name)):
        lookups = [lk for c, lk in _case(name) if c == compile_id]
        explained = history.explain(CompileRecord("frame", cid(compile_id), PhaseNode("dynamo", 0, 1)), lookups)
        for lk, e in zip(lookups, explained, strict=True):
            assert isinstance(e, Explanation)
            what = "aot_autograd" if lk.cache == "aot_autograd" else "backward" if lk.backward else "forward"
            out[(compile_id, what)] = e
    return out


def _inputs(lk: CacheLookupEvent) -> list[Component]:
    parts = [c for c in lk.components if c.name.startswith("example_inputs[")]
    return sorted(parts, key=lambda c: int(c.name[len("example_inputs[") : -1]))


def _fx(name: str, compile_id: str, backward: bool) -> CacheLookupEvent:
    return next(lk for c, lk in _case(name) if c == compile_id and lk.cache == "fx_graph" and lk.backward is backward)


def test_torch_says_x_changed_and_w_did_not():
    """What torch's keys say, as tlparse shows them: the data the explanation is checked against."""
    before, after = _inputs(_fx("dynamic", "0/0", False)), _inputs(_fx("dynamic", "0/1", False))
    assert [c.digest[:7] for c in before] == ["dombcon", "b2a3uet"]
    assert [c.digest[:7] for c in after] == ["44pgx7a", "3sh54dv", "b2a3uet"]  # ('s77',), x, w unchanged
    assert after[0].text == "('s77',)" and "[s77, 16]" in (after[1].text or "") and "[16, 16]" in (after[2].text or "")


def test_a_size_made_dynamic_names_x_as_changed_the_symbolic_int_as_added_and_w_as_unchanged():
    e = _explained("dynamic")
    assert e[("0/0", "forward")].cause == "first_seen"
    fx = e[("0/1", "forward")]
    assert fx.cause == "inputs" and fx.against == "0/0 earlier in this run"
    assert fx.changes == (
        "input 1 (input 0 before): shape [4, 16] → [s77, 16], memory_format torch.contiguous_format → None",
        "input 0 added: symbolic size s77 (a size made dynamic)",
        "input 2 unchanged (input 1 before)",
        "graph code changed",
    )
    assert fx.components[:3] == ("example_inputs[1]", "example_inputs[0]", "example_inputs")
    assert not any("[16, 16]" in c for c in fx.changes)  # w, compared by position with x before the fix
    # the AOTAutograd miss (its key's parts not logged) says what its FX graph says
    assert e[("0/1", "aot_autograd")].changes == fx.changes


def _claimed(changes: list[str] | tuple[str, ...]) -> list[tuple[int, int]]:
    """The inputs an explanation says changed: (place before, place now)."""
    out = []
    for words in changes:
        m = re.match(r"input (\d+)(?: \(input (\d+) before\))?: ", words)
        if m:
            out.append((int(m.group(2) or m.group(1)), int(m.group(1))))
    return out


def test_a_llama_trained_at_a_new_length_changes_no_inputs_dtype_and_names_the_inputs_torch_hashed_anew():
    e = _explained("llama")
    fwd, bwd = e[("0/1", "forward")], e[("0/1", "backward")]
    assert fwd.cause == bwd.cause == "inputs"
    for x in (fwd, bwd, e[("0/1", "aot_autograd")]):
        assert not any("dtype" in c for c in x.changes), x.changes
    # the forward: input_ids became [2, s27], s27 was added in front of it, the 22 weights did not change
    assert fwd.changes[:3] == (
        "input 1 (input 0 before): shape [2, 16] → [2, s27], stride (16, 1) → (s27, 1), memory_format "
        "torch.contiguous_format → None",
        "input 0 added: symbolic size s27 (a size made dynamic)",
        "the other 22 inputs unchanged, each 1 place later",
    )
    # forward and backward, every part listed: the inputs said to have changed are those torch hashed anew, and the
    # ones said to be added are the symbolic ints torch added
    for backward in (False, True):
        old, new = _fx("llama", "0/0", backward), _fx("llama", "0/1", backward)
        before, after = _inputs(old), _inputs(new)
        changes = [w for w, _, _ in compare(new.components, old.components)]
        claimed = _claimed(changes)
        assert claimed, changes
        added = [int(m.group(1)) for w in changes if (m := re.match(r"input (\d+) added: symbolic size ", w))]
        # by hash, counted (inputs of one hash: a weight and an activation of one shape): the hashes torch dropped are
        # the changed inputs' before; those it added, the changed inputs' now and the symbolic ints added
        hashes = Counter(c.digest for c in before), Counter(c.digest for c in after)
        assert Counter(before[i].digest for i, _ in claimed) == hashes[0] - hashes[1], changes
        assert Counter(after[j].digest for j in [*(j for _, j in claimed), *added]) == hashes[1] - hashes[0], changes
        assert all(after[j].text and not after[j].text.startswith("TensorMetadata") for j in added)
        assert all("TensorMetadata" in (before[i].text or "") for i, _ in claimed)  # a tensor against a tensor


def test_inputs_with_the_same_hash_are_matched_whatever_their_places():
    """Two inputs of one hash (two weights of one shape): matched in order; the one that changed is named."""
    t = "TensorMetadata(dtype=torch.float32, shape=torch.Size([{}]), stride=(1,))"
    old = [Component(f"example_inputs[{i}]", h, t.format(s)) for i, (h, s) in enumerate([("w", 8), ("w", 8), ("x", 4)])]
    new = [
        Component("example_inputs[0]", "s", "('s0',)"),
        *(Component(f"example_inputs[{i + 1}]", h, t.format(s)) for i, (h, s) in enumerate([("w", 8), ("w", 8), ("y", "s0")])),
    ]
    assert [w for w, _, _ in compare(new, old)] == [
        "input 3 (input 2 before): shape [4] → [s0]",
        "input 0 added: symbolic size s0 (a size made dynamic)",
        "the other 2 inputs unchanged, each 1 place later",
    ]
    # nothing moved: the inputs that did not change are not listed, as before
    same = [Component("example_inputs[0]", "x2", t.format(5)), *old[1:]]
    assert [w for w, _, _ in compare(same, old)] == ["input 0: shape [8] → [5]"]
    # two inputs swapped: both unchanged, by hash, at each other's place
    swapped = [
        Component("example_inputs[0]", "s", "('s0',)"),
        *(Component(f"example_inputs[{i + 1}]", c.digest, c.text) for i, c in enumerate([old[2], old[0], old[1]])),
    ]
    assert [w for w, _, _ in compare(swapped, old)] == [
        "input 0 added: symbolic size s0 (a size made dynamic)",
        "the other 3 inputs unchanged, 3 of them at other places",
    ]
