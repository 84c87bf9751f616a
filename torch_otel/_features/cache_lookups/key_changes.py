"""What changed between two keys of one graph: each part of torch's cache key that differs, by hash, in words.

A part is named by its meaning ("inductor config size_asserts: True → False", "input 0: shape [8, 8] → [16, 8]",
"torch 2.13.0 → 2.15.0", "graph code changed") and classed for metric labels (:data:`CLASSES`), most telling first.
Only the parts' hashes decide what changed; a part's text is shown only where it is a value, never the graph's code.
The graph's inputs are matched by hash, not by place (a size made dynamic adds a symbolic int in front of them).
Which key a miss is compared with, and what it is told against, is :mod:`.explain`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher

from .events import MAX_TEXT, Component, component_class, tensor_inputs

__all__ = ["CAUSES", "CLASSES", "compare", "likeness"]

# What changed, most telling first (a miss's cause is the class of its first change)
CLASSES = ("versions", "system", "config", "inputs", "graph", "other")
# A miss's cause, as the metric label says it
CAUSES = ("first_seen", "not_in_cache", *CLASSES)

_TENSOR_FIELDS = ("dtype", "shape", "stride", "device", "layout", "requires_grad", "memory_format", "storage_offset")
_TENSOR_FIELD = re.compile(r"(\w+)=(torch\.Size\(\[[^\]]*\]\)|\([^)]*\)|device\(type='[^']*'(?:, index=\d+)?\)|[^,)]+)")


def _tensor_fields(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return {k: v for k, v in _TENSOR_FIELD.findall(text) if k in _TENSOR_FIELDS}


def _shape(value: str) -> str:
    m = re.match(r"torch\.Size\((\[[^\]]*\])\)", value)
    return m.group(1) if m else value


_INPUT = "example_inputs["
_SYMBOL = re.compile(r"^\('([^']*)',\)$")  # a symbolic int's input, as torch lists it: ('s77',)


def _index(name: str) -> int:
    try:
        return int(name[len(_INPUT) : -1])
    except ValueError:
        return -1


def _is_tensor(c: Component) -> bool:
    return c.text is None or "TensorMetadata" in c.text


def _symbol(c: Component) -> str:
    m = _SYMBOL.match(c.text or "")
    return m.group(1) if m else (c.text or "")


def _input_change(old: Component, new: Component) -> str:
    """What differs in one input between two keys, from its text (a tensor's metadata, a symbolic int)."""
    if _is_tensor(old) and _is_tensor(new):
        a, b = _tensor_fields(old.text), _tensor_fields(new.text)
        diffs = [
            f"{k} {_shape(a[k]) if k == 'shape' else a[k]} → {_shape(b[k]) if k == 'shape' else b[k]}"
            for k in _TENSOR_FIELDS
            if k in a and k in b and a[k] != b[k]
        ]
        return ", ".join(diffs) if diffs else "metadata changed"
    if old.text is not None and new.text is not None:
        return f"{_symbol(old)} → {_symbol(new)}"[:MAX_TEXT]
    return "metadata changed"


def _inputs(old: Sequence[Component], new: Sequence[Component], release_changed: bool) -> list[tuple[str, str]]:
    """The graph's inputs that changed, were added or removed, as (words, component name), by torch's hash of each.

    Inputs are matched by hash first, in order (an input whose hash is the same did not change, wherever it is),
    then the rest by position among their kind (a tensor with a tensor, a symbolic int with a symbolic int). A size
    made dynamic adds a symbolic int in front and moves every input one place: compared by position, the weight
    would be compared with ``x``. The words name each input by its place in the key that missed, with its place
    before where that differs, and say which did not change where their places moved.
    """
    a = sorted((c for c in old if c.name.startswith(_INPUT)), key=lambda c: _index(c.name))
    b = sorted((c for c in new if c.name.startswith(_INPUT)), key=lambda c: _index(c.name))
    changed: list[tuple[Component, Component]] = []
    added: list[Component] = []
    removed: list[Component] = []
    kept: list[tuple[int, int]] = []
    ops = SequenceMatcher(None, [c.digest for c in a], [c.digest for c in b], autojunk=False).get_opcodes()
    spans = [(a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            kept += [(_index(a[i].name), _index(b[j].name)) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
    # an input of the same hash outside the order (inputs swapped): unchanged too
    unmatched: dict[str, list[Component]] = {}
    for _, now in spans:
        for c in now:
            unmatched.setdefault(c.digest, []).append(c)
    same: set[int] = set()
    for was, _ in spans:
        for c in was:
            if unmatched.get(c.digest):
                n = unmatched[c.digest].pop(0)
                kept.append((_index(c.name), _index(n.name)))
                same |= {id(c), id(n)}
    for olds, news in spans:
        for tensor in (True, False):
            was = [c for c in olds if _is_tensor(c) == tensor and id(c) not in same]
            now = [c for c in news if _is_tensor(c) == tensor and id(c) not in same]
            changed += zip(was, now, strict=False)
            added += now[len(was) :]
            removed += was[len(now) :]
    out = []
    for o, n in sorted(changed, key=lambda t: _index(t[1].name)):
        i, j = _index(o.name), _index(n.name)
        out.append((f"input {j}{f' (input {i} before)' if i != j else ''}: {_input_change(o, n)}", n.name))
    if not release_changed:  # between releases, the parts only one release has are not listed
        for c in sorted(added, key=lambda c: _index(c.name)):
            what = f": symbolic size {_symbol(c)} (a size made dynamic)" if not _is_tensor(c) and c.text else ""
            out.append((f"input {_index(c.name)} added{what}"[: MAX_TEXT * 2], c.name))
        for c in sorted(removed, key=lambda c: _index(c.name)):
            what = f": symbolic size {_symbol(c)}" if not _is_tensor(c) and c.text else ""
            out.append((f"input {_index(c.name)} removed{what}"[: MAX_TEXT * 2], c.name))
    moved = [(i, j) for i, j in kept if i != j]
    if moved:  # the inputs that did not change, where their places moved: the words above name other places
        shifts = {j - i for i, j in kept}
        if len(kept) == 1:
            words = f"input {moved[0][1]} unchanged (input {moved[0][0]} before)"
        elif len(shifts) == 1:
            d = shifts.pop()
            words = f"the other {len(kept)} inputs unchanged, each {abs(d)} place{'s' if abs(d) > 1 else ''} " + (
                "later" if d > 0 else "earlier"
            )
        else:
            words = f"the other {len(kept)} inputs unchanged, {len(moved)} of them at other places"
        out.append((words, _INPUT[:-1]))
    return out


def _describe(name: str, old: Component | None, new: Component | None, versions: tuple[str | None, str | None]) -> str:
    """One changed part in words."""
    cls = component_class(name)
    shown = name
    if name.startswith("inductor_config[") and name.endswith("]"):
        shown = f"inductor config {name[len('inductor_config[') : -1]}"
    elif name.startswith("fx_kwargs[") and name.endswith("]"):
        shown = f"compile argument {name[len('fx_kwargs[') : -1]}"
    if name.split("[", 1)[0] == "autocast_state":  # AOTAutograd's key: autocast's dtype per device (absent: off)
        device = name[len("autocast_state[") : -1] if name.startswith("autocast_state[") else ""
        on = f" on {device}" if device else ""
        if old is None or new is None:
            text = f" ({new.text})" if new is not None and new.text else ""
            return f"autocast{on} turned {'on' if old is None else 'off'}{text}"
        if old.text is not None and new.text is not None:
            return f"autocast{on}: {old.text} → {new.text}"
        return f"autocast{on} changed"
    if old is None or new is None:
        return f"{shown} {'added' if old is None else 'removed'}"
    if cls == "versions" and name == "torch_version":
        before, after = versions
        if before and after and before != after:
            return f"torch {before} → {after}"
        return "torch version changed"
    if cls == "system":
        return "system changed (device, driver or triton)"
    if cls == "graph":
        return "graph code changed"
    if old.text is not None and new.text is not None:
        return f"{shown}: {old.text or '(empty)'} → {new.text or '(empty)'}"
    return f"{shown} changed"


def compare(
    new: Sequence[Component],
    old: Sequence[Component],
    versions: tuple[str | None, str | None] = (None, None),
    code_leads: bool = False,
) -> list[tuple[str, str, str]]:
    """Each changed part as (words, class, component name), most telling first; by hash, over the parts both have.

    Between releases (the torch version part differs), the parts only one release has are not listed: a new
    release adds and drops inductor config keys, and the version names the cause. An input that changed leads a
    graph code that changed (static shapes are written into the code); with ``code_leads`` (a backward whose
    forward's code changed, its inputs unchanged) the code leads, and the inputs are what followed from it.
    """
    a = {c.name: c for c in old}
    b = {c.name: c for c in new}
    release_changed = "torch_version" in a and "torch_version" in b and a["torch_version"].digest != b["torch_version"].digest
    # the graph's inputs, matched by hash (:func:`_inputs`), lead the other parts of their class
    changed = [(CLASSES.index("inputs"), 0, words, "inputs", name) for words, name in _inputs(old, new, release_changed)]
    for name in list(dict.fromkeys([*a, *b])):
        o, n = a.get(name), b.get(name)
        if name.startswith(_INPUT) or (o is not None and n is not None and o.digest == n.digest):
            continue
        if (o is None or n is None) and release_changed:
            continue
        cls = component_class(name)
        changed.append((CLASSES.index(cls), 1, _describe(name, o, n, versions), cls, name))
    changed.sort(key=lambda t: t[:2])
    out = [(words, cls, name) for _, _, words, cls, name in changed]
    graph = [x for x in out if x[1] == "graph"]
    follow = [x for x in out if x[1] == "inputs" and x[2] != _INPUT[:-1]]  # (not the inputs that did not change)
    # tensors added or removed as inputs: the graph itself changed (a graph break shortened it, its code takes other
    # tensors); the inputs follow from it, and are not listed one by one: compared by position, they are other tensors
    counted = tensor_inputs(old), tensor_inputs(new)
    if graph and counted[0] != counted[1] and not release_changed:
        first = graph[0]
        led = (f"{first[0]} (and with it its inputs: {counted[0]} tensors → {counted[1]})", first[1], first[2])
        lead = [x for x in out if x[1] not in ("graph", "inputs", "other")]
        rest = [x for x in follow if not x[2].startswith(_INPUT)]
        return [*lead, led, *graph[1:], *rest, *[x for x in out if x[1] == "other"]]
    if code_leads and graph and follow:
        # a graph whose code changed takes other inputs (a backward's follow from its forward's code): the code leads,
        # the inputs are what followed from it
        first = graph[0]
        count = "one" if len(follow) == 1 else str(len(follow))
        led = (f"{first[0]} (and with it {count} of its inputs)", first[1], first[2])
        lead = [x for x in out if x[1] not in ("graph", "inputs", "other")]
        out = [*lead, led, *graph[1:], *[x for x in out if x[1] == "inputs"], *[x for x in out if x[1] == "other"]]
    return out


def likeness(new: Sequence[Component], old: Sequence[Component]) -> int:
    """How alike two keys are: the parts they share, by hash."""
    a = {c.name: c.digest for c in old}
    return sum(1 for c in new if a.get(c.name) == c.digest)
