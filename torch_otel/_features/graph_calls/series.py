"""Graph calls' metric series: calls per frame and pass, and the compile seconds of compiles that never paid off,
read from the live counters when collected (torch_otel._features.graph_calls.state), never observed per compile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ..views import Observation, Series

__all__ = ["DETAIL_FRAMES", "FURTHER_FRAMES", "SERIES", "sampled"]


DETAIL_FRAMES = 32  # frames with a label of their own on a detail rank
FURTHER_FRAMES = 4  # and on any other rank (the fleet's series budget: docs/metrics.md)

SERIES = (
    Series(
        "torch_compile_graph_calls",
        "counter",
        "Calls of compiled graphs since they were compiled, by frame (tlparse's frame id: the first 32 frames on a "
        "detail rank, 4 on the others, then other) and pass (forward: dynamo's graph; backward: AOTAutograd's).",
        ("rank", "frame", "pass"),
    ),
    Series(
        "torch_compile_dead_compile_seconds",
        "gauge",
        "Compile seconds of the compiles whose graphs ran at most once so far (the call that compiled them): "
        "recompiles that did not pay off (docs/metrics.md).",
        ("rank",),
        "s",
    ),
)


class Compiles(Protocol):
    """What the series read: the compiles whose graphs are counted (the live state)."""

    compiles: list[Any]

    def frames(self, limit: int) -> dict[tuple[str, str], int]: ...

    def dead_compile_s(self) -> float: ...


def sampled(graphs: Compiles, rank: str, detail: bool) -> Iterator[Observation]:
    """What the counters stand at now (counters as totals: the metrics add their growth), with ``rank`` the rank's
    label and ``detail`` whether it is a detail rank."""
    if not graphs.compiles:
        return
    for (frame, pass_), n in sorted(graphs.frames(DETAIL_FRAMES if detail else FURTHER_FRAMES).items()):
        yield "torch_compile_graph_calls", (rank, frame, pass_), n, None
    yield "torch_compile_dead_compile_seconds", (rank,), round(graphs.dead_compile_s(), 6), None
