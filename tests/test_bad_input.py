"""Bad input: malformed or out-of-range settings, torch records of odd shape, and the bridge's own failures.

Each bad value is one line naming the variable; nothing raises into the
user's import or into ``torch.compile``; what cannot be used is counted.
"""

from __future__ import annotations

import logging
import string

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_otel
from tests.helpers import own_lines, run_cli, run_python
from torch_otel._core.settings import load_settings, sdk_env_problems
from torch_otel._otel.exposition import prometheus_port
from torch_otel._otel.providers import exporter_names, job_resource, otlp_problem

BRIDGE_VARS = (
    "TORCH_OTEL_CAPTURE",
    "TORCH_OTEL_CAPTURE_PAYLOADS",
    "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH",
    "TORCH_OTEL_REDACT_PATHS",
    "TORCH_OTEL_MAX_OPEN_COMPILES",
    "TORCH_OTEL_METRICS",
    "TORCH_OTEL_PUSHGATEWAY_URL",
    "TORCH_OTEL_FLUSH_ON_SIGTERM",
    "TORCH_OTEL_SHUTDOWN_TIMEOUT",
)
OTLP_VARS = tuple(
    f"OTEL_EXPORTER_OTLP_{sig}{what}"
    for sig in ("", "TRACES_", "METRICS_", "LOGS_")
    for what in ("ENDPOINT", "PROTOCOL", "HEADERS", "TIMEOUT", "COMPRESSION", "CERTIFICATE")
)
SDK_VARS = (
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_METRICS_EXEMPLAR_FILTER",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_RESOURCE_ATTRIBUTES",
)
OTHER_VARS = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_PROMETHEUS_PORT", "OTEL_SDK_DISABLED")

_values = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.digits + "-+.eE ", max_size=12),
    st.sampled_from(["", " ", "-1", "0", "1e309", "nan", "inf", "99999999999999999999", "true", "grpc", "a=b,=c", "é", "\t"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(BRIDGE_VARS + OTLP_VARS + SDK_VARS + OTHER_VARS), _values, max_size=8))
def test_any_value_of_any_variable_is_one_line_naming_it_never_an_exception(env):
    env = {k: v.replace("\x00", "") for k, v in env.items()}
    messages = list(load_settings(env, report=False).problems)
    messages += list(sdk_env_problems(env).values())
    for signal in ("traces", "metrics", "logs"):
        problem, _endpoint = otlp_problem(env, signal)
        if problem:
            messages.append(problem)
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        exporter_names(env, name, "otlp", ("otlp", "console", "none", "prometheus"))
    assert 0 <= prometheus_port(env) <= 65535
    job_resource(env)
    for m in messages:
        assert "\n" not in m and "\r" not in m, m
        named = [k for k in env if m.startswith(k) or f" {k}" in m]
        assert named, (m, env)  # each message names the variable it is about


def test_every_bad_variable_at_import_is_one_line_and_tracing_goes_on(tmp_path):
    traces = tmp_path / "spans.jsonl"
    bad = {
        "TORCH_OTEL_CAPTURE": "everything",
        "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH": "-5",
        "TORCH_OTEL_SHUTDOWN_TIMEOUT": "soon",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1",  # the SDK itself raises at import on this one
        "OTEL_BSP_MAX_QUEUE_SIZE": "lots",
        "OTEL_BSP_SCHEDULE_DELAY": "-1",
        "OTEL_METRIC_EXPORT_INTERVAL": "0",
        "OTEL_TRACES_SAMPLER": "sometimes",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "whenever",
        "OTEL_RESOURCE_ATTRIBUTES": "team=ml,=x,orphan",
        "OTEL_EXPORTER_PROMETHEUS_PORT": "70000",
    }
    script = tmp_path / "job.py"
    script.write_text(
        "import torch_otel.auto\nimport torch\nprint(torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1)))\n"
    )
    r = run_python(
        script,
        {**bad, "OTEL_METRICS_EXPORTER": "prometheus", "OTEL_TRACES_EXPORTER": "none", "TORCH_OTEL_TRACES_FILE": str(traces)},
    )
    assert r.returncode == 0 and "tensor([2.])" in r.stdout, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    ours = own_lines(r.stderr)
    # The bad port falls back to 9464, which another test's run may hold at this moment (tests run two at a time):
    # then the bridge rightly says so in one more line, which is not about a bad variable.
    ours = [ln for ln in ours if "cannot serve metrics on 127.0.0.1:9464 (Address already in use)" not in ln]
    assert len(ours) == len(bad), ours
    assert all(ln.startswith("torch-otel: WARNING: ") for ln in ours), ours
    for name in bad:
        assert len([ln for ln in ours if name in ln]) == 1, (name, ours)
    assert not [ln for ln in r.stderr.splitlines() if "resource attribute" in ln]  # the SDK's own repeats are folded
    assert '"torch.compile"' in traces.read_text()  # the compile was traced anyway


def test_a_span_or_log_queue_smaller_than_its_batch_is_one_line_and_the_bridge_arms(tmp_path):
    """The SDK refuses to build a batch processor whose export batch is larger than its queue; a queue set under the
    SDK's batch of 512 is one. The bridge says so in one line each, and runs with batches of the queue's size: its
    spans and log records still leave (this once disarmed the bridge as an internal error)."""
    traces = tmp_path / "spans.jsonl"
    bad = {
        "OTEL_BSP_MAX_QUEUE_SIZE": "256",  # the SDK's batch (512) does not fit
        "OTEL_BLRP_MAX_QUEUE_SIZE": "100",
        "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "200",
    }
    script = tmp_path / "job.py"
    script.write_text(
        "import torch_otel.auto\nimport torch\nprint(torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1)))\n"
        "import torch_otel\nprint('armed', torch_otel.is_instrumented())\n"
    )
    env = {**bad, "OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "console"}
    r = run_python(script, {**env, "TORCH_OTEL_TRACES_FILE": str(traces)})
    assert r.returncode == 0 and "armed True" in r.stdout, r.stderr[-3000:]
    ours = own_lines(r.stderr)
    assert ours == [
        "torch-otel: WARNING: OTEL_BSP_MAX_QUEUE_SIZE=256 is smaller than the export batch (the SDK's 512); set "
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE to at most 256 (batches of 256 meanwhile)",
        "torch-otel: WARNING: OTEL_BLRP_MAX_EXPORT_BATCH_SIZE=200 is larger than the queue (100); make it at most "
        "OTEL_BLRP_MAX_QUEUE_SIZE (batches of 100 meanwhile)",
    ], ours
    assert '"torch.compile"' in traces.read_text()


def _bridge():  # type: ignore[no-untyped-def]
    from torch_otel._pipeline import bridge as _bridge

    assert _bridge._bridge is not None
    return _bridge._bridge


ODD_RECORDS = [
    {"dynamo_start": {}},  # no compile id anywhere
    {"dynamo_start": "not an object", "frame_id": "zero", "frame_compile_id": None},
    {"compilation_metrics": [1, 2, 3], "frame_id": 0, "frame_compile_id": 0},
    {"compilation_metrics": {"fail_type": ["not", "a", "string"], "entire_frame_compile_time_s": "slow"}},
    {"brand_new_kind_from_a_future_torch": {"x": 1}, "frame_id": 10**30, "frame_compile_id": -1, "attempt": "x"},
    {"artifact": {"name": "n" * 1_000_000, "encoding": 5}, "frame_id": 0, "frame_compile_id": 0},
    {"artifact": {}},
    {"chromium_event": {}},
    {"str": ["path.py"]},
    {"": None},
]


@pytest.mark.parametrize("level", ["default", "full"])
def test_records_of_unexpected_shape_are_mapped_or_counted_never_raised(make_capture, level):
    cap = make_capture(level)
    trace_log = logging.getLogger("torch.__trace")
    fn = torch.compile(lambda x: x * 3, backend="eager")
    fn(torch.ones(2))
    b = _bridge()
    errors_before = torch_otel.internal_error_count()
    for md in ODD_RECORDS:  # straight into the bridge's handler, as torch's logger would hand them over
        record = trace_log.makeRecord("torch.__trace", logging.DEBUG, __file__, 1, "", (), None, extra={"metadata": md})
        record.payload = "{not json" if "chromium_event" in md else "x" * 100_000
        b.capture._on_trace_record(record)
    for event in ({}, {"name": 1}, {"name": "dynamo", "ph": "B"}, {"ph": "Z", "ts": "late"}, {"args": None}):
        b.capture._on_chromium(event)
    for metrics in (
        {},
        {"frame_key": None, "co_name": 7},
        {"compile_id": "99/99", "fail_type": "Weird", "fail_reason": "r" * 10**6},
    ):
        b.capture._on_metrics(metrics)
    fn(torch.ones(3))  # and compiles still map as before
    assert cap.root("0/1").attributes["torch.compile.recompile_reason.category"] == "size_mismatch"
    assert torch_otel.internal_error_count() == errors_before  # torch's odd records are not the bridge's errors
    if level == "full":
        counted = {k for k in b.assembler.stats if k.startswith(("malformed:", "unknown_kind:"))}
        assert "unknown_kind:brand_new_kind_from_a_future_torch" in counted, counted
        assert any(k.startswith("malformed:") for k in counted), counted
    for s in cap.spans():  # huge values were cut to the attribute limit
        for v in (s.attributes or {}).values():
            assert not isinstance(v, str) or len(v) <= 4096


def test_an_exception_in_the_bridges_handler_is_logged_once_counted_and_compile_goes_on(cap):
    from unittest import mock

    from torch_otel._sinks import spans as _spans

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("torch_otel").addHandler(handler)
    try:
        with mock.patch.object(_spans.SpanMapper, "emit", side_effect=RuntimeError("boom")):
            fns = [lambda x: x + 0, lambda x: x + 1, lambda x: x + 2]  # three frames, three compiles
            outs = [torch.compile(f, backend="eager")(torch.ones(2)) for f in fns]
            torch_otel.force_flush()  # the mapping runs off the compile's path: run it while it is broken
    finally:
        logging.getLogger("torch_otel").removeHandler(handler)
    assert [float(o[0]) for o in outs] == [1.0, 2.0, 3.0]
    assert len(seen) == 1 and "boom" in seen[0].getMessage()
    assert torch_otel.internal_error_count() >= 3
    assert cap.sample("torch_compile_compiles_total", rank="0", kind="frame", status="ok") >= 1


def test_the_cli_without_a_command_shows_its_commands_and_each_help_says_what_it_does():
    bare = run_cli()
    assert bare.returncode == 2
    assert "demo" in bare.stderr and "replay" in bare.stderr and "run" in bare.stderr
    assert bare.stderr.rstrip().endswith("torch-otel: name a command; try: torch-otel demo")
    assert "Runs COMMAND with the bridge on in every Python process" in run_cli("run", "--help").stdout
    demo = " ".join(run_cli("demo", "--help").stdout.split())  # argparse wraps at the terminal's width
    assert "(default: 9464)" in demo and "(default: aot_eager)" in demo
    assert "3 spans not exported" in " ".join(run_cli("replay", "--help").stdout.split())


LOG = "tests/data/tlparse-corpus/comp_metrics.log.gz"  # a real log: each command below would do work on it
# command line (run from the checkout, in a directory holding a file "afile"), the one line it must give, exit 2
UP_FRONT = {
    "diff --html under a file": (
        ["diff", LOG, LOG, "--html", "{d}/afile/diff.html"],
        "torch-otel diff: cannot write --html {d}/afile/diff.html ({d}/afile is a file, not a directory); pass a writable path",
    ),
    "diff --json is a directory": (
        ["diff", LOG, LOG, "--json", "{d}"],
        "torch-otel diff: cannot write --json {d} (it is a directory); pass a writable path",
    ),
    "demo --metrics-port 70000": (
        ["demo", "--metrics-port", "70000"],
        "torch-otel demo: argument --metrics-port: '70000' is not a port; use 0 to 65535 (0: any free port); "
        "see torch-otel demo --help",
    ),
    "demo --metrics-port -1": (
        ["demo", "--metrics-port=-1"],
        "torch-otel demo: argument --metrics-port: '-1' is not a port; use 0 to 65535 (0: any free port); "
        "see torch-otel demo --help",
    ),
    "demo --serve nan": (
        ["demo", "--serve", "nan"],
        "torch-otel demo: argument --serve: 'nan' is not a number of seconds; use 0 or more; see torch-otel demo --help",
    ),
    "demo --backend nosuch": (
        ["demo", "--backend", "nosuch", "--traces-file", "{d}/spans.jsonl"],
        "torch-otel demo: --backend 'nosuch' is not a torch.compile backend this torch has; use one of aot_eager, eager, "
        "inductor (torch._dynamo.list_backends() lists them all)",
    ),
    "doctor --json under a file": (
        ["doctor", "--json", "{d}/afile/doctor.json"],
        "torch-otel doctor: cannot write --json {d}/afile/doctor.json ({d}/afile is a file, not a directory); "
        "pass a writable path",
    ),
    "replay --pushgateway with a bad port": (
        ["replay", LOG, "-o", "{d}/spans.jsonl", "--pushgateway", "http://127.0.0.1:99999"],
        "torch-otel replay: --pushgateway 'http://127.0.0.1:99999' is a URL with a bad port (99999 is not from 1 to 65535) "
        "(its default is $TORCH_OTEL_PUSHGATEWAY_URL); use e.g. http://127.0.0.1:9091",
    ),
    "replay --baseline missing": (
        ["replay", LOG, "-o", "{d}/spans.jsonl", "--baseline", "{d}/nope"],
        "torch-otel replay: --baseline {d}/nope: no such file or directory; pass an earlier run's TORCH_TRACE log or "
        "directory, or a cache key index (keys-rank<R>.json)",
    ),
    "an unknown option": (
        ["replay", LOG, "--outptu", "x"],
        "torch-otel: unrecognized arguments: --outptu x; see torch-otel --help",
    ),
}


@pytest.mark.parametrize("case", list(UP_FRONT))
def test_each_command_checks_its_paths_and_numbers_before_any_work_one_line_and_exit_2(tmp_path, case):
    """The diff's outputs are checked before either side is read: a CI job must not pass without its artifact."""
    from pathlib import Path

    (tmp_path / "afile").write_text("")
    args, want = UP_FRONT[case]
    root = Path(__file__).resolve().parent.parent
    r = run_cli(*(a.format(d=tmp_path) for a in args), cwd=root, timeout=120)
    assert (r.returncode, r.stderr.splitlines()) == (2, [want.format(d=tmp_path)]), (r.stdout[-2000:], r.stderr[-3000:])
    assert r.stdout == ""  # nothing was done: no summary, no diff, no demo
    assert not (tmp_path / "spans.jsonl").exists()


def test_a_bad_otlp_endpoint_stops_a_replay_up_front_and_a_bad_sdk_disabled_is_one_line(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = run_cli("replay", LOG, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:99999"}, cwd=root)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr[-2000:]
    assert r.stderr.splitlines() == [
        "torch-otel replay: OTEL_EXPORTER_OTLP_ENDPOINT='http://collector:99999' is a URL with a bad port (99999 is not "
        "from 1 to 65535); use e.g. http://localhost:4317; or write the spans to a file with --output FILE"
    ]
    r = run_cli("replay", LOG, "-o", str(tmp_path / "s.jsonl"), env={"OTEL_SDK_DISABLED": "maybe"}, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [ln for ln in r.stderr.splitlines() if "OTEL_SDK_DISABLED" in ln] == [
        "torch-otel: WARNING: OTEL_SDK_DISABLED='maybe' is not a boolean; use true or false (using false: torch-otel is on)"
    ]


def test_a_diff_of_an_empty_log_speaks_as_the_diff(tmp_path):
    from pathlib import Path

    empty = tmp_path / "empty.log"
    empty.write_text("")
    r = run_cli("diff", str(empty), str(Path(__file__).resolve().parent.parent / LOG))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "torch-otel replay" not in r.stderr
    assert r.stderr.splitlines()[0].startswith(f"torch-otel diff: {empty}: the file is empty"), r.stderr


@pytest.mark.parametrize("off", ["none", "off", "OFF", "false", "0", "no", " off "])
def test_turning_the_summary_off_as_any_switch_says_it_writes_no_file_of_that_name(tmp_path, monkeypatch, off):
    """``TORCH_OTEL_SUMMARY=off`` (as ``TORCH_OTEL_CAPTURE`` and ``TORCH_OTEL_GRAPH_CALLS`` say it) is no summary, not a
    file named ``off`` in the working directory; a path beside it is still written to."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings({"TORCH_OTEL_SUMMARY": off}, report=False)
    assert settings.summary == () and not settings.problems
    both = load_settings({"TORCH_OTEL_SUMMARY": f"{off},summary.json"}, report=False)
    assert both.summary == ("summary.json",)
    assert load_settings({"TORCH_OTEL_TRACES_FILE": off}, report=False).traces_file is None  # no spans file either
