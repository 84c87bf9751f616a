"""A feature with live state, as a plugin author writes one: how often a library's ``Factory.make`` ran.

Its module (this package) declares everything: its row of live capture's attach table, whose hook is its live
state's own function; its state, which counts each call and whose counter is read when collected (before each
scrape of ``/metrics``); its series; its part of the run summary (a line that leads the text, one in its body, its
JSON and how that adds up over ranks); its comparison in ``torch-otel diff`` with a gate condition; its part of the
HTML pages; what it starts with the process (at_start). tests/fast/test_features.py adds it through one row of the
features' registry and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch_otel.features import (  # the public extension point alone: a feature of a user's own can be this one
    AttachTarget,
    Condition,
    DiffView,
    Feature,
    FeatureState,
    Merge,
    MethodHook,
    MetricsView,
    Observation,
    PageView,
    Series,
    Source,
    StateContext,
    SummaryView,
    num,
    sum_int,
)

from . import at_start

NAME = "widget_calls"
SERIES = Series("torch_compile_widgets_made", "counter", "Widgets the library made (a feature of a test).", ("rank",))


class WidgetState(FeatureState):
    """The live state: its hook counts each call; the count is read when the pipeline collects."""

    def __init__(self) -> None:
        self.made = 0
        self.collected = 0  # how many times the pipeline read it
        self.started = list(at_start.STARTED)  # what began with the process, if its row starts it (adopted)

    def counting(self, make: Callable[..., Any]) -> Callable[..., Any]:
        """The hook its row puts in front of ``Factory.make``: torch's function in, the counting one out."""
        state = self

        def counted(factory: Any, *args: Any, **kwargs: Any) -> Any:
            state.made += 1
            return make(factory, *args, **kwargs)

        return counted

    def collect(self) -> Iterator[Observation]:
        self.collected += 1
        yield SERIES.name, ("0",), self.made, None


def make_state(ctx: StateContext) -> WidgetState | None:
    return WidgetState() if ctx.source == "live" else None


def _state(cap: AttachTarget) -> WidgetState:
    state: WidgetState = cap.state(NAME)
    return state


ROWS: tuple[Source[AttachTarget], ...] = (
    MethodHook(
        "widget_calls",
        "how often the library's Factory.make ran",
        "widgets",  # the library the test makes (no torch in the fast tier)
        owner="Factory",
        attr="make",
        hook=lambda cap: _state(cap).counting,
    ),
)


class WidgetPart:
    """Its part of one run summary: the count its state stands at when the summary is written."""

    def __init__(self, state: WidgetState | None) -> None:
        self.state = state

    def add(self, record: Any) -> None:
        return None

    def to_dict(self, facts: Mapping[str, Any]) -> Any:
        return {"made": self.state.made} if self.state is not None else None


def _made(facts: Mapping[str, Any]) -> int:
    return int(num((facts.get(NAME) or {}).get("made")))


def _compare(b: Mapping[str, Any], n: Mapping[str, Any]) -> dict[str, int]:
    return {"base": _made(b), "new": _made(n)}


def _fewer(c: Any, thresholds: tuple[float | None, float | None]) -> list[str]:
    return [f"fewer widgets made: {c['base']} -> {c['new']}"] if c["new"] < c["base"] else []


FEATURE = Feature(
    NAME,
    hooks=ROWS,
    state=make_state,
    metrics=MetricsView((SERIES,)),
    summary=SummaryView(
        NAME,
        WidgetPart,
        lambda facts, width: [f"widgets made: {_made(facts)}"],
        Merge(section={"made": Merge(sum_int)}),
        head=lambda facts, width: [f"widget calls lead the summary: {_made(facts)} made"],
        optional=True,  # a summary with no state (a replay) has no key for it
    ),
    diff=DiffView(
        NAME,
        _compare,
        lambda c, width: [f"widgets made: {c['base']} -> {c['new']}"],
        conditions=(Condition("widgets", _fewer),),
    ),
    page=PageView(__name__, "page.js"),
)
