"""What changed between two keys of one graph: each part of torch's cache key that differs, by hash, in words.

A part is named by its meaning ("inductor config size_asserts: True → False", "input 0: shape [8, 8] → [16, 8]",
"torch 2.13.0 → 2.15.0", "graph code changed") and classed for metric labels (:data:`CLASSES`), most telling first.
Only the parts' hashes decide what changed; a part's text is shown only where it is a value, never the graph's code.
Which key a miss is compared with, and what it is told against, is :mod:`.explain`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .events import Component, component_class, tensor_inputs

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
    if cls == "inputs" and name.startswith("example_inputs["):
        index = name[len("example_inputs[") : -1]
        a, b = _tensor_fields(old.text), _tensor_fields(new.text)
        diffs = [
            f"{k} {_shape(a[k]) if k == 'shape' else a[k]} → {_shape(b[k]) if k == 'shape' else b[k]}"
            for k in _TENSOR_FIELDS
            if k in a and k in b and a[k] != b[k]
        ]
        return f"input {index}: " + (", ".join(diffs) if diffs else "metadata changed")
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
    changed = []
    for name in list(dict.fromkeys([*a, *b])):
        o, n = a.get(name), b.get(name)
        if o is not None and n is not None and o.digest == n.digest:
            continue
        if (o is None or n is None) and release_changed:
            continue
        changed.append((CLASSES.index(component_class(name)), name, o, n))
    changed.sort(key=lambda t: t[0])
    out = [(_describe(name, o, n, versions), CLASSES[c], name) for c, name, o, n in changed]
    graph = [x for x in out if x[1] == "graph"]
    follow = [x for x in out if x[1] == "inputs"]
    # tensors added or removed as inputs: the graph itself changed (a graph break shortened it, its code takes other
    # tensors); the inputs follow from it, and are not listed one by one: compared by position, they are other tensors
    counted = tensor_inputs(old), tensor_inputs(new)
    if graph and counted[0] != counted[1] and not release_changed:
        first = graph[0]
        led = (f"{first[0]} (and with it its inputs: {counted[0]} tensors → {counted[1]})", first[1], first[2])
        lead = [x for x in out if x[1] not in ("graph", "inputs", "other")]
        rest = [x for x in follow if not x[2].startswith("example_inputs[")]
        return [*lead, led, *graph[1:], *rest, *[x for x in out if x[1] == "other"]]
    if code_leads and graph and follow:
        # a graph whose code changed takes other inputs (a backward's follow from its forward's code): the code leads,
        # the inputs are what followed from it
        first = graph[0]
        count = "one" if len(follow) == 1 else str(len(follow))
        led = (f"{first[0]} (and with it {count} of its inputs)", first[1], first[2])
        lead = [x for x in out if x[1] not in ("graph", "inputs", "other")]
        out = [*lead, led, *graph[1:], *follow, *[x for x in out if x[1] == "other"]]
    return out


def likeness(new: Sequence[Component], old: Sequence[Component]) -> int:
    """How alike two keys are: the parts they share, by hash."""
    a = {c.name: c.digest for c in old}
    return sum(1 for c in new if a.get(c.name) == c.digest)
