"""The attach table's seam with live capture: every row's hook resolves on a real capture, and the bridge's own
error while attaching is never reported as something the user's torch lacks. No compile, no attach to torch."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

import pytest

from torch_otel._assemble.assembler import Assembler
from torch_otel._attach import attaching, points
from torch_otel._capture.attach_table import rows
from torch_otel._capture.live_capture import LiveCapture
from torch_otel._core import errors as _internal
from torch_otel._core.settings import Settings
from torch_otel._pipeline.build import PipelineSpec, build_pipeline


def _hook_refs(src: points.Source) -> list[object]:
    refs: list[object] = []
    for f in fields(src):
        value = getattr(src, f.name)
        if f.name == "attrs":
            refs.extend(hook for _, hook in value)
        elif f.name in ("hook", "handler", "obj"):
            refs.append(value)
    return refs


def _live_capture() -> LiveCapture:
    """A live capture with its pipeline's features' states (a feature's row names its state's hook)."""
    pipeline = build_pipeline(PipelineSpec("live", Settings(metrics=False, cache_index="off", graph_calls=True)))
    return LiveCapture(pipeline.assembler(), states=pipeline.states)


@pytest.mark.parametrize("src", rows(), ids=lambda s: s.name)
def test_every_rows_hook_is_a_member_of_the_live_capture_or_its_features_state(src):
    cap = _live_capture()
    refs = _hook_refs(src)
    if isinstance(src, (points.FunctionHook, points.StaticMethodHook, points.LoggerHook, points.ObjectHook)):
        assert refs, f"{src.name} names no hook of the capture"
    for ref in refs:
        hook = ref(cap)  # type: ignore[operator]
        assert hook is not None, src.name
        if isinstance(src, points.LoggerHook):
            assert isinstance(hook, logging.Handler)
        elif isinstance(src, points.ObjectHook):
            assert callable(hook.hook) and callable(hook.unhook)
        else:
            assert callable(hook)


@dataclass(frozen=True)
class _Broken(points.Source):
    """A row whose attach fails on the bridge's side (a misspelt hook would, were it not typed)."""

    def attach(self, cap: object) -> bool:
        raise AttributeError("'LiveCapture' object has no attribute '_recompilation_reasonz'")

    def detach(self, cap: object) -> None:
        return None


@dataclass(frozen=True)
class _Lacking(points.Source):
    """A row whose attach point this torch does not have."""

    def attach(self, cap: object) -> bool:
        return False

    def detach(self, cap: object) -> None:
        return None


def test_an_error_while_attaching_is_the_bridges_and_never_blamed_on_torch(caplog):
    cap = LiveCapture(Assembler([]))
    before = _internal.internal_error_count()
    broken, lacking = _Broken("broken_row", "something", "logging"), _Lacking("lacking_row", "another thing", "logging")
    with caplog.at_level(logging.WARNING):
        out = attaching.attach_all(cap, "2.13.0", [broken, lacking])  # type: ignore[arg-type]
    assert out.rows == [] and out.lacking == [lacking]
    assert _internal.internal_error_count() == before + 1  # counted as the bridge's own error
    lines = [r.getMessage() for r in caplog.records if "lacks what torch-otel attaches to" in r.getMessage()]
    assert any("another thing (lacking_row)" in line for line in lines)
    assert not any("broken_row" in line for line in lines)


def test_detach_leaves_a_users_functools_wraps_wrapper_of_a_hook_in_place(monkeypatch):
    """``functools.wraps`` copies a function's attributes onto its wrapper, the hook's mark among them: a user's wrapper
    of the capture's method, set in its place after attach, is not the capture's, and detach leaves it there."""
    import functools
    import sys
    import types

    class Widget:
        def make(self) -> str:
            return "torch's"

    torch_make = Widget.__dict__["make"]
    mod = types.ModuleType("widget_lib")
    mod.Widget = Widget  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "widget_lib", mod)

    def hook(cap: object):  # type: ignore[no-untyped-def]
        def wrap(fn):  # type: ignore[no-untyped-def]
            def ours(self):  # type: ignore[no-untyped-def]
                return "ours, then " + fn(self)

            return ours

        return wrap

    row = points.MethodHook("widget", "a widget", "widget_lib", owner="Widget", attr="make", hook=hook)

    class Cap:
        originals: dict = {}

    cap = Cap()
    assert row.attach(cap) and Widget().make() == "ours, then torch's"
    assert row.attach(cap)  # attached already: not wrapped twice
    assert Widget().make() == "ours, then torch's"
    ours = Widget.__dict__["make"]
    users = functools.wraps(ours)(lambda self: "the user's, then " + ours(self))
    Widget.make = users  # type: ignore[method-assign]
    row.detach(cap)
    assert Widget.__dict__["make"] is users  # still the user's
    Widget.make = ours  # type: ignore[method-assign]
    cap.originals["widget_lib.Widget.make"] = torch_make
    row.detach(cap)  # the capture's own, found in place: torch's goes back
    assert Widget.__dict__["make"] is torch_make
