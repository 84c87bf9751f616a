"""``torch-otel replay``: TORCH_TRACE logs read into the pipeline of spans, metrics and the replay's report.

The CLI parses the arguments into :class:`ReplayOptions` and calls :func:`run_replay`. It describes the replay's
pipeline (torch_otel._pipeline.build: the per-process tracers that deliver the spans, the metrics for a Pushgateway
or OTLP, the report), reads every log into it (:func:`replay_paths`, one assembler per file, :func:`replay_file`),
and shuts it down: the report writes the text, ``--json`` and ``--html``, then the spans and metrics go out.

Exit status: 0 done, 1 nothing could be parsed, 2 a path is missing, 3 spans were made but not exported.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._assemble.assembler import Tracing
from .._core.paths import check_writable
from .._core.settings import load_settings, url_problem, url_setting
from .._model.events import ArtifactEvent, GraphBreakEvent, PhaseEvent, torch_version_of
from .._model.record import CompileRecord, Sink
from .._parse.trace_log import Progress, ReplayStats, Writer, log_events, log_files, not_a_trace_log
from .build import MetricsSpec, PipelineSpec, Push, ReportSpec, build_pipeline
from .pipeline import Pipeline

__all__ = ["ReplayOptions", "replay_file", "replay_paths", "run_replay"]

EXIT_OK, EXIT_NOTHING_PARSED, EXIT_MISSING_PATH, EXIT_NOT_EXPORTED = 0, 1, 2, 3


@dataclass(frozen=True)
class ReplayOptions:
    """What ``torch-otel replay`` was asked for (see ``torch-otel replay --help``)."""

    paths: list[str]
    output: str | None = None  # OTLP-JSON lines file, instead of exporting per OTEL_*
    capture: str = "default"  # "full": artifact events too
    payloads: bool = False
    pushgateway: str | None = None
    json_path: str | None = None  # "-": stdout (the text goes to stderr)
    html: str | None = None
    run: str | None = None  # the `run` label of pushed metrics (default: the path's name)
    baseline: str | None = (
        None  # a previous run's TORCH_TRACE log or directory, or a key index: what misses are explained against
    )


def _stamp(writer: Writer) -> Callable[[CompileRecord, bool], None]:
    """Replay's own word on each compile (the assembler's ``stamp``): the process that wrote it, its log, its torch."""

    def stamp(record: CompileRecord, ended: bool) -> None:
        if not ended:
            record.process_id = writer.pid
            record.trace_file = writer.path
            return
        if record.process_id is None:
            record.process_id = writer.pid
        version = (record.metrics or {}).get("pytorch_version")
        record.torch_version = version if isinstance(version, str) and version else writer.torch_version

    return stamp


def replay_file(
    path: Path,
    into: Pipeline | Sequence[Sink],
    stats: ReplayStats,
    keep_all_payloads: bool = False,
    progress: Progress | None = None,
    artifacts: bool = False,
    tracing: Tracing | None = None,
) -> None:
    """One log into a pipeline (or sinks alone: a pipeline of them, with ``tracing``), through an assembler of its own
    that the pipeline makes (its records' process, log and torch stamped on each compile). Every artifact read is
    offered to the pipeline's features' states, with the torch release the log was written by (a state may learn from
    what torch logged outside any compile)."""
    stats.files += 1
    writer = Writer(path=str(path))
    pipeline = into if isinstance(into, Pipeline) else Pipeline(into, tracing=tracing)
    assembler = pipeline.assembler(max_open=4096, stamp=_stamp(writer))
    for _kind, events in log_events(path, stats, keep_all_payloads, writer, progress):
        for ev in events:
            if isinstance(ev, PhaseEvent):
                if writer.offset_ns is None:
                    writer.calibrate(ev.ts_ns)
            elif isinstance(ev, (GraphBreakEvent, ArtifactEvent)) and ev.ts_ns is None:
                ev.ts_ns = writer.line_ns()  # the reader's own word: its line's time (else: the compile's latest event's)
            if isinstance(ev, ArtifactEvent) and ev.name == "torch_version":
                writer.torch_version = torch_version_of(ev.payload) or writer.torch_version
            if isinstance(ev, ArtifactEvent):
                assembler.observe(ev, writer.torch_version)  # joins no compile: the features' states learn from it
                if not artifacts:
                    continue  # default capture: the same events a live default capture sees
            assembler.feed(ev)
    assembler.flush("the log ends before the compile ended")
    for k, v in assembler.stats.items():
        if k.startswith("orphan"):
            stats.skipped[f"{k.replace('_', ' ')} (no compile open for them)"] += v
    stats.unmatched["begins never ended"] += assembler.stats["unmatched_phase_begins"]
    stats.unmatched["ends with no begin open"] += assembler.stats["unmatched_phase_ends"]


def replay_paths(
    paths: list[str],
    pipeline: Pipeline,
    stats: ReplayStats,
    keep_all_payloads: bool = False,
    artifacts: bool = False,
) -> int:
    """Replay every path into ``pipeline``, one assembler per file. Exit status: 2 for a missing path (said at once), 1
    if nothing could be parsed, else 0. What could not be read is in ``stats`` (its report says it)."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            sys.stderr.write(
                f"torch-otel replay: {p}: no such file or directory; pass a TORCH_TRACE log, a .gz of one, or its directory\n"
            )
            return EXIT_MISSING_PATH
        found = log_files(path)
        if not found:
            stats.problems.append(
                f"{p}: the directory holds no files; pass the directory TORCH_TRACE named when the job ran (it writes one "
                "log per process there)"
            )
        for f in found:
            why = not_a_trace_log(f)
            if why:
                stats.problems.append(f"{f}: {why}")
            else:
                files.append(f)
    total_bytes = sum(f.stat().st_size for f in files)
    stats.bytes = total_bytes
    progress = Progress(total_bytes, sys.stderr) if sys.stderr.isatty() else None
    for f in files:
        replay_file(f, pipeline, stats, keep_all_payloads, progress, artifacts)
        if progress is not None:
            progress.file_done(f.stat().st_size)
    if progress is not None:
        progress.close()
    if not stats.record_types and not stats.unknown_record_types:
        return EXIT_NOTHING_PARSED
    return EXIT_OK


def run_name(paths: list[str]) -> str:
    name = Path(paths[0]).resolve().name or "replay"
    return name[:64]


def _metrics(
    pushgateway: str | None, run: str, env: Mapping[str, str], err: IO[str], succeeded: Callable[[], bool]
) -> MetricsSpec | None:
    """Where a replay's metrics go: a fresh registry pushed to the Pushgateway, and OTLP when OTEL_METRICS_EXPORTER
    asks; None for neither. A bad --pushgateway is one line, now."""
    if not pushgateway and not env.get("OTEL_METRICS_EXPORTER"):
        return None
    from prometheus_client import CollectorRegistry

    from .._otel.providers import METRIC_EXPORTERS, build_meter_provider, exporter_names

    registry = push = None
    if pushgateway:
        problems: list[str] = []
        url = url_setting({"--pushgateway": pushgateway}, "--pushgateway", problems)
        if url is None:
            print(f"torch-otel replay: {problems[0]}", file=err)
        else:
            registry = CollectorRegistry()
            push = Push(url, run, succeeded, sys.stdout, err)
    meter_provider = None
    if env.get("OTEL_METRICS_EXPORTER"):
        names = exporter_names(env, "OTEL_METRICS_EXPORTER", "none", METRIC_EXPORTERS)
        pushed = [n for n in names if n in ("otlp", "console")]  # prometheus: nothing to serve after a replay
        from .._otel.replay_tracers import replay_resource

        # not the replaying machine's host or pid; each series says its rank
        meter_provider = build_meter_provider(env, pushed, resource=replay_resource(None, None, None, run))
    if registry is None and meter_provider is None:
        return None
    return MetricsSpec(registry, meter_provider, "torch_otel.replay", None, run_id=run, owned=True, push=push)


def _argument_problem(opts: ReplayOptions, env: Mapping[str, str]) -> str | None:
    """The first argument or OTLP setting the replay cannot use, as one line; None when all can be used.

    A replay is not a training run: what it was told to use and cannot is an error up front (exit 2), where a live
    run reports it and goes on.
    """
    from .._core.import_watch import sdk_disabled
    from .._otel.providers import TRACE_EXPORTERS, exporter_names, otlp_problem

    if opts.pushgateway:
        why = url_problem(opts.pushgateway.strip())
        if why is not None:
            return f"--pushgateway {opts.pushgateway!r} {why} (its default is $TORCH_OTEL_PUSHGATEWAY_URL); use e.g. http://127.0.0.1:9091"
    if opts.baseline and not os.path.exists(opts.baseline):
        return (
            f"--baseline {opts.baseline}: no such file or directory; pass an earlier run's TORCH_TRACE log or directory, "
            "or a cache key index (keys-rank<R>.json)"
        )
    if (
        not opts.output
        and not sdk_disabled(env)
        and "otlp" in exporter_names(env, "OTEL_TRACES_EXPORTER", "otlp", TRACE_EXPORTERS)
    ):
        problem, _endpoint = otlp_problem(env, "traces")
        if problem is not None:
            return f"{problem}; or write the spans to a file with --output FILE"
    return None


def run_replay(opts: ReplayOptions, env: Mapping[str, str] | None = None) -> int:
    """Replay ``opts.paths`` into spans, metrics, the run summary and the divergence report; the exit status."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import NoOpTracer

    from .._core.import_watch import sdk_disabled
    from .._otel.delivery import GOES_ON, compile_traces, dropped, explained, targets
    from .._otel.otlp_json import OTLPJsonFileSpanExporter
    from .._otel.providers import build_span_processors
    from .._otel.replay_tracers import ReplayTracers
    from .._sinks.spans import SpanMapper

    env = os.environ if env is None else env
    err = sys.stderr
    # every output path checked before the replay: one line and exit 2, not an error after the whole run
    for option, path in (("--output", opts.output), ("--json", opts.json_path), ("--html", opts.html)):
        line = check_writable(path, option) if path and path != "-" else None
        if line:
            print(f"torch-otel replay: {line}", file=err)
            return EXIT_MISSING_PATH
    # and every other argument and setting the replay would act on: one line and exit 2, before any work
    line = _argument_problem(opts, env)
    if line:
        print(f"torch-otel replay: {line}", file=err)
        return EXIT_MISSING_PATH
    settings = load_settings(env)
    if opts.payloads:
        settings = dataclasses.replace(settings, capture_payloads=True)
    run = opts.run or run_name(opts.paths)
    processors: list[Any] = []
    absent: str | None = None  # OTLP's default endpoint, which nobody named, when nothing listens there
    if opts.output:
        if os.path.isfile(opts.output):
            open(opts.output, "w").close()  # start the file afresh (a device such as /dev/null is left alone)
        exporter = OTLPJsonFileSpanExporter(opts.output, setting="--output")
        processors = [BatchSpanProcessor(exporter, max_queue_size=65536)]
    elif not sdk_disabled(env):
        absent = _absent_default_endpoint(env)
        processors = [] if absent else build_span_processors(env)  # nothing there: no span is built
    # Each replayed process gets its own resource: the pid, rank and torch version its log holds.
    tracers = ReplayTracers(processors, run) if processors else None
    GOES_ON["tail"] = "The replay goes on, and says at its end what it could not export"
    lost_before = dropped()["traces"]
    code = EXIT_OK
    metrics = _metrics(opts.pushgateway, run, env, err, lambda: code == EXIT_OK)
    text = err if opts.json_path == "-" else sys.stdout  # stdout is the JSON's
    stats = ReplayStats()
    pipeline = build_pipeline(
        PipelineSpec(
            "replay",
            settings,
            tracing=SpanMapper(NoOpTracer(), settings, live=False, tracer_for=tracers.tracer_for) if tracers else None,
            spans=tracers,
            metrics=metrics,
            report=ReportSpec(stats, text, err, opts.json_path, opts.html, capture_payloads=opts.payloads),
            baseline=opts.baseline,  # a previous run the user named: the features' states read it
            say=lambda line: print(f"torch-otel replay: {line}", file=err),
        )
    )
    code = replay_paths(opts.paths, pipeline, stats, keep_all_payloads=opts.payloads, artifacts=opts.capture == "full")
    pipeline.shutdown()
    if pipeline.report is not None and pipeline.report.unwritten and code == EXIT_OK:
        code = EXIT_MISSING_PATH  # a path checked writable that could not be written all the same (a full disk, a race)
    lost = dropped()["traces"] - lost_before
    if lost and code == EXIT_OK:
        made = pipeline.spans.spans if pipeline.spans is not None else lost
        what = "nothing was exported" if lost >= made else f"{lost} of {made} spans were not exported"
        known = [explained(t) for t in sorted(targets())]
        if any(known):  # the cause is known: say it, not a guess
            cause = "; ".join(k for k in known if k)
            print(f"torch-otel replay: {what}: {cause}", file=err)
        else:
            print(
                f"torch-otel replay: {what}: the spans could not be delivered to "
                f"{', '.join(sorted(targets())) or 'the collector'}; start a collector there, point "
                "OTEL_EXPORTER_OTLP_ENDPOINT at one, or write them to a file with --output FILE",
                file=err,
            )
        code = EXIT_NOT_EXPORTED
    if opts.output and code == EXIT_OK:
        print(f"spans written to {opts.output}", file=text)
    elif code == EXIT_OK and tracers is not None:  # where they went, said as for a file
        for endpoint in sorted(targets()):
            sent, _ = compile_traces(endpoint)
            if sent:
                print(f"spans sent to {endpoint}: {sent} trace{'' if sent == 1 else 's'}", file=text)
    if absent and code == EXIT_OK:
        print(
            f"torch-otel replay: spans not sent: no collector at {absent} (OTLP's default endpoint; nothing named one). "
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4317 sends them to a collector, --output spans.jsonl writes them "
            "to a file",
            file=err,
        )
    return code


def _absent_default_endpoint(env: Mapping[str, str]) -> str | None:
    """OTLP's default endpoint, when the spans would go there only because nothing named another, and nothing
    listens there: the replay then builds no span and waits for no collector (docs/configuration.md). A collector the
    user named gets the export and, if it is not there, the error and exit 3."""
    from .._otel.delivery import reachable
    from .._otel.providers import TRACE_EXPORTERS, exporter_names, otlp_named, otlp_problem

    if otlp_named(env, "traces") or "otlp" not in exporter_names(env, "OTEL_TRACES_EXPORTER", "otlp", TRACE_EXPORTERS):
        return None
    problem, endpoint = otlp_problem(env, "traces")
    return None if problem is not None or reachable(endpoint) else endpoint
