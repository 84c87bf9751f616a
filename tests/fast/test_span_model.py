"""Fast tier: the span model has one declaration (torch_otel._sinks.span_model), which the span mapper writes and
``torch-otel diff`` reads back from an exported trace; no torch.compile anywhere.

A name changed on one side only, or an attribute the docs do not name, fails here: records written as spans and read
back sum to the same run summary as the records themselves.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fast.fastkit import frame, metrics
from torch_otel._core.compile_id import parse_compile_id
from torch_otel._core.settings import Settings
from torch_otel._features.cache_lookups.events import CacheLookupEvent, parse_components
from torch_otel._features.cache_lookups.explain import KeyHistory
from torch_otel._features.cache_lookups.state import CacheKeysState
from torch_otel._features.registry import features
from torch_otel._model.events import GraphBreakEvent, RecompileReasonsEvent
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._pipeline.diff_command import read_side
from torch_otel._pipeline.pipeline import Pipeline
from torch_otel._sinks import span_model
from torch_otel._sinks.span_model import METRIC_ATTRIBUTES, Events, Root
from torch_otel._sinks.spans import SpanMapper
from torch_otel._sinks.summary import RunSummary

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> list[str]:
    """The record's own names, and each feature's (its span view's ``names``)."""
    names = [v for c in (Root, Events) for k, v in vars(c).items() if k.isupper()]
    names += [n for k in features() if k.spans is not None for n in k.spans.names]
    return [n for n in names if "." in n] + list(METRIC_ATTRIBUTES.values())


def _documented(name: str, doc: str) -> bool:
    """In full, or as docs/span-model.md abbreviates a group: its prefix in full and ``.last`` (``.result``)."""
    if f"`{name}`" in doc or f"{name} =" in doc:
        return True
    prefix, _, last = name.rpartition(".")
    return bool(prefix) and prefix in doc and re.search(rf"`[^`\s]*\.{re.escape(last)}`", doc) is not None


def test_every_name_the_span_model_declares_is_in_the_span_model_docs():
    doc = (ROOT / "docs" / "span-model.md").read_text()
    names = _declared()
    assert len(names) >= 50
    assert [n for n in names if not _documented(n, doc)] == []


def test_the_check_itself_finds_a_name_the_docs_do_not_have():
    doc = (ROOT / "docs" / "span-model.md").read_text()
    assert not _documented("torch.compile.renamed_attribute", doc)
    assert not _documented("torch.compile.cache.renamed", doc)


def _records_through_spans(path: Path) -> dict[str, Any]:
    """Compiles of every shape the diff reads (recompiles, graph breaks, a failure, cache lookups with their misses
    explained), through the span mapper into an OTLP-JSON file; the run summary of the records themselves."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(path), setting="test")))
    summary = RunSummary("live")
    mapper = SpanMapper(provider.get_tracer("t"), Settings(), live=False)
    pipeline = Pipeline([summary], tracing=mapper, states={"cache_lookups": CacheKeysState(KeyHistory())})
    asm = pipeline.assembler()
    parts = ["[h1] gm: GraphModule()", "[h2] inductor_config[size_asserts]: True"]
    t = 0
    for i in range(3):  # a frame that keeps recompiling, its shape each time
        cid = f"0/{i}"
        for ev in frame(
            cid, t, t + 1_000_000, ("bytecode_tracing", t + 10, t + 500_000), ("inductor_compile", t + 500_010, t + 900_000)
        ):
            asm.feed(ev)
        key_parts = (*parts[:1], f"[s{i}] example_inputs[0]: TensorMetadata(dtype=torch.float32, shape=torch.Size([{i + 1}, 4]))")
        asm.feed(
            CacheLookupEvent(
                parse_compile_id(cid),
                "fx_graph",
                "miss",
                key=f"k{i}",
                components=parse_components(list(key_parts)),
                ts_ns=t + 600_000,
            )
        )
        if i:
            asm.feed(
                RecompileReasonsEvent(
                    parse_compile_id(cid), [f"tensor 'x' size mismatch at index 0. expected {i}, actual {i + 1}"]
                )
            )
        reason = {"recompile_reason": f"tensor 'x' size mismatch at index 0. expected {i}, actual {i + 1}"} if i else {}
        asm.feed(
            metrics(
                cid,
                co_name="fwd",
                co_filename="/src/model.py",
                co_firstlineno=30,
                cache_size=i,
                duration_us=900 + i,
                guard_count=3,
                **reason,
            )
        )
        t += 2_000_000
    for ev in frame("1/0", t, t + 700_000, ("bytecode_tracing", t + 1, t + 300_000)):
        asm.feed(ev)
    asm.feed(
        GraphBreakEvent(
            parse_compile_id("1/0"), "Graph Break Reason: print", "Unsupported builtin", "/src/model.py", 41, ts_ns=t + 5
        )
    )
    asm.feed(metrics("1/0", co_name="loss", co_filename="/src/model.py", co_firstlineno=40, duration_us=600))
    t += 1_000_000
    for ev in frame("2/0", t, t + 500_000):
        asm.feed(ev)
    asm.feed(
        metrics("2/0", co_name="bad", co_filename="/src/model.py", co_firstlineno=90, fail_type="Unsupported", fail_reason="nope")
    )
    asm.flush()
    provider.shutdown()
    return summary.to_dict()


def test_records_written_as_spans_and_read_back_sum_to_the_same_run_summary(tmp_path):
    path = tmp_path / "spans.jsonl"
    direct = _records_through_spans(path)
    err = io.StringIO()
    side, code, _ = read_side(str(path), err)
    assert side is not None and code == 0, err.getvalue()
    read_back = side.summary
    assert direct["compiles"] == 5 and direct["recompiles"]["total"] == 2 and direct["graph_breaks"]["total"] == 1
    assert direct["failures"]["total"] == 1 and direct["caches"]["misses"] == 3
    for key in ("compiles", "by_kind", "wall_s", "frames", "phases", "recompiles", "graph_breaks", "failures"):
        assert read_back[key] == direct[key], key
    for key in ("recompile_limit_hits", "eager_fallbacks", "recompiling_frames", "caches", "cache", "slowest"):
        assert read_back[key] == direct[key], key


def test_the_span_model_module_declares_what_the_reader_reads():
    """The reader names no attribute of its own: every string it compares with comes from the declaration."""
    source = Path(span_model.__file__).read_text()
    reader = source[source.index("def record_of_spans(") :]
    literals = set(re.findall(r'"((?:torch|code|error|exception)\.[\w.]+)"', reader))
    assert literals == set(), literals
