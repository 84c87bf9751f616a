"""Fast tier: structured-trace records -> typed events (``torch_otel._parse``), no torch.compile anywhere.

Each record is shaped as torch writes it in a TORCH_TRACE log (metadata dict + payload text); the shapes are
taken from the real logs under tests/data (tlparse-corpus, cold-cache-cpp-3-ranks). Run the tier with::

    .venv/bin/python -m pytest tests/fast
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.fast.fastkit import cid
from torch_otel._model.events import (
    ArtifactEvent,
    GraphBreakEvent,
    GraphScheduleEvent,
    MetricsEvent,
    PhaseEvent,
    RecompileReasonsEvent,
    StartEvent,
)
from torch_otel._parse.records import GENERIC_RECORDS, HANDLERS, RecordError, chromium_to_event, metrics_to_event, parse_record

IDS = {"rank": 0, "frame_id": 0, "frame_compile_id": 1, "attempt": 0}


def chromium(event: dict[str, Any], **md: Any) -> tuple[dict[str, Any], str]:
    """A chromium_event record: torch writes the event as indented JSON in the payload."""
    return {"chromium_event": {}, **md, "has_payload": "897e009fb10313f3c31180aa5e475665"}, json.dumps(event, indent=0)


def artifact(name: str, payload: str | None, encoding: str = "json", **md: Any) -> tuple[dict[str, Any], str | None]:
    return {"artifact": {"name": name, "encoding": encoding}, **md}, payload


# -- chromium events ----------------------------------------------------------------------------------------------

DYNAMO_B = {"name": "dynamo", "ts": 1500.5, "args": {"compile_id": "0/0"}, "ph": "B", "cat": "dynamo_timed", "tid": 0, "pid": 0}


def test_a_chromium_event_is_a_phase_event_keyed_by_its_records_ids():
    kind, events = parse_record(*chromium(DYNAMO_B, **IDS))
    assert kind == "chromium_event"
    assert events == [PhaseEvent(cid("0/1"), "dynamo", "B", 1_500_500, {"compile_id": "0/0"}, 0, 0)]  # ids: the record's


def test_a_chromium_events_own_compile_id_is_the_fallback_and_none_means_none():
    (ev,) = parse_record(*chromium({**DYNAMO_B, "args": {"compile_id": "3/2"}}))[1]
    assert ev.compile_id == cid("3/2") and ev.rank is None and ev.attempt == 0
    (worker,) = parse_record(*chromium({"name": "compile_file", "ts": 7, "ph": "E", "args": {"compile_id": "None"}}))[1]
    assert worker.compile_id is None and worker.ts_ns == 7_000


def test_a_chromium_events_attempt_and_rank_come_from_the_record():
    (ev,) = parse_record(*chromium(DYNAMO_B, frame_id=2, frame_compile_id=0, attempt=1, rank=5))[1]
    assert (ev.compile_id, ev.attempt, ev.rank) == (cid("2/0"), 1, 5)
    (ev,) = parse_record(*chromium(DYNAMO_B, rank=True))[1]  # a bool is no rank
    assert ev.rank is None


def test_compiled_autograd_ids_come_from_the_record():
    (ev,) = parse_record(*chromium({**DYNAMO_B, "name": "compiled_autograd"}, compiled_autograd_id=1))[1]
    assert str(ev.compile_id) == "!1/-/-"
    (ev,) = parse_record(*chromium(DYNAMO_B, compiled_autograd_id=1, frame_id=0, frame_compile_id=0))[1]
    assert str(ev.compile_id) == "!1/0/0"


def test_chromium_to_event_reads_a_live_hooks_dict():
    ev = chromium_to_event({"name": "inductor_compile", "ts": 12.25, "ph": "i", "args": "not a dict"}, attempt=2, rank=1)
    assert (ev.compile_id, ev.name, ev.ph, ev.ts_ns, ev.args, ev.attempt, ev.rank) == (
        None,
        "inductor_compile",
        "i",
        12_250,
        {},
        2,
        1,
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (None, "chromium_event without payload"),
        ("", "chromium_event without payload"),
        ('{"name": "dynamo", "ts": 1', "chromium_event payload is not JSON"),
        ("[1, 2]", "chromium event is not an object"),
        ('{"name": "dynamo", "ts": 1, "ph": "Q"}', "chromium event lacks name/ph/ts"),
        ('{"name": "dynamo", "ts": "1", "ph": "B"}', "chromium event lacks name/ph/ts"),
        ('{"ts": 1, "ph": "B"}', "chromium event lacks name/ph/ts"),
    ],
)
def test_a_malformed_chromium_record_raises_record_error(payload, message):
    with pytest.raises(RecordError, match=message):
        parse_record({"chromium_event": {}, **IDS}, payload)


# -- compilation metrics ------------------------------------------------------------------------------------------

METRICS = {
    "compile_id": "0/0",
    "frame_key": "1",
    "co_name": "fn",
    "co_filename": "/tmp/research15/worker.py",
    "co_firstlineno": 75,
    "cache_size": 0,
    "guard_count": 10,
    "is_forward": True,
    "is_runtime": False,
}


def test_compilation_metrics_are_a_metrics_event_with_the_functions_of_their_stack():
    stack = [{"line": 1, "name": "main", "filename": 0}, {"line": 9, "name": "_export", "filename": 1}, {"line": 3}]
    kind, (ev,) = parse_record(
        {"compilation_metrics": METRICS, "rank": 2, "frame_id": 0, "frame_compile_id": 0, "attempt": 1, "stack": stack}, None
    )
    assert kind == "compilation_metrics"
    assert isinstance(ev, MetricsEvent)
    assert (ev.compile_id, ev.fields, ev.is_forward, ev.is_runtime, ev.rank, ev.attempt) == (
        cid("0/0"),
        METRICS,
        True,
        False,
        2,
        1,
    )
    assert ev.stack_functions == ("main", "_export")


def test_backward_metrics_and_the_payloads_compile_id_as_fallback():
    kind, (ev,) = parse_record({"bwd_compilation_metrics": {**METRICS, "compile_id": "4/1", "is_forward": False}}, None)
    assert (kind, ev.compile_id, ev.is_forward, ev.attempt, ev.stack_functions) == (
        "bwd_compilation_metrics",
        cid("4/1"),
        False,
        0,
        (),
    )


def test_metrics_to_event_reads_a_live_metrics_dict():
    ev = metrics_to_event({"compile_id": "1/0", "is_runtime": True, "is_forward": None}, rank=3)
    assert (ev.compile_id, ev.is_forward, ev.is_runtime, ev.rank) == (cid("1/0"), True, True, 3)
    assert metrics_to_event({"compile_id": "None"}).compile_id is None


def test_metrics_that_are_not_an_object_raise_record_error():
    with pytest.raises(RecordError, match="compilation_metrics is not an object"):
        parse_record({"compilation_metrics": [1, 2], **IDS}, None)


# -- artifacts ----------------------------------------------------------------------------------------------------


def test_recompile_reasons_as_torch_logs_them_a_json_list():
    payload = '[\n"0/0: ___check_obj_id(fn, 140439264606080)                   "\n]'
    kind, events = parse_record(*artifact("recompile_reasons", payload, **IDS))
    assert kind == "artifact"
    assert events == [RecompileReasonsEvent(cid("0/1"), ["0/0: ___check_obj_id(fn, 140439264606080)                   "], 0, 0)]


@pytest.mark.parametrize(
    ("payload", "reasons"),
    [
        (
            "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8",
            ["0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8"],
        ),
        ('"0/0: a reason written as a JSON string"', ["0/0: a reason written as a JSON string"]),
        ('["0/0: a", 3]', ["0/0: a", "3"]),
    ],
)
def test_a_single_recompile_reason_is_its_bare_text(payload, reasons):
    (ev,) = parse_record(*artifact("recompile_reasons", payload, encoding="string"))[1]
    assert ev.reasons == reasons


@pytest.mark.parametrize("payload", [None, '{"0/0": "reason"}', "12"])
def test_recompile_reasons_that_are_no_list_raise_record_error(payload):
    with pytest.raises(RecordError, match="recompile_reasons payload is not a list"):
        parse_record(*artifact("recompile_reasons", payload))


def test_compiled_autograd_compile_reasons_lose_their_graph_prefix():
    payload = json.dumps(["!1: Cache miss due to new autograd node: torch::autograd::GraphRoot (NodeCall 0)"])
    (ev,) = parse_record(*artifact("compiled_autograd_compile_reasons", payload, compiled_autograd_id=1))[1]
    assert ev == RecompileReasonsEvent(
        cid("!1"), ["Cache miss due to new autograd node: torch::autograd::GraphRoot (NodeCall 0)"]
    )
    with pytest.raises(RecordError, match="artifact payload is not JSON"):
        parse_record(*artifact("compiled_autograd_compile_reasons", "!1: Cache miss"))
    with pytest.raises(RecordError, match="compiled_autograd_compile_reasons payload is not a list"):
        parse_record(*artifact("compiled_autograd_compile_reasons", '"!1: Cache miss"'))


def test_an_inductor_collective_schedule_is_a_schedule_event():
    payload = '[\n"torch.ops._c10d_functional.all_reduce_.default",\n"torch.ops._c10d_functional.wait_tensor.default"\n]'
    (ev,) = parse_record(*artifact("inductor_collective_schedule", payload, **IDS))[1]
    assert ev == GraphScheduleEvent(
        cid("0/1"),
        ["torch.ops._c10d_functional.all_reduce_.default", "torch.ops._c10d_functional.wait_tensor.default"],
        None,
        0,
        0,
    )
    with pytest.raises(RecordError, match="inductor_collective_schedule payload is not a list"):
        parse_record(*artifact("inductor_collective_schedule", '{"ops": []}'))


def _tensor_meta(runtime_ns: float, size: list[int]) -> str:
    op = {"name": "extern_kernels.mm", "type": "compute", "estimated_runtime_ns": runtime_ns}
    op["outputs"] = [{"shape": size, "stride": [size[1], 1], "dtype": "torch.float32"}]
    return json.dumps({"ops": [op]}, indent=0)


def test_inductor_tensor_meta_is_a_digest_of_the_outputs_without_runtime_estimates():
    (a,) = parse_record(*artifact("inductor_runtime_and_tensor_meta", _tensor_meta(6885841.87, [4, 4]), **IDS))[1]
    (b,) = parse_record(*artifact("inductor_runtime_and_tensor_meta", _tensor_meta(1.0, [4, 4]), **IDS))[1]
    (c,) = parse_record(*artifact("inductor_runtime_and_tensor_meta", _tensor_meta(1.0, [8, 4]), **IDS))[1]
    assert isinstance(a, GraphScheduleEvent) and a.collectives == [] and a.compile_id == cid("0/1")
    assert a.tensor_meta is not None and len(a.tensor_meta) == 16
    assert a.tensor_meta == b.tensor_meta != c.tensor_meta
    with pytest.raises(RecordError, match="has no list of ops"):
        parse_record(*artifact("inductor_runtime_and_tensor_meta", '{"ops": 3}'))


GRAPH_BREAK = """Graph break in user code at /w/model.py:12
Graph Break Reason: Unsupported Tensor.item() call with capture_scalar_outputs=False
  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.
  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`

  Developer debug context: call_method TensorVariable() item () {}

User code traceback:
  File "/w/model.py", line 12, in fn
    y = x.item()

Traceback (most recent call last):
  File "torch/_dynamo/symbolic_convert.py", line 1, in step
torch._dynamo.exc.Unsupported: ..."""


def test_a_graph_break_reason_keeps_torchs_reason_and_the_users_file_line_not_the_traceback():
    (ev,) = parse_record(*artifact("dynamo_graph_break_reason", GRAPH_BREAK, encoding="string", **IDS))[1]
    assert isinstance(ev, GraphBreakEvent)
    assert ev.reason.startswith("Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation:")
    assert ev.reason.endswith("Developer debug context: call_method TensorVariable() item () {}")
    assert "y = x.item()" not in ev.reason  # the user's source lines are never kept
    assert (ev.gb_type, ev.filename, ev.lineno, ev.skipped_frame) == (
        "Unsupported Tensor.item() call with capture_scalar_outputs=False",
        "/w/model.py",
        12,
        False,
    )
    assert (ev.compile_id, ev.attempt, ev.rank, ev.ts_ns) == (cid("0/1"), 0, 0, None)


def test_any_other_artifact_is_an_artifact_event_with_size_digest_and_encoding():
    payload = "import torch\nclass Repro(torch.nn.Module): ..."
    md = {
        "artifact": {"name": "fx_graph_runnable", "encoding": "string"},
        **IDS,
        "has_payload": "8e7abb01bacf1f8ba926f98b62369acd",
    }
    (ev,) = parse_record(md, payload)[1]
    assert ev == ArtifactEvent(
        cid("0/1"),
        "artifact",
        "fx_graph_runnable",
        len(payload),
        "8e7abb01bacf1f8ba926f98b62369acd",
        payload,
        {"encoding": "string"},
        0,
        0,
    )


def test_an_artifact_without_has_payload_is_hashed_and_one_without_payload_has_none():
    (ev,) = parse_record({"artifact": {"name": "torch_version", "encoding": "json"}}, '{"pytorch_version": "2.13.0+cpu"}')[1]
    assert ev.digest == hashlib.md5(b'{"pytorch_version": "2.13.0+cpu"}').hexdigest()  # as torch's has_payload
    assert ev.compile_id is None and ev.payload == '{"pytorch_version": "2.13.0+cpu"}'
    (bare,) = parse_record({"artifact": {"name": "inductor_provenance_tracking_node_mappings", "encoding": "json"}, **IDS}, None)[
        1
    ]
    assert (bare.size, bare.digest, bare.payload) == (0, None, None)


def test_payload_size_fills_the_size_of_a_payload_the_reader_did_not_keep():
    md = {"artifact": {"name": "fx_graph_runnable", "encoding": "string"}, **IDS, "has_payload": "8e7a"}
    (ev,) = parse_record(md, None, payload_size=4096)[1]
    assert (ev.size, ev.payload, ev.digest) == (4096, None, "8e7a")
    (kept,) = parse_record(md, "abc", payload_size=4096)[1]
    assert kept.size == 3  # a kept payload is measured itself


@pytest.mark.parametrize("value", [{"encoding": "json"}, {"name": 3}, "fx_graph_runnable", None])
def test_an_artifact_without_a_name_raises_record_error(value):
    with pytest.raises(RecordError, match="artifact without a name"):
        parse_record({"artifact": value, **IDS}, "x")


# -- the generic kinds, dynamo_start, str, and the rest --------------------------------------------------------------


@pytest.mark.parametrize("kind", GENERIC_RECORDS)
def test_each_generic_kind_is_a_named_artifact_with_its_numeric_fields(kind):
    value = {"sizes": {"l_x_": [4, 8]}, "ndim": 2, "is_leaf": True, "dtype": "torch.float32", "size": 128.5}
    md = {kind: value, **IDS, "has_payload": "42d1762ca6cd7ca79afce4a0b1b835fc"}
    got_kind, (ev,) = parse_record(md, "class GraphModule(torch.nn.Module): ...")
    assert got_kind == kind
    assert ev == ArtifactEvent(
        cid("0/1"),
        kind,
        kind,
        len("class GraphModule(torch.nn.Module): ..."),
        "42d1762ca6cd7ca79afce4a0b1b835fc",
        "class GraphModule(torch.nn.Module): ...",
        {"ndim": 2, "is_leaf": True, "size": 128.5},
        0,
        0,
    )


def test_a_generic_kind_takes_the_name_its_record_gives():
    (ev,) = parse_record({"graph_dump": {"name": "pre_grad"}, **IDS}, "graph():")[1]
    assert (ev.record_type, ev.name) == ("graph_dump", "pre_grad")
    (ev,) = parse_record({"describe_source": "not a dict"}, None)[1]
    assert (ev.record_type, ev.name, ev.attributes) == ("describe_source", "describe_source", {})


def test_every_kind_in_the_table_parses_a_minimal_record():
    parsed = {}
    for kind in HANDLERS:
        value: Any = {"name": "fx_graph_runnable"} if kind == "artifact" else {}
        md = {kind: value, **IDS}
        payload = json.dumps(DYNAMO_B) if kind == "chromium_event" else None
        parsed[kind] = [type(ev).__name__ for ev in parse_record(md, payload)[1] or []]
    assert parsed.pop("chromium_event") == ["PhaseEvent"]
    assert parsed.pop("compilation_metrics") == parsed.pop("bwd_compilation_metrics") == ["MetricsEvent"]
    # a compiled graph's runtime record, as log_compilation_event hands it live
    assert parsed.pop("compilation_metrics_runtime") == parsed.pop("bwd_compilation_metrics_runtime") == ["MetricsEvent"]
    assert parsed.pop("dynamo_start") == ["StartEvent"]
    assert parsed.pop("str") == []
    assert set(map(tuple, parsed.values())) == {("ArtifactEvent",)}


def test_str_records_are_interned_and_dynamo_start_frames_get_their_file_names():
    interned: dict[int, str] = {}
    assert parse_record({"str": ["/work/main/torch/_dynamo/convert_frame.py", 0]}, None, interned) == ("str", [])
    assert parse_record({"str": ["/tmp/research15/worker.py", 1]}, None, interned) == ("str", [])
    assert interned == {0: "/work/main/torch/_dynamo/convert_frame.py", 1: "/tmp/research15/worker.py"}
    stack = [{"line": 105, "name": "<module>", "filename": 1, "loc": "run()"}, {"line": 75, "name": "fn", "filename": 9}]
    kind, (ev,) = parse_record({"dynamo_start": {"stack": stack}, **IDS}, None, interned)
    assert kind == "dynamo_start" and isinstance(ev, StartEvent)
    assert [(f["name"], f["filename_str"]) for f in ev.stack] == [("<module>", "/tmp/research15/worker.py"), ("fn", None)]
    assert (ev.compile_id, ev.attempt, ev.rank) == (cid("0/1"), 0, 0)


@pytest.mark.parametrize("value", [["/w/a.py"], ["/w/a.py", "0"], [0, "/w/a.py"], "/w/a.py", ["/w/a.py", 0, 1]])
def test_a_malformed_str_record_raises_record_error(value):
    with pytest.raises(RecordError, match=r"str record is not \[text, id\]"):
        parse_record({"str": value}, None, {})


def test_a_dynamo_start_without_a_stack_has_an_empty_one():
    (ev,) = parse_record({"dynamo_start": {"stack": "?"}, **IDS}, None, {})[1]
    assert ev.stack == []


def test_an_unknown_kind_is_returned_with_no_events():
    assert parse_record({"a_kind_of_torch_3": {"x": 1}, **IDS}, "payload") == ("a_kind_of_torch_3", None)


@pytest.mark.parametrize("md", [{}, None, []])
def test_empty_metadata_raises_record_error(md):
    with pytest.raises(RecordError, match="empty metadata"):
        parse_record(md, None)


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ({"frame_id": 0, "frame_compile_id": 1, "attempt": 2}, ("0/1", 2)),
        ({"frame_id": -1, "frame_compile_id": 1}, (None, 0)),
        ({"frame_id": True, "frame_compile_id": 1}, (None, 0)),
        ({"compiled_autograd_id": 2, "frame_id": 3}, ("!2/-/-", 0)),
        ({"frame_id": [0], "frame_compile_id": {}}, (None, 0)),  # unhashable, in a malformed record
        ({"frame_id": 0, "frame_compile_id": 0, "attempt": "1"}, ("0/0", 0)),
    ],
)
def test_a_records_compile_id_and_attempt_from_its_metadata(md, expected):
    (ev,) = parse_record({"dynamo_start": {"stack": []}, **md}, None)[1]
    assert (None if ev.compile_id is None else str(ev.compile_id), ev.attempt) == expected
