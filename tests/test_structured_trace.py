"""Full capture takes torch's structured records from ``trace_structured`` itself while its handler is the only one
(torch_otel._capture.structured_trace): the same spans as through torch's logging, at less cost, and torch's own
function, unchanged, whenever anyone else reads ``torch.__trace``."""

from __future__ import annotations

import hashlib
import logging

import pytest
import torch

import torch_otel
from torch_otel._capture.live_capture import _TraceHandler

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)

TRACE = logging.getLogger("torch.__trace")


class _Records(logging.Handler):
    """A second reader of torch.__trace (as a user's tool would be): torch's own records, as torch made them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[dict, str | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.metadata, record.payload))  # type: ignore[attr-defined]


class _Count(logging.Filter):
    """Counts the logging records torch.__trace handles (a filter is not a handler: it leaves the direct path on)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.n += 1
        return True


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _artifacts(cap, roots) -> list[list[tuple]]:  # type: ignore[no-untyped-def]
    out = []
    for r in roots:
        arts = [dict(e.attributes) for e in r.events if e.name == "torch.compile.artifact"]
        out.append(
            sorted(
                (
                    a["torch.compile.artifact.kind"],
                    str(a.get("torch.compile.artifact.name")),
                    a["torch.compile.artifact.size"],
                    str(a.get("torch.compile.artifact.hash")),
                )
                for a in arts
            )
        )
    return out


def _no_guard_hash(arts: list[list[tuple]]) -> list[list[tuple]]:
    """The guards' text holds object addresses, printed in full: its hash, and its size by a digit or so, differ from
    one compile to the next (16,000 and 16,006 characters on 2.10)."""
    return [[t[:2] if t[0] == "dynamo_cpp_guards_str" else t for t in x] for x in arts]


def _phases(cap, root) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(s.name for s in cap.spans() if s.context.trace_id == root.context.trace_id and s is not root)


def test_full_capture_gives_the_same_spans_without_torchs_logging_records(make_capture):
    """One model compiled (forward and backward) in one process with the bridge's handler alone on torch.__trace
    (records handed over directly: torch's logging makes none), then again with a second handler there (torch's own
    trace_structured and logging). Every artifact's kind, name, size and payload hash (the guards': kind and name), every phase span and every root
    attribute's name agree; the hashes are torch's own, and the direct path's are those of the payloads it handed over.
    """
    cap = make_capture("full", capture_payloads=True, attribute_max_length=1_000_000)
    model, x = _model(), torch.randn(4, 8)

    def compile_once() -> list:
        seen = {id(r) for r in cap.roots(None)}
        torch.compile(model, backend="aot_eager")(x).sum().backward()
        torch_otel.force_flush()
        torch._dynamo.reset()
        roots = [r for r in cap.roots(None) if id(r) not in seen]
        assert {r.attributes["torch.compile.kind"] for r in roots} == {"frame", "backward"}
        return sorted(roots, key=lambda r: r.attributes["torch.compile.kind"] != "frame")

    # a first compile: torch's LazyTraceHandler (TORCH_TRACE's) takes the first record of a process, then removes
    # itself; and torch describes the model's parameters again only from the second compile on
    compile_once()
    # pytest's log capture puts handlers of its own on torch.__trace: off, as in a user's process
    pytests = [h for h in TRACE.handlers if not isinstance(h, _TraceHandler)]
    for h in pytests:
        TRACE.removeHandler(h)
    count = _Count()
    TRACE.addFilter(count)
    second = _Records()
    try:
        direct = compile_once()
        assert count.n == 0, "torch's logging made records: the direct path was not taken"
        TRACE.addHandler(second)
        try:
            through_logging = compile_once()
        finally:
            TRACE.removeHandler(second)
        assert count.n > 0 and second.records, "torch's own function and logging ran"
    finally:
        TRACE.removeFilter(count)
        for h in pytests:
            TRACE.addHandler(h)

    a, b = _artifacts(cap, direct), _artifacts(cap, through_logging)
    # the guards' text holds object addresses, which differ between the two compiles: its kind and name are compared
    assert _no_guard_hash(a) == _no_guard_hash(b)
    assert len(a[0]) >= 20 and {"dynamo_output_graph", "dynamo_cpp_guards_str", "describe_tensor"} <= {k for k, *_ in a[0]}
    for d, t in zip(direct, through_logging, strict=True):
        assert _phases(cap, d) == _phases(cap, t)
        assert set(d.attributes) == set(t.attributes)
    # torch's own hash of each payload, in its records of the second compile, is the one the spans carry; the direct
    # path's hash is that of the payload it handed over (the whole text, kept here by the opt-in)
    torch_hashes = {md["has_payload"] for md, _ in second.records if "has_payload" in md}
    span_hashes = {h for arts in b for *_, h in arts if h != "None"}
    assert span_hashes and span_hashes <= torch_hashes
    kept = [dict(e.attributes) for r in direct for e in r.events if e.name == "torch.compile.artifact"]
    kept = [k for k in kept if "torch.compile.artifact.payload" in k]
    assert len(kept) >= 5
    for k in kept:
        text = k["torch.compile.artifact.payload"]
        assert len(text) == k["torch.compile.artifact.size"]
        assert hashlib.md5(text.encode(), usedforsecurity=False).hexdigest() == k["torch.compile.artifact.hash"]


def test_full_capture_replaces_trace_structured_where_torch_imported_it_and_puts_it_back():
    """torch's modules import trace_structured by name: full capture replaces it in each, and in modules torch imports
    later (they take it from torch._logging); uninstrument puts torch's own back everywhere. Default capture never
    touches it."""
    import sys

    import torch._logging._internal as li
    from opentelemetry.sdk.trace import TracerProvider

    torchs = li.trace_structured
    holders = [
        m for name, m in list(sys.modules.items()) if name.startswith("torch") and vars(m).get("trace_structured") is torchs
    ]
    assert len(holders) >= 5
    torch_otel.instrument(TracerProvider(), registry=None, capture="default")
    try:
        assert all(vars(m)["trace_structured"] is torchs for m in holders)
    finally:
        torch_otel.uninstrument()
    torch_otel.instrument(TracerProvider(), registry=None, capture="full")
    try:
        ours = li.trace_structured
        assert ours is not torchs and getattr(ours, "__wrapped__", None) is torchs
        assert all(vars(m)["trace_structured"] is ours for m in holders)
        assert torch._logging.trace_structured is ours
        from torch._logging import trace_structured as later  # what a module imported from now on takes

        assert later is ours
        # torch's checks stay torch's: a reserved name is refused as torch refuses it
        with pytest.raises(AssertionError):
            ours("rank")
    finally:
        torch_otel.uninstrument()
    assert li.trace_structured is torchs and torch._logging.trace_structured is torchs
    assert all(vars(m)["trace_structured"] is torchs for m in holders)


def test_a_record_torchs_callbacks_fail_on_reaches_torch_as_it_would_and_the_bridge_keeps_working(make_capture):
    """A metadata function that raises raises out of trace_structured as it does from torch's own (torch's code, not
    the bridge's); a record the bridge cannot take is counted, never raised, and the compile is still traced."""
    cap = make_capture("full")
    import torch._logging._internal as li

    def bad() -> dict:
        raise ValueError("torch's own metadata failed")

    with pytest.raises(ValueError, match="torch's own metadata failed"):
        li.trace_structured("artifact", metadata_fn=bad)
    before = torch_otel.internal_error_count()
    li.trace_structured("artifact", metadata_fn=lambda: {"name": "x", "encoding": "string"}, payload_fn=lambda: {1, 2})
    assert torch_otel.internal_error_count() == before  # a set payload is written as a list, as torch writes it
    torch.compile(lambda t: t.relu() + 1, backend="aot_eager")(torch.randn(3))
    torch_otel.force_flush()
    assert cap.roots(None)
