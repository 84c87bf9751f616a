"""``torch-otel replay``: the same traces as live, the same compile ids as tlparse, and no crash on bad input."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import (
    GRAPH_CALLS_SPAN,
    WORKLOADS,
    cli_argv,
    read_otlp_json_spans,
    recompile_limit_fail_type,
    run,
    run_cli,
    run_python,
    span_compile_ids,
    spans_to_file,
    tlparse_compile_ids,
)
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.build import Pipeline
from torch_otel._pipeline.replay import replay_paths

# Marked ``release`` (run on every torch release in the matrix, noxfile.py): the tests of this release's own log,
# replayed; where its metrics go, the progress bar and memory on big logs are the replayer's alone.


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    """A live run with TORCH_TRACE on: its log directory and its live spans.

    Equivalent to: WITH_BRIDGE=1 COMPILED_AUTOGRAD=1 TORCH_TRACE=trace TORCH_OTEL_TRACES_FILE=live.jsonl \\
        OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none python tests/workloads/mixed.py
    """
    d = tmp_path_factory.mktemp("recorded")
    res = run_python(
        WORKLOADS / "mixed.py",
        {
            "WITH_BRIDGE": "1",
            "COMPILED_AUTOGRAD": "1",
            "TORCH_TRACE": str(d / "trace"),
            **spans_to_file(d / "live.jsonl"),
        },
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = (d / "trace").glob("*.log")
    return {"dir": d / "trace", "log": log, "live": d / "live.jsonl", "tmp": d}


def _by_compile(path: Path) -> dict[tuple[str, str], tuple[dict, list[str], list[str]]]:
    traces: dict[str, list[dict]] = {}
    for s in read_otlp_json_spans(path):
        traces.setdefault(s["traceId"], []).append(s)
    out = {}
    for spans in traces.values():
        if any(s["name"] == "torch.startup" for s in spans):
            continue  # the live run's start-up: a trace of its own, which a log cannot hold
        (root,) = [s for s in spans if "torch.compile.kind" in s["attrs"]]
        key = (root["attrs"]["torch.compile.kind"], root["attrs"]["torch.compile.id"])
        # how often a graph ran after its compile (the span live capture writes at exit) is in no TORCH_TRACE log
        names = sorted(s["name"] for s in spans if s["name"] != GRAPH_CALLS_SPAN)
        out[key] = (root, names, sorted(e["name"] for e in root.get("events", [])))
    return out


def _event_times(root: dict, name: str) -> list[int]:  # type: ignore[type-arg]
    return sorted(int(e["timeUnixNano"]) for e in root.get("events", []) if e["name"] == name)


def _replayable(attrs: dict) -> dict:  # type: ignore[type-arg]
    """All but the live-only attributes: the caller's frames, and AOTAutograd's graph name, are not in TORCH_TRACE logs."""
    live_only = ("torch.compile.caller.", "code.stacktrace", "torch.compile.aot_graph")
    return {k: v for k, v in attrs.items() if not k.startswith(live_only) or k == "torch.compile.aot_graph_count"}


@pytest.mark.release
def test_replay_produces_the_live_span_trees_and_attributes(recorded):
    out = recorded["tmp"] / "replayed.jsonl"
    res = run_cli("replay", str(recorded["dir"]), "--output", str(out), cwd=recorded["tmp"])
    assert res.returncode == 0, res.stderr
    live, replayed = _by_compile(recorded["live"]), _by_compile(out)
    assert set(live) == set(replayed) and len(live) >= 15
    breaks = 0
    for key, (lroot, lnames, levents) in live.items():
        rroot, rnames, revents = replayed[key]
        assert rroot["name"] == lroot["name"], key
        assert rnames == lnames, key
        assert revents == levents, key
        assert rroot.get("status") == lroot.get("status"), key
        assert _replayable(rroot["attrs"]) == _replayable(lroot["attrs"]), key
        # torch's original timestamps
        assert (rroot["startTimeUnixNano"], rroot["endTimeUnixNano"]) == (lroot["startTimeUnixNano"], lroot["endTimeUnixNano"])
        # A graph break when torch logged it: replay reads its trace record's line (to the millisecond), live capture
        # its graph-break log record, which torch writes moments later in the same handling (0 to 5 ms here, under
        # load). Before, replay dated it to the compile's last phase event before it: 100 ms to seconds early.
        live_breaks, replayed_breaks = (
            _event_times(lroot, "torch.compile.graph_break"),
            _event_times(rroot, "torch.compile.graph_break"),
        )
        assert len(live_breaks) == len(replayed_breaks), key
        breaks += len(live_breaks)
        for lt, rt in zip(live_breaks, replayed_breaks, strict=True):
            assert abs(lt - rt) < 25_000_000, (key, (rt - lt) / 1e6)
    assert breaks >= 2


@pytest.mark.release
def test_replay_compile_ids_equal_tlparse(recorded):
    out = recorded["tmp"] / "ids.jsonl"
    assert run_cli("replay", str(recorded["log"]), "-o", str(out), cwd=recorded["tmp"]).returncode == 0
    roots = [root for root, _, _ in _by_compile(out).values()]
    assert span_compile_ids(roots) == tlparse_compile_ids(recorded["log"], recorded["tmp"] / "tl_out")


@pytest.mark.release
def test_summary_lists_compiles_failures_and_reasons(recorded):
    res = run_cli("replay", str(recorded["log"]), "-o", str(recorded["tmp"] / "s.jsonl"), cwd=recorded["tmp"])
    out = res.stdout
    assert re.search(r"torch\.compile run summary \(replay\): \d+ compiles \(.*compiled_autograd.*frame", out), out
    assert "failures: 2 (" in out and "TorchRuntimeError 1" in out and f"{recompile_limit_fail_type()} 1" in out
    assert "recompile-limit hits: 1" in out
    assert "size_mismatch" in out and "GB0025" in out
    assert "lines skipped: 0" in out and "event kinds not recognised: none" in out


@pytest.mark.release
def test_gzip_and_rank_directory(recorded, tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    data = recorded["log"].read_bytes()
    (d / "dedicated_log_torch_trace_rank_0_x.log").write_bytes(data)
    with gzip.open(d / "dedicated_log_torch_trace_rank_1_y.log.gz", "wb") as fh:
        fh.write(data)
    out = tmp_path / "r.jsonl"
    res = run_cli("replay", str(d), "-o", str(out), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    roots = [s for s in read_otlp_json_spans(out) if "torch.compile.kind" in s["attrs"]]
    assert {r["attrs"].get("torch.distributed.rank") for r in roots} == {"0", "1"}


@pytest.mark.release
def test_bad_inputs_are_counted_never_fatal(recorded, tmp_path):
    data = recorded["log"].read_bytes()
    cases = {
        "truncated.log": data[: len(data) // 2],
        "truncated.log.gz": gzip.compress(data)[:4000],
        "garbage_mixed.log": data[:20000] + bytes(random.Random(0).randrange(256) for _ in range(5000)) + b"\n" + data[20000:],
        "nonjson.log": b"V1122 17:02:04.816000 3142 x.py:1] {not json\n" + data,
        "unknown.log": b'V1122 17:02:04.816000 3142 x.py:1] {"brand_new_event": {}, "frame_id": 0}\n' + data,
        "noid.log": b'V1122 17:02:04.816000 3142 x.py:1] {"artifact": {"name": "x", "encoding": "string"}}\n\tpayload\n' + data,
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        res = run_cli("replay", str(p), "-o", str(tmp_path / (name + ".jsonl")), cwd=tmp_path)
        assert res.returncode == 0, (name, res.stderr)
        assert "Traceback" not in res.stderr, name
    assert (
        "brand_new_event"
        in run_cli("replay", str(tmp_path / "unknown.log"), "-o", str(tmp_path / "u.jsonl"), cwd=tmp_path).stdout
    )
    nj = run_cli("replay", str(tmp_path / "nonjson.log"), "-o", str(tmp_path / "n.jsonl"), cwd=tmp_path).stdout
    assert "1  metadata is not JSON" in nj
    tz = run_cli("replay", str(tmp_path / "truncated.log.gz"), "-o", str(tmp_path / "t.jsonl"), cwd=tmp_path).stdout
    assert "truncated or corrupt compressed data" in tz


def test_missing_path_and_unparseable_input_exit_nonzero_with_one_line(tmp_path):
    res = run_cli("replay", str(tmp_path / "nope"), cwd=tmp_path)
    assert res.returncode == 2
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("torch-otel replay:")] == [
        f"torch-otel replay: {tmp_path / 'nope'}: no such file or directory; pass a TORCH_TRACE log, a .gz of one, or its directory"
    ]
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 50)
    res = run_cli("replay", str(tmp_path / "junk.bin"), "-o", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    assert res.returncode == 1 and "nothing in the given path(s) could be parsed" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.release
def test_a_replay_that_exports_nothing_says_so_and_exits_3(recorded, tmp_path):
    """No collector at the endpoint: every span is dropped, and the replay ends by saying so, not with exit 0."""
    from tests.servers import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_METRICS_EXPORTER": "none"}
    res = run_cli("replay", str(recorded["log"]), env=env)
    assert res.returncode == 3, (res.returncode, res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("torch-otel replay:")]
    assert lines == [
        f"torch-otel replay: nothing was exported: the spans could not be delivered to {endpoint}"
        "; start a collector there, point OTEL_EXPORTER_OTLP_ENDPOINT at one, or write them to a file with --output FILE"
    ], res.stderr[-2000:]
    assert "Training goes on" not in res.stderr


@pytest.mark.release
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_real_logs_never_crash_and_every_skip_is_counted(recorded, data):
    lines = recorded["log"].read_bytes().split(b"\n")
    ops = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(["drop", "dup", "flip", "cut", "swap"]), st.integers(0, len(lines) - 1), st.integers(0, 255)
            ),
            max_size=12,
        )
    )
    for op, i, b in ops:
        if op == "drop" and lines:
            del lines[i % len(lines)]
        elif op == "dup" and lines:
            lines.insert(i % len(lines), lines[i % len(lines)])
        elif op == "flip" and lines and lines[i % len(lines)]:
            ln = bytearray(lines[i % len(lines)])
            ln[b % len(ln)] ^= 0x5A
            lines[i % len(lines)] = bytes(ln)
        elif op == "cut" and lines:
            lines[i % len(lines)] = lines[i % len(lines)][:b]
        elif op == "swap" and len(lines) > 1:
            j = (i + b) % len(lines)
            lines[i % len(lines)], lines[j] = lines[j], lines[i % len(lines)]
    path = recorded["tmp"] / "mutated.log"
    path.write_bytes(b"\n".join(lines))

    stats = ReplayStats()
    code = replay_paths([str(path)], Pipeline([]), stats)
    assert isinstance(stats, ReplayStats)
    assert code in (0, 1)
    # every line is either part of a record or counted as skipped
    assert stats.records + sum(stats.skipped.values()) > 0


_PREFIX = b"V1122 17:02:04.816000 3142 torch/x.py:1] "
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
_features = st.sampled_from(
    ["dynamo_start", "compilation_metrics", "artifact", "chromium_event", "str", "dynamo_output_graph", "new_kind", ""]
)
_header = st.builds(
    lambda kind, value, extra: _PREFIX + json.dumps({kind: value, **extra}).encode(),
    _features,
    _json_values,
    st.dictionaries(
        st.sampled_from(["frame_id", "frame_compile_id", "attempt", "rank", "has_payload"]), _json_values, max_size=4
    ),
)
_line = st.one_of(
    _header,
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    st.binary(max_size=40).map(lambda b: b"\t" + b.replace(b"\n", b"")),
    st.binary(max_size=40).map(lambda b: _PREFIX + b.replace(b"\n", b"")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_line, max_size=40))
def test_generated_logs_never_crash_and_every_line_is_a_record_a_payload_or_counted(lines):
    """Every header line becomes a record or a counted skip; every payload line belongs to one or is counted."""
    import io

    from torch_otel._parse.trace_log import iter_records

    stats = ReplayStats()
    records = list(iter_records(io.BytesIO(b"\n".join(lines)), stats))
    text_lines = [ln for ln in lines if ln[:1] != b"\t" and ln.decode("utf-8", "replace").strip()]
    header_skips = sum(v for k, v in stats.skipped.items() if k != "payload line without a record")
    assert len(records) + header_skips == len(text_lines)
    orphans = 0
    for ln in lines:
        if ln[:1] != b"\t" and ln.decode("utf-8", "replace").strip():
            break
        orphans += ln[:1] == b"\t"
    assert stats.skipped["payload line without a record"] >= orphans
    with tempfile.TemporaryDirectory() as d:  # and the whole mapping takes whatever the reader let through
        path = Path(d) / "generated.log"
        path.write_bytes(b"\n".join(lines))
        code = replay_paths([str(path)], Pipeline([]), ReplayStats())
    assert code in (0, 1)


def test_replay_pushes_the_runs_metrics_to_the_pushgateway(recorded, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.servers import Pushgateway

    out = tmp_path / "replayed.jsonl"
    with Pushgateway() as gw:
        r = run_cli("replay", str(recorded["dir"]), "-o", str(out), "--pushgateway", gw.url, "--run", "nightly-42", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "metrics pushed to" in r.stdout
        samples = [s for f in text_string_to_metric_families(gw.metrics()) for s in f.samples]
    ours = [s for s in samples if s.labels.get("job") == "torch_compile_replay" and s.labels.get("run") == "nightly-42"]
    compiles = sum(s.value for s in ours if s.name == "torch_compile_compiles_total")
    roots = [s for s in read_otlp_json_spans(out) if "torch.compile.kind" in s["attrs"]]
    assert compiles == len(roots) > 0  # one count per compile the replay found
    assert [s.value for s in ours if s.name == "torch_compile_recompile_limit_hits_total"] == [1.0]
    assert {s.labels["rank"] for s in ours if s.name == "torch_compile_compiles_total"} == {"0"}
    # the rank's fingerprints (docs/distributed.md), labelled with the run, as a live rank serves them
    fps = {s.labels["aspect"]: s for s in ours if s.name == "torch_compile_rank_fingerprint"}
    assert set(fps) == {"compiles", "cache", "collectives", "graphs"}
    assert all(s.labels["run_id"] == "nightly-42" and s.labels["rank"] == "0" for s in fps.values())
    assert fps["compiles"].value > 0 and 0 < fps["graphs"].value <= compiles


def test_replay_sends_metrics_over_otlp_labelled_with_the_run(recorded, tmp_path):
    from tests.servers import Rotel, wait_until

    with Rotel() as rotel:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_METRICS_EXPORTER": "otlp"}
        r = run_cli("replay", str(recorded["log"]), "--run", "ci-7", env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = wait_until(lambda: (g := rotel.received())["points"] and g["spans"] and g, 30, "replayed spans and metrics")
    limit = [p for p in got["points"] if p["metric"] == "torch_compile_recompile_limit_hits" and p.get("value")]
    assert limit and all(p["resource"]["torch_otel.replay.run"] == "ci-7" for p in got["points"])


def test_progress_bar_on_a_terminal_only(recorded, tmp_path):
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cli_argv("replay", str(recorded["log"]), "-o", str(tmp_path / "a.jsonl")),
        stdout=subprocess.DEVNULL,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(120) == 0
    os.close(master)
    text = seen.decode(errors="replace")
    assert re.search(r"\r\[#*-*\] +\d+\.\d% +\d+\.\d MB +\d+\.\d MB/s \d+ records", text), text[:500]
    piped = run_cli("replay", str(recorded["log"]), "-o", str(tmp_path / "b.jsonl"), cwd=tmp_path)
    assert "\r" not in piped.stderr and "MB/s" not in piped.stderr


def _peak_rss_mb(argv: list[str], cwd: Path) -> float:
    """Peak RSS of one command, measured by a parent that runs only it."""
    probe = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
    )
    r = run([sys.executable, "-c", probe, *argv], cwd=cwd, timeout=900)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip()) / 1024


def test_memory_stays_flat_from_10_to_100_mb(recorded, tmp_path):
    """Streaming: replaying a 100 MB log (real records, fresh compile ids) needs no more memory than a 10 MB one.

    90 MB more log within 25 MB more memory: a replay that held what it read (or even a quarter of it) fails.
    Measured here, peak RSS grows about 4 MB from 10 to 100 MB, and about 5 MB from 50 to 500 MB.
    """
    from tests.synthetic import make_log

    peaks = {}
    for mb in (10, 100):
        log = tmp_path / f"synthetic-{mb}.log"
        make_log(recorded["log"], log, mb * 1_000_000)
        peaks[mb] = _peak_rss_mb(cli_argv("replay", str(log), "-o", os.devnull), tmp_path)
        log.unlink()
    assert peaks[100] < peaks[10] + 25, peaks  # measured here: about 29 MB and 33 MB
