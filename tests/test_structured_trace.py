"""Full capture takes torch's structured records from ``trace_structured`` itself while its handler is the only one
(torch_otel._capture.structured_trace): the same spans as through torch's logging, at less cost, and torch's own
function, unchanged, whenever anyone else reads ``torch.__trace``."""

from __future__ import annotations

import functools
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


class _Count:
    """Counts the logging records torch.__trace makes (its ``makeRecord``, wrapped on the logger itself: a filter would
    send the records through torch's own function, as any filter does)."""

    def __init__(self) -> None:
        self.n = 0

    def __enter__(self) -> _Count:
        make = TRACE.makeRecord

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.n += 1
            return make(*args, **kwargs)

        TRACE.makeRecord = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del TRACE.makeRecord


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
    second = _Records()
    try:
        with _Count() as count:
            direct = compile_once()
            assert count.n == 0, "torch's logging made records: the direct path was not taken"
            TRACE.addHandler(second)
            try:
                through_logging = compile_once()
            finally:
                TRACE.removeHandler(second)
            assert count.n > 0 and second.records, "torch's own function and logging ran"
    finally:
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
        # a user's wrapper of it, made with functools.wraps (which copies the function's attributes onto the wrapper)
        spy = functools.wraps(ours)(lambda *a, **k: ours(*a, **k))
        li.trace_structured = spy
    finally:
        torch_otel.uninstrument()
    assert li.trace_structured is spy  # the user's wrapper stays where the user put it
    li.trace_structured = torchs
    assert torch._logging.trace_structured is torchs
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


def test_a_filter_on_torchs_trace_logger_drops_records_for_the_bridge_as_for_torchs_file(make_capture):
    """A filter on torch.__trace (here one that drops the artifact records, as a redaction might): torch's own function
    runs, and its logging drops those records for the bridge as for TORCH_TRACE's file. The rest arrives: both
    compiles are traced, with their phases, and no artifact."""
    cap = make_capture("full")

    dropped = []

    def no_artifacts(record: logging.LogRecord) -> bool:
        if "artifact" in getattr(record, "metadata", {}):
            dropped.append(record.metadata["artifact"]["name"])  # type: ignore[attr-defined]
            return False
        return True

    TRACE.addFilter(no_artifacts)
    try:
        with _Count() as count:
            torch.compile(_model(), backend="aot_eager")(torch.randn(4, 8)).sum().backward()
            torch_otel.force_flush()
    finally:
        TRACE.removeFilter(no_artifacts)
    roots = cap.roots(None)
    assert count.n > 0  # torch's function made its logging records, and the filter saw them
    assert {r.attributes["torch.compile.kind"] for r in roots} == {"frame", "backward"}
    kinds = {e.attributes["torch.compile.artifact.kind"] for r in roots for e in r.events if e.name == "torch.compile.artifact"}
    # torch's "artifact" records (the filter dropped some) are gone; records of their own kind (the graphs) are not
    assert dropped and "artifact" not in kinds and "aot_forward_graph" in kinds, (dropped, sorted(kinds))
    assert _phases(cap, next(r for r in roots if r.attributes["torch.compile.kind"] == "frame"))


def test_a_disabled_trace_logger_the_bridge_alone_reads_is_enabled_again_and_put_back(make_capture):
    """torch.__trace disabled (logging.config.dictConfig disables every logger that exists when it runs) while the
    bridge's handler is its only reader: as the next compile starts the bridge turns ``disabled`` off (nobody else
    reads the logger, so nothing anyone sees changes), and every record arrives; uninstrument puts it back."""
    cap = make_capture("full")
    pytests = [h for h in TRACE.handlers if not isinstance(h, _TraceHandler)]  # pytest's log capture: off, as a user's
    for h in pytests:
        TRACE.removeHandler(h)
    TRACE.disabled = True
    try:
        torch.compile(_model(), backend="aot_eager")(torch.randn(4, 8)).sum().backward()
        torch_otel.force_flush()
        assert not TRACE.disabled
        roots = cap.roots(None)
        assert {r.attributes["torch.compile.kind"] for r in roots} == {"frame", "backward"}
        assert [e for r in roots for e in r.events if e.name == "torch.compile.artifact"]
        torch_otel.uninstrument()
        assert TRACE.disabled  # as the application left it
    finally:
        TRACE.disabled = False
        for h in pytests:
            TRACE.addHandler(h)
