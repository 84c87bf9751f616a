"""Builders for the fast tier: typed events one line each, a sink that keeps what it is handed, a tree outline, and
``TORCH_TRACE`` logs record by record as torch's structured logger writes them.

A phase tree is written as nested tuples ``(name, start_ns, end_ns, *children)``; :func:`phases` turns it into
the begin/end events torch would log, in time order. Nothing here touches torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

from torch_otel._assemble.assembler import Assembler
from torch_otel._core.compile_id import CompileId, parse_compile_id
from torch_otel._model.events import MetricsEvent, PhaseEvent
from torch_otel._model.record import CompileRecord, PhaseNode, Sink

# (name, start_ns, end_ns, *children)
Tree = tuple[Any, ...]
Events = object | Iterable[object]


def cid(text: str | None) -> CompileId | None:
    """A compile id as tlparse prints it (``0/1``, ``!0/-/-``, ``!1/0/0``); None stays None."""
    if text is None:
        return None
    parsed = parse_compile_id(text)
    assert parsed is not None, text
    return parsed


def B(compile_id: str | None, name: str, ts_ns: int, **kw: Any) -> PhaseEvent:
    return PhaseEvent(cid(compile_id), name, "B", ts_ns, **kw)


def E(compile_id: str | None, name: str, ts_ns: int, **kw: Any) -> PhaseEvent:
    return PhaseEvent(cid(compile_id), name, "E", ts_ns, **kw)


def instant(compile_id: str | None, name: str, ts_ns: int, **kw: Any) -> PhaseEvent:
    return PhaseEvent(cid(compile_id), name, "i", ts_ns, **kw)


def phases(compile_id: str | None, *trees: Tree, **kw: Any) -> list[PhaseEvent]:
    """The begin/end events of each ``(name, start, end, *children)`` tree, children between their parent's."""
    out: list[PhaseEvent] = []
    for name, start, end, *children in trees:
        out.append(B(compile_id, name, start, **kw))
        out.extend(phases(compile_id, *children, **kw))
        out.append(E(compile_id, name, end, **kw))
    return out


def frame(
    compile_id: str | None, t0: int, t1: int, *children: Tree, root: str = "dynamo", final: bool = False, **kw: Any
) -> list[PhaseEvent]:
    """A whole compile: its root (``dynamo`` unless told) from ``t0`` to ``t1`` around ``children``."""
    return [
        B(compile_id, root, t0, **kw),
        *phases(compile_id, *children, **kw),
        E(compile_id, root, t1, final=final, **kw),
    ]


def metrics(compile_id: str | None, forward: bool = True, **fields: Any) -> MetricsEvent:
    return MetricsEvent(cid(compile_id), fields, is_forward=forward)


def flatten(events: Iterable[Events]) -> list[object]:
    out: list[object] = []
    for ev in events:
        if isinstance(ev, (list, tuple)):
            out.extend(flatten(ev))
        else:
            out.append(ev)
    return out


class Collect(Sink):
    """Keeps every record (and orphan log) it is handed, in order."""

    def __init__(self) -> None:
        self.started: list[CompileRecord] = []
        self.started_ids: list[tuple[str, str]] = []  # (kind, compile id) as each record began
        self.finished: list[CompileRecord] = []
        self.orphan_logs: list[Any] = []

    def on_start(self, record: CompileRecord) -> None:
        self.started.append(record)
        self.started_ids.append((record.kind, record.id_str))

    def on_finish(self, record: CompileRecord) -> None:
        self.finished.append(record)

    def on_orphan_log(self, event: Any) -> None:
        self.orphan_logs.append(event)

    def only(self) -> CompileRecord:
        assert len(self.finished) == 1, [(r.kind, r.id_str) for r in self.finished]
        return self.finished[0]

    def ids(self) -> list[tuple[str, str]]:
        """(kind, compile id) of each finished record, in the order they finished."""
        return [(r.kind, r.id_str) for r in self.finished]


def feed(*events: Events, max_open: int = 256) -> tuple[Assembler, Collect]:
    """A fresh assembler with one collecting sink, fed ``events`` (lists are flattened)."""
    sink = Collect()
    asm = Assembler(sinks=[sink], max_open=max_open)
    for ev in flatten(events):
        asm.feed(ev)  # type: ignore[arg-type]
    return asm, sink


def outline(node: PhaseNode) -> list[tuple[str, int, int | None]]:
    """The tree depth-first as ``(indented name, start_ns, end_ns)``: two spaces per level."""
    return [("  " * depth + n.name, n.start_ns, n.end_ns) for n, depth in node.walk()]


def duration(node: PhaseNode) -> int:
    assert node.end_ns is not None
    return node.end_ns - node.start_ns


def find(node: PhaseNode, name: str) -> list[PhaseNode]:
    """Every node of that name in the tree, depth-first."""
    return [n for n, _ in node.walk() if n.name == name]


# -- TORCH_TRACE logs, record by record -------------------------------------------------------------------------


def header(md: dict[str, Any], clock: str = "0101 00:00:01.000000", pid: int = 4242) -> bytes:
    """A record's first line, as torch's structured logger writes it."""
    return f"V{clock} {pid} torch/_logging/structured.py:28] {json.dumps(md)}".encode()


def record(md: dict[str, Any], payload: Any = None, clock: str = "0101 00:00:01.000000", pid: int = 4242) -> list[bytes]:
    """A record and its payload lines (a dict or list is written as torch does: indented JSON, one item a line)."""
    lines = [header(md, clock, pid)]
    if payload is not None:
        text = payload if isinstance(payload, str) else json.dumps(payload, indent=0)
        lines += [b"\t" + line.encode() for line in text.split("\n")]
    return lines


def chromium(name: str, ph: str, ts_us: float, compile_id: str = "0/0", clock: str = "0101 00:00:01.000000") -> list[bytes]:
    fid, fcid = (int(x) for x in compile_id.split("/"))
    md = {"chromium_event": {}, "frame_id": fid, "frame_compile_id": fcid, "attempt": 0, "has_payload": "0b302f70"}
    event = {"name": name, "ts": ts_us, "args": {"compile_id": compile_id}, "ph": ph, "cat": "dynamo_timed", "tid": 0, "pid": 0}
    return record(md, event, clock)


def log(*records: list[bytes]) -> bytes:
    return b"\n".join(line for rec in records for line in rec) + b"\n"


class KeptMetrics(MetricExporter):
    """A metric exporter that keeps what it is given (a reader's every collection)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exports: list[Any] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.exports.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass
