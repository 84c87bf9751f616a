"""A user's own script with nothing configured: what it prints, serves and sends, and what a named endpoint changes.

docs/configuration.md#with-nothing-configured: OpenTelemetry's defaults stand (traces and metrics over OTLP to
localhost:4317); no collector there is not an error and nothing waits for it; the run summary is printed at exit;
/metrics is served on 127.0.0.1 while OTEL_METRICS_EXPORTER is unset; one line says where everything went. A
collector the user named keeps its error and replay's exit 3.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.helpers import own_lines, run_cli
from tests.servers import Rotel, wait_until
from torch_otel._core.ports import free_port
from torch_otel._otel import delivery
from torch_otel._otel.delivery import GuardedSpanExporter, Target, dropped, not_sent, reachable
from torch_otel._otel.nothing_configured import nothing_configured
from torch_otel._otel.providers import exporter_names, otlp_named

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = "http://localhost:4317"
# A user's training script: a model compiled, three steps with a new batch size at the second (one recompile), and
# its own look at /metrics while it runs.
TRAIN = """\
import sys, urllib.request
import torch

model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="aot_eager")
for n in (4, 8, 12):
    model(torch.randn(n, 8)).sum().backward()
port = sys.argv[1] if len(sys.argv) > 1 else ""
if port:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    print("scraped:", [ln for ln in body.splitlines() if ln.startswith("torch_compile_compiles_total")])
print("trained")
"""
ELSEWHERE = (
    ". Elsewhere: OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4317 (a collector), TORCH_OTEL_TRACES_FILE=spans.jsonl "
    "(a file), TORCH_OTEL_SUMMARY=stderr,compile.html (the summary and its page); docs/configuration.md"
)


@pytest.fixture
def no_default_collector() -> None:
    if reachable(DEFAULT):  # the machine runs a collector on OTLP's default port: the run would (rightly) use it
        pytest.fail(f"something listens at {DEFAULT}; these tests need OTLP's default endpoint free")


def _train(tmp_path: Path, env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return run_cli("run", "--", __import__("sys").executable, str(script), *args, env=env, cwd=tmp_path, script=True)


def test_a_script_with_nothing_configured_prints_its_summary_serves_metrics_and_says_where_it_all_went(
    tmp_path, no_default_collector
):
    port = free_port()
    r = _train(tmp_path, {"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)}, str(port))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trained" in r.stdout
    scraped = next(ln for ln in r.stdout.splitlines() if ln.startswith("scraped:"))
    assert 'torch_compile_compiles_total{kind="frame",rank="0",status="ok"}' in scraped, scraped  # /metrics, mid-run
    err = r.stderr.splitlines()
    start = err.index(next(ln for ln in err if ln.startswith("torch.compile run summary (live): 3 compiles")))
    assert "recompiles: 1 (size_mismatch 1)" in err[start:]
    ours = own_lines(r.stderr)
    assert ours == [
        f"torch-otel: traces of 3 compiles not sent: no collector at {DEFAULT} (OTLP's default endpoint); metrics were "
        f"served on http://127.0.0.1:{port}/metrics while it ran; the run summary is above" + ELSEWHERE
    ], r.stderr[-3000:]
    assert err[-1] == ours[0]  # after the summary, the last line: no warning, nothing lost, nothing waited for


def test_a_busy_default_port_and_no_summary_are_said_in_the_closing_line_not_warned(tmp_path, no_default_collector):
    """The endpoint nobody asked for: its busy port is part of the closing line, not a warning. TORCH_OTEL_SUMMARY=none
    turns the summary off."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def take_9464() -> bool:  # another test's bridge may serve it for a few seconds
        try:
            holder.bind(("127.0.0.1", 9464))
        except OSError:
            return False
        return True

    with holder:
        wait_until(take_9464, 120, "port 9464 to be free")
        holder.listen()
        r = _train(tmp_path, {"TORCH_OTEL_SUMMARY": "none"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch.compile run summary" not in r.stderr
    ours = own_lines(r.stderr)
    assert ours == [
        f"torch-otel: traces of 3 compiles not sent: no collector at {DEFAULT} (OTLP's default endpoint); metrics were "
        "not served: cannot serve metrics on 127.0.0.1:9464 (Address already in use); set OTEL_EXPORTER_PROMETHEUS_PORT "
        "to a free port" + ELSEWHERE
    ], r.stderr[-3000:]


FORKS = """\
import multiprocessing as mp
import torch

torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))


def work(i):
    return torch.compile(lambda x: x * i, backend="eager")(torch.ones(2)).sum().item()  # a child compiles too


if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:  # as a DataLoader's workers are forked
        print(pool.map(work, range(4)))
"""


def test_forked_workers_print_no_summary_or_closing_line_of_their_own(tmp_path, no_default_collector):
    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    r = run_cli("run", "--", __import__("sys").executable, str(script), env={"OTEL_EXPORTER_PROMETHEUS_PORT": "0"}, cwd=tmp_path)
    assert r.returncode == 0 and "[0.0, 2.0, 4.0, 6.0]" in r.stdout, r.stderr[-3000:]
    assert r.stderr.count("torch.compile run summary") == 1, r.stderr[-5000:]
    ours = own_lines(r.stderr)
    assert len(ours) == 1 and ours[0].startswith("torch-otel: traces of 1 compile not sent"), ours


LOG = ROOT / "tests" / "data" / "tlparse-corpus" / "multi_rank_runtime_rank_0.log.gz"


def test_replay_with_nothing_configured_exits_0_and_a_named_endpoint_with_no_collector_exits_3(no_default_collector):
    r = run_cli("replay", str(LOG))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch.compile run summary (replay): 4 compiles" in r.stdout
    assert r.stderr.splitlines() == [
        f"torch-otel replay: spans not sent: no collector at {DEFAULT} (OTLP's default endpoint; nothing named one). "
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4317 sends them to a collector, --output spans.jsonl writes them to a file"
    ]
    # the exporter's timeout is not what names an endpoint: 1 s, not its 10, so that each run does not wait out retries
    for named in ({"OTEL_EXPORTER_OTLP_ENDPOINT": DEFAULT}, {"OTEL_TRACES_EXPORTER": "otlp"}):
        r = run_cli("replay", str(LOG), env={**named, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
        assert r.returncode == 3, (named, r.stderr[-3000:])
        assert r.stderr.splitlines()[-1].startswith("torch-otel replay: nothing was exported"), r.stderr[-3000:]


def test_what_counts_as_named():
    assert nothing_configured({}) and not otlp_named({}, "traces")
    assert nothing_configured({"OTEL_TRACES_EXPORTER": " ", "OTEL_METRICS_EXPORTER": "prometheus"})  # empty is unset
    for var in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        assert otlp_named({var: "x"}, "traces") and not nothing_configured({var: "x"}), var
    assert not nothing_configured({"TORCH_OTEL_TRACES_FILE": "spans.jsonl"})
    assert not otlp_named({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:4317"}, "traces")
    # an empty OTEL_*_EXPORTER means unset, as the specification says: its default, not "no exporter"
    assert exporter_names({"OTEL_TRACES_EXPORTER": ""}, "OTEL_TRACES_EXPORTER", "otlp", ("otlp", "none")) == ["otlp"]


def test_the_default_endpoint_is_used_from_the_first_answer_and_a_loss_after_that_is_one(tmp_path):
    """The guard on an unnamed endpoint, against a real collector (rotel) that is down, then up, then down again."""
    with Rotel(started=False) as rotel:
        endpoint = rotel.grpc_endpoint

        def factory():  # type: ignore[no-untyped-def]
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=2)

        exporter = GuardedSpanExporter(factory, Target(endpoint, named=False))
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("test")
        root = {"torch.compile.kind": "frame"}  # compile roots: what the closing line counts (a start-up's is not one)
        before_dropped, before_unsent = dropped()["traces"], not_sent()["traces"]
        try:
            tracer.start_span("while-down", attributes=root).end()
            assert delivery.absent_default(endpoint)
            assert (not_sent()["traces"] - before_unsent, dropped()["traces"] - before_dropped) == (1, 0)
            assert delivery.compile_traces(endpoint) == (0, 1)
            rotel.start()
            tracer.start_span("once-up", attributes=root).end()
            wait_until(lambda: any(s.get("name") == "once-up" for s in rotel.received()["spans"]), 30, "the span")
            assert not delivery.absent_default(endpoint) and delivery.compile_traces(endpoint) == (1, 1)
            rotel.stop()
            t0 = time.monotonic()
            tracer.start_span("after-it-left", attributes=root).end()
            assert dropped()["traces"] - before_dropped == 1, time.monotonic() - t0  # now a loss, counted
            assert not_sent()["traces"] - before_unsent == 1
        finally:
            provider.shutdown()


def test_a_summary_page_asked_for_is_said_written_and_no_longer_suggested(tmp_path, no_default_collector):
    """TORCH_OTEL_SUMMARY=stderr,compile.html, as the closing line suggests: one line says where the page went, and the
    closing line no longer suggests the variable the user set (issue 49)."""
    page = tmp_path / "compile.html"
    r = _train(tmp_path, {"TORCH_OTEL_SUMMARY": f"stderr,{page}", "OTEL_EXPORTER_PROMETHEUS_PORT": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert page.read_text().lstrip().lower().startswith("<!doctype html")
    ours = own_lines(r.stderr)
    assert ours[0] == f"torch-otel: the run summary's page written to {page}", ours
    assert len(ours) == 2 and ours[1].startswith("torch-otel: traces of 3 compiles not sent"), ours
    assert ours[1].endswith(
        ". Elsewhere: OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4317 (a collector), TORCH_OTEL_TRACES_FILE=spans.jsonl "
        "(a file); docs/configuration.md"
    ), ours[1]
    assert "torch.compile run summary (live): 3 compiles" in r.stderr


@pytest.mark.parametrize(
    "typo",
    [{"OTEL_TRACES_EXPORTER": "otpl"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "htp://collector:4317"}],
    ids=["exporter", "endpoint"],
)
def test_a_trace_destination_no_exporter_can_take_keeps_the_summary_with_its_warning(tmp_path, typo):
    """A destination named with a typo: its warning, and the run summary at exit all the same (the traces went
    nowhere, so the summary is all the run leaves). Before issue 49, naming one removed the summary: a warning only."""
    r = _train(tmp_path, {**typo, "OTEL_METRICS_EXPORTER": "none"})
    assert r.returncode == 0, r.stderr[-3000:]
    ours = own_lines(r.stderr)
    assert len(ours) == 1 and ours[0].startswith("torch-otel: WARNING: ") and next(iter(typo)) in ours[0], ours
    assert "torch.compile run summary (live): 3 compiles" in r.stderr, r.stderr[-3000:]


def test_traces_turned_off_by_choice_print_no_summary(tmp_path):
    """OTEL_TRACES_EXPORTER=none is the user's choice, not a typo: no summary unless TORCH_OTEL_SUMMARY asks."""
    r = _train(tmp_path, {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch.compile run summary" not in r.stderr and not own_lines(r.stderr), r.stderr[-3000:]


def test_replay_into_a_listening_collector_says_where_its_spans_went():
    with Rotel() as rotel:
        r = run_cli("replay", str(LOG), env={"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint})
        assert r.returncode == 0, r.stderr[-3000:]
        wait_until(lambda: len(_roots(rotel)) >= 12, 30, "the replay's traces")
        roots = _roots(rotel)
    # one trace per compile (4) and per runtime record (8: cudagraph set-up after the compiles), each with its root
    assert len(roots) == 12, roots
    assert f"spans sent to {rotel.grpc_endpoint}: 12 traces" in r.stdout.splitlines(), r.stdout[-3000:]


def _roots(rotel: Rotel) -> list[str]:
    return [s["attrs"]["torch.compile.id"] for s in rotel.received()["spans"] if "torch.compile.kind" in s["attrs"]]
