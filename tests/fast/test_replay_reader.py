"""Fast tier: the TORCH_TRACE reader (``torch_otel._parse.trace_log``) on synthetic log text, no torch.compile anywhere.

Lines are written as torch writes them: a glog prefix and the record's metadata as JSON, then its payload
lines, each behind a tab. Every line the reader cannot use is counted in ``ReplayStats.skipped`` by reason,
and the records around the damage are still delivered. Run the tier with::

    .venv/bin/python -m pytest tests/fast
"""

from __future__ import annotations

import gzip
import io
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fast.fastkit import Collect, chromium, header, log, record
from torch_otel._parse.trace_log import ReplayStats, Writer, iter_records, not_a_trace_log
from torch_otel._pipeline.replay import replay_file

TRUNCATED = "truncated or corrupt compressed data (EOFError)"


def read(data: bytes, **kw: Any) -> tuple[list[tuple[dict[str, Any], str | None, int]], ReplayStats]:
    stats = ReplayStats()
    return list(iter_records(io.BytesIO(data), stats, **kw)), stats


def kinds(records: list[tuple[dict[str, Any], str | None, int]]) -> list[str]:
    return [next(iter(md)) for md, _, _ in records]


# -- the line reader ---------------------------------------------------------------------------------------------


def test_every_line_the_reader_cannot_use_is_counted_by_reason_and_the_records_around_it_are_delivered():
    data = b"\n".join(
        [
            b"\ta payload line before any record",
            header({"str": ["/w/train.py", 0]}),
            b"",
            b"Traceback (most recent call last):",  # not a structured trace line
            b"V0101 00:00:01.000000 4242 torch/_logging/structured.py:28] {not json",
            b"V0101 00:00:01.000000 4242 torch/_logging/structured.py:28] [1, 2]",
            b"V0101 00:00:01.000000 4242 torch/_logging/structured.py:28] {}",
            header({"dynamo_output_graph": {}, "frame_id": 0, "frame_compile_id": 0, "has_payload": "42d1"}),
            b"\tclass GraphModule(torch.nn.Module):",
            b"",  # older torch wrote a payload's empty lines without their tab
            b"\t    pass",
            header({"compilation_metrics": {"compile_id": "0/0"}}),
        ]
    )
    records, stats = read(data)
    assert kinds(records) == ["str", "dynamo_output_graph", "compilation_metrics"]
    assert stats.skipped == Counter(
        {
            "payload line without a record": 1,
            "not a structured trace line": 1,
            "metadata is not JSON": 1,
            "metadata is not a JSON object": 2,
        }
    )
    md, payload, size = records[1]
    assert md == {"dynamo_output_graph": {}, "frame_id": 0, "frame_compile_id": 0, "has_payload": "42d1"}
    assert payload is None  # only measured: the mapping does not read graphs
    assert size == len("class GraphModule(torch.nn.Module):\n    pass")


def test_a_line_that_is_no_record_ends_the_record_before_it_and_orphans_the_payload_after_it():
    data = log(
        record({"artifact": {"name": "fx_graph_runnable", "encoding": "string"}}, "line 1"),
        [b"W1122 garbage that a process printed", b"\tline 2"],
    )
    records, stats = read(data)
    assert [(kinds(records), size) for _, _, size in records] == [(["artifact"], len("line 1"))]
    assert stats.skipped == Counter({"not a structured trace line": 1, "payload line without a record": 1})


def test_the_payloads_the_mapping_reads_are_kept_and_the_rest_only_measured():
    data = log(
        chromium("dynamo", "B", 1_000_000.0),
        record(
            {"artifact": {"name": "recompile_reasons", "encoding": "json"}, "frame_id": 0, "frame_compile_id": 1}, ["0/0: guard"]
        ),
        record({"artifact": {"name": "fx_graph_runnable", "encoding": "string"}}, "import torch\nprint(1)"),
        record({"inductor_output_code": {"filename": "/tmp/x.py"}, "has_payload": "ab"}, "def call(args):\n    pass"),
    )
    records, _ = read(data)
    payloads = [payload for _, payload, _ in records]
    assert json.loads(payloads[0] or "")["name"] == "dynamo"
    assert json.loads(payloads[1] or "") == ["0/0: guard"]
    assert payloads[2:] == [None, None]
    assert [size for _, _, size in records[2:]] == [len("import torch\nprint(1)"), len("def call(args):\n    pass")]
    kept, _ = read(data, keep_all_payloads=True)
    assert [payload for _, payload, _ in kept[2:]] == ["import torch\nprint(1)", "def call(args):\n    pass"]


def test_a_kept_record_that_has_a_payload_digest_but_no_lines_has_an_empty_payload():
    records, _ = read(log(record({"chromium_event": {}, "has_payload": "ab"}), record({"chromium_event": {}})))
    assert [(payload, size) for _, payload, size in records] == [("", 0), (None, 0)]


def test_the_writer_follows_the_process_and_clock_of_the_record_being_read():
    data = log(record({"str": ["/a.py", 0]}, pid=11), record({"str": ["/b.py", 1]}, clock="0101 00:00:02.500000", pid=22))
    writer = Writer()
    seen = [(md["str"][0], writer.pid) for md, _, _ in iter_records(io.BytesIO(data), ReplayStats(), writer=writer)]
    assert seen == [("/a.py", 11), ("/b.py", 22)]
    writer.calibrate(2_500_000_000)  # torch's clock: the line's, here (no zone, the year 2000)
    assert writer.line_ns() == 2_500_000_000


def test_a_gzip_log_reads_as_the_plain_one(tmp_path):
    data = log(record({"str": ["/w/train.py", 0]}), chromium("dynamo", "B", 1_000_000.0))
    path = tmp_path / "trace.log.gz"
    path.write_bytes(gzip.compress(data))
    plain, _ = read(data)
    with gzip.open(path, "rb") as fh:
        stats = ReplayStats()
        assert list(iter_records(fh, stats)) == plain  # type: ignore[arg-type]
    assert stats.skipped == Counter()


def _padding(n: int, seed: int = 0) -> list[list[bytes]]:
    """Records whose payload does not compress away (so a cut in the gzip stream lands among them)."""
    rng = random.Random(seed)
    md = {"artifact": {"name": "fx_graph_runnable", "encoding": "string"}, "frame_id": 1, "frame_compile_id": 0}
    return [record(md, rng.randbytes(300).hex()) for _ in range(n)]


def test_a_truncated_gzip_log_delivers_the_records_before_the_cut_and_counts_it(tmp_path):
    records = [record({"str": [f"/w/file_{i}.py", i]}) for i in range(20)] + _padding(100)
    packed = gzip.compress(log(*records))
    path = tmp_path / "trace.log.gz"
    path.write_bytes(packed[: len(packed) // 2])
    stats = ReplayStats()
    with gzip.open(path, "rb") as fh:
        got = list(iter_records(fh, stats))  # type: ignore[arg-type]
    assert stats.skipped[TRUNCATED] == 1
    assert 20 < len(got) < 120
    assert [md["str"][0] for md, _, _ in got[:20]] == [f"/w/file_{i}.py" for i in range(20)]


def test_a_corrupt_gzip_log_is_counted_never_raised(tmp_path):
    packed = bytearray(gzip.compress(log(*_padding(60))))
    packed[len(packed) // 2 : len(packed) // 2 + 64] = bytes(64)
    path = tmp_path / "trace.log.gz"
    path.write_bytes(bytes(packed))
    stats = ReplayStats()
    with gzip.open(path, "rb") as fh:
        got = list(iter_records(fh, stats))  # type: ignore[arg-type]
    assert len(got) < 60
    assert sum(v for k, v in stats.skipped.items() if k.startswith("truncated or corrupt compressed data (")) == 1


def test_what_is_plainly_no_trace_log_is_named(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    otlp = tmp_path / "spans.json"
    otlp.write_text('{"resourceSpans": []}')
    real = tmp_path / "trace.log"
    real.write_bytes(log(record({"str": ["/w/train.py", 0]})))
    assert "the file is empty" in (not_a_trace_log(empty) or "")
    assert "OTLP-JSON" in (not_a_trace_log(otlp) or "")
    assert not_a_trace_log(real) is None


# -- replay_file: a whole log through the assembler ---------------------------------------------------------------

GRAPH_BREAK = (
    "Graph break in user code at /w/train.py:80\nGraph Break Reason: Data-dependent branching\n\nUser code traceback:\n  ..."
)
METRICS = {"compile_id": "0/0", "co_name": "fn", "co_filename": "/w/train.py", "co_firstlineno": 75, "is_forward": True}


def one_frame_compile() -> list[list[bytes]]:
    """Compile 0/0 from 1.0 s to 2.0 s; each line's clock is its event's time (the epoch of year 2000, no zone)."""
    return [
        chromium("dynamo", "B", 1_000_000.0, clock="0101 00:00:01.000000"),
        record({"artifact": {"name": "torch_version", "encoding": "json"}}, {"pytorch_version": "2.13.0+cpu"}),
        record({"str": ["/w/train.py", 1]}),
        record(
            {
                "dynamo_start": {
                    "stack": [{"line": 105, "name": "<module>", "filename": 1}, {"line": 75, "name": "fn", "filename": 1}]
                },
                "frame_id": 0,
                "frame_compile_id": 0,
                "attempt": 0,
            }
        ),
        chromium("entire_frame_compile", "B", 1_100_000.0, clock="0101 00:00:01.100000"),
        record(
            {"artifact": {"name": "dynamo_graph_break_reason", "encoding": "string"}, "frame_id": 0, "frame_compile_id": 0},
            GRAPH_BREAK,
            clock="0101 00:00:01.300000",
        ),
        record(
            {"dynamo_output_graph": {"sizes": {}}, "frame_id": 0, "frame_compile_id": 0, "has_payload": "42d1"},
            "graph():\n    return ()",
        ),
        chromium("entire_frame_compile", "E", 1_900_000.0, clock="0101 00:00:01.900000"),
        chromium("dynamo", "E", 2_000_000.0, clock="0101 00:00:02.000000"),
        record({"compilation_metrics": METRICS, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}),
    ]


def test_replay_file_turns_a_log_of_one_frame_compile_into_one_record(tmp_path):
    path = tmp_path / "dedicated_log_torch_trace_rank_3_x1.log"
    path.write_bytes(log(*one_frame_compile()))
    sink, stats = Collect(), ReplayStats()
    replay_file(path, [sink], stats)
    rec = sink.only()
    assert (rec.kind, rec.id_str, rec.incomplete, rec.rank, rec.process_id) == ("frame", "0/0", None, 3, 4242)
    assert [(n.name, n.start_ns, n.end_ns) for n, _ in rec.root.walk()] == [
        ("dynamo", 1_000_000_000, 2_000_000_000),
        ("entire_frame_compile", 1_100_000_000, 1_900_000_000),
    ]
    assert [(g.reason, g.ts_ns, g.filename, g.lineno) for g in rec.graph_breaks] == [
        ("Data-dependent branching", 1_300_000_000, "/w/train.py", 80)  # dated by its own line
    ]
    assert (rec.code.function, rec.code.file, rec.code.line) == ("fn", "/w/train.py", 75)
    assert rec.start_stack is not None and rec.start_stack[-1]["filename_str"] == "/w/train.py"
    assert (rec.trace_file, rec.torch_version) == (str(path), "2.13.0+cpu")
    assert rec.artifacts == []  # default capture: no artifacts
    assert (stats.files, stats.records) == (1, 10)
    assert stats.record_types == Counter(
        {"chromium_event": 4, "artifact": 2, "dynamo_start": 1, "dynamo_output_graph": 1, "compilation_metrics": 1}
    )
    assert stats.skipped == Counter() and sum(stats.unmatched.values()) == 0


def test_replay_file_with_artifacts_attaches_them_and_counts_those_of_no_compile(tmp_path):
    path = tmp_path / "trace.log"
    path.write_bytes(log(*one_frame_compile()))
    sink, stats = Collect(), ReplayStats()
    replay_file(path, [sink], stats, artifacts=True)
    rec = sink.only()
    assert [(a.record_type, a.name, a.size, a.digest) for a in rec.artifacts] == [
        ("dynamo_output_graph", "dynamo_output_graph", len("graph():\n    return ()"), "42d1")
    ]
    assert rec.rank is None
    assert stats.skipped == Counter({"orphan artifacts (no compile open for them)": 1})  # torch_version: no compile id


def test_replay_file_counts_bad_records_and_unknown_record_types_and_finishes_a_cut_compile(tmp_path):
    path = tmp_path / "trace.log"
    path.write_bytes(
        log(
            record({"chromium_event": {}, "frame_id": 0, "frame_compile_id": 0}),  # no payload
            record({"artifact": {"encoding": "json"}}, "[]"),
            record({"a_future_kind": {}}),
            chromium("dynamo", "B", 1_000_000.0),
            chromium("bytecode_tracing", "B", 1_200_000.0),
            chromium("inductor_compile", "E", 1_300_000.0),
        )
    )
    sink, stats = Collect(), ReplayStats()
    replay_file(path, [sink], stats)
    assert stats.skipped == Counter({"chromium_event without payload": 1, "artifact without a name": 1})
    assert stats.unknown_record_types == Counter({"a_future_kind": 1})
    assert stats.unmatched == Counter({"ends with no begin open": 1, "begins never ended": 0})
    rec = sink.only()
    assert rec.incomplete == "the log ends before the compile ended"
    assert [(n.name, n.start_ns, n.end_ns) for n, _ in rec.root.walk()] == [
        ("dynamo", 1_000_000_000, 1_200_000_000),
        ("bytecode_tracing", 1_200_000_000, 1_200_000_000),
    ]


def test_replay_file_on_a_truncated_gzip_delivers_the_compile_before_the_cut(tmp_path):
    second = [chromium("dynamo", "B", 3_000_000.0, compile_id="1/0"), *_padding(150)]
    packed = gzip.compress(log(*one_frame_compile(), *second))
    path = tmp_path / "trace.log.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    sink, stats = Collect(), ReplayStats()
    replay_file(path, [sink], stats)
    assert sink.ids() == [("frame", "0/0"), ("frame", "1/0")]
    done, cut = sink.finished
    assert done.incomplete is None and done.metrics == METRICS
    assert cut.incomplete == "the log ends before the compile ended"
    assert stats.skipped[TRUNCATED] == 1


def test_replay_file_on_a_missing_file_is_a_problem_not_an_exception(tmp_path):
    stats = ReplayStats()
    replay_file(Path(tmp_path / "absent.log"), [Collect()], stats)
    assert stats.files == 1 and len(stats.problems) == 1 and "absent.log: cannot read" in stats.problems[0]


def test_a_baselines_keys_know_their_release_from_the_first_lookup_on():
    """The committed 2.13 run's log: every key carries the release that wrote it, the first compile's keys too.

    torch writes the ``torch_version`` artifact before the first compile and the compile's metrics after its
    lookups; a key without its release made a miss on another release read "torch version changed" instead of
    "torch 2.13.0+cpu → 2.15.0".
    """
    from torch_otel._features.cache_lookups.key_index import baseline_keys
    from torch_otel._parse.trace_log import LOG_FILES

    log = Path(__file__).parent.parent / "data" / "cache-baseline-2.13"
    keys, problems = baseline_keys(str(log), logs=LOG_FILES)
    assert keys and not problems
    assert {k.torch_version for k in keys} == {"2.13.0+cpu"}, [(k.compile_id, k.torch_version) for k in keys]


WRAPPER = "/venv/lib/python3.11/site-packages/torch/_dynamo/external_utils.py"
GUARDS = """\
TREE_GUARD_MANAGER:
+- RootGuardManager
| +- GuardManager: source=L['args'], accessed_by=FrameLocalsGuardAccessor(key='args', framelocals_idx=0), type=<class 'tuple'>
| +- GuardManager: source=L['fn'], accessed_by=FrameLocalsGuardAccessor(key='fn', framelocals_idx=2), type=<class '__main__.MyStack'>, tag_safe=(False, False)
| | +- TYPE_MATCH: ___check_type_id(L['fn'], 94742649066896), type=<class '__main__.MyStack'> (HINT: type MyStack)
| | | +- GuardManager: source=L['fn']._modules['0'], accessed_by=DictGetItemGuardAccessor('0'), type=<class 'torch.nn.modules.linear.Linear'>
| | | | +- TYPE_MATCH: ___check_type_id(L['fn']._modules['0'], 1), type=<class 'torch.nn.modules.linear.Linear'>  # input = module(input)  # secret/model.py:12 in forward"""


def wrapped_module_compile() -> list[list[bytes]]:
    """Compile 0/0 of a module torch compiled through its wrapper (``inner``), called at /w/train.py:105."""
    ids = {"frame_id": 0, "frame_compile_id": 0, "attempt": 0}
    stack = [{"line": 105, "name": "<module>", "filename": 1}, {"line": 67, "name": "inner", "filename": 2}]
    metrics_ = {"compile_id": "0/0", "co_name": "inner", "co_filename": WRAPPER, "co_firstlineno": 67, "guard_count": 9}
    return [
        chromium("dynamo", "B", 1_000_000.0),
        record({"str": ["/w/train.py", 1]}),
        record({"str": [WRAPPER, 2]}),
        record({"dynamo_start": {"stack": stack}, **ids}),
        record({"dynamo_cpp_guards_str": {}, **ids, "has_payload": "9f0e"}, GUARDS),
        chromium("dynamo", "E", 2_000_000.0, clock="0101 00:00:02.000000"),
        record({"compilation_metrics": metrics_, **ids}),
    ]


def test_the_reader_keeps_of_the_guards_only_the_lines_on_the_frames_own_objects():
    """A guards record's payload is measured, not kept: only its lines on the frame's ``self``, ``fn`` and
    ``fn.__self__`` are, for the frame's name (never the rest, which holds the user's source lines)."""
    records, _ = read(log(*wrapped_module_compile()))
    (md, payload, size) = next(r for r in records if "dynamo_cpp_guards_str" in r[0])
    assert payload is None and size == len(GUARDS)
    (kept,) = md["_torch_otel_frame_object_lines"]
    assert kept.startswith("| +- GuardManager: source=L['fn'], ") and "secret" not in kept


def test_a_module_torch_compiled_through_its_wrapper_is_named_by_its_class_at_the_users_call(tmp_path):
    path = tmp_path / "trace.log"
    path.write_bytes(log(*wrapped_module_compile()))
    sink, stats = Collect(), ReplayStats()
    replay_file(path, [sink], stats)
    rec = sink.only()
    assert (rec.code.function, rec.code.file, rec.code.line) == ("MyStack", "/w/train.py", 105)
    assert rec.torch_code is not None and tuple(rec.torch_code) == ("inner", WRAPPER, 67)
    assert rec.frame_class == "__main__.MyStack"
    assert stats.skipped == Counter()
