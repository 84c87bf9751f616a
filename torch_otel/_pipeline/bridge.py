"""The bridge's lifecycle: instrument / uninstrument / force_flush / shutdown."""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from .._assemble.assembler import Assembler
from .._capture.live_capture import LiveCapture
from .._core.errors import logger, record_error, warn_once
from .._core.health import set_live_stats
from .._core.ranks import env_rank
from .._core.settings import Settings, batch_sizes, capture_level, load_settings
from .._features.registry import start_process
from .._model.sink_api import Sink
from .._otel.delivery import flowing
from .._otel.exposition import sync_before_scrape
from .._sinks.late_spans import EVERY
from .._sinks.metrics import CompileMetrics
from .._sinks.spans import SpanMapper
from .._sinks.summary import RunSummary
from .._sinks.user_sinks import UserSinks
from .._version import __version__
from .build import MetricsSpec, PipelineSpec, build_pipeline
from .installed_sinks import installed_sinks
from .pipeline import Pipeline

_lock = threading.RLock()
_CHILD_FLUSH_MS = 1_000  # a slow collector costs a forked child's compile at most this


def _flush_in_child() -> None:
    """In a forked child, export each compile as it finishes: pool workers are often killed (terminate) before exit."""
    force_flush(_CHILD_FLUSH_MS)


@dataclass
class Bridge:
    settings: Settings
    assembler: Assembler
    capture: LiveCapture
    tracer_provider: Any
    pipeline: Pipeline  # the sinks, the features' states and their lifecycle: the run summary, metrics, log records
    owned: list[Any] = field(default_factory=list)  # providers/servers we created and must shut down
    closing: Callable[[], None] | None = None  # nothing configured: the line that says where things went, at the end
    unsync: Callable[[], None] | None = None  # takes the bridge off its registry's scrapes

    @property
    def metrics(self) -> CompileMetrics | None:
        return self.pipeline.metrics

    @property
    def summary(self) -> RunSummary | None:
        """The run summary (TORCH_OTEL_SUMMARY's, written when the bridge stops; or the one ``instrument`` was given)."""
        return self.pipeline.summary


_bridge: Bridge | None = None
_atexit_registered = False


def instrument(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    *,
    logger_provider: Any = None,
    registry: CollectorRegistry | None = REGISTRY,
    capture: str | None = None,
    settings: Settings | None = None,
    _owned: list[Any] | None = None,
    _on_first_compile: list[Callable[[], None]] | None = None,
    summary: RunSummary | None = None,
    sinks: Sequence[Sink] = (),
) -> Bridge | None:
    """Start turning torch.compile compiles into traces and metrics.

    ``tracer_provider`` and ``meter_provider`` default to the global ones
    (never replaced). The metrics go both to ``registry`` (prometheus_client;
    ``None`` for none) and to the meter provider's readers (OTLP).
    ``logger_provider`` (none by default) turns torch's compile warnings and
    graph breaks into log records correlated with the compile's trace.
    ``capture`` is ``"default"``, ``"full"`` or ``"off"`` (default:
    ``TORCH_OTEL_CAPTURE``). ``summary`` is filled with every compile (as
    ``TORCH_OTEL_SUMMARY`` asks for one). ``sinks`` (``torch_otel.Sink``) each get
    every finished compile's record (docs/extending.md). Instrumenting twice is a no-op.
    """
    global _bridge, _atexit_registered
    with _lock:
        if _bridge is not None:
            return _bridge
        settings = settings or load_settings()
        level = settings.capture
        if capture is not None:
            problems: list[str] = []
            level = capture_level(capture, "capture", problems)
            for p in problems:
                logger.warning("%s", p)
        if level == "off":
            return None
        start_process(os.environ)  # the features whose live state begins with the process, if no entry point did
        if level != settings.capture:
            settings = dataclasses.replace(settings, capture=level)  # the level this bridge runs at: its features read it
        provider = tracer_provider or trace.get_tracer_provider()
        tracer = provider.get_tracer("torch_otel", __version__)
        metrics = None
        if settings.metrics:
            metrics = MetricsSpec(registry, meter_provider or otel_metrics.get_meter_provider())
        pipeline = build_pipeline(
            PipelineSpec(
                "live",
                settings,
                tracing=SpanMapper(tracer, settings, live=True),
                flush_spans=_flush_while_flowing(provider),
                flush_every=max(1, min(EVERY, batch_sizes(os.environ, "OTEL_BSP")[0] // 2)),
                metrics=metrics,
                logger_provider=logger_provider,
                summary=summary,
                sinks=(UserSinks(sinks, settings.capture_payloads),) if sinks else (),
            )
        )
        assembler = pipeline.assembler(max_open=settings.max_open_compiles)
        cap = LiveCapture(
            assembler,
            level,
            warnings=logger_provider is not None,
            on_first_compile=_on_first_compile,
            after_compile_in_child=_flush_in_child,
            states=pipeline.states,  # the features' rows attach their states' own hooks
            on_tick=pipeline.collect,  # the states the pipeline reads while the process runs (where a state asks: collect_every_s)
            tick_s=pipeline.collect_every_s,
        )
        try:
            cap.install()
        except Exception as exc:  # noqa: BLE001 - never break the user's program
            record_error("instrument", exc)
            return None
        _bridge = Bridge(settings, assembler, cap, provider, pipeline, list(_owned or []))
        set_live_stats(assembler.stats)
        if metrics is not None and metrics.registry is not None:  # /metrics serves the compiles that ended, the states now
            _bridge.unsync = sync_before_scrape(metrics.registry, _before_scrape(cap, pipeline))
        if not _atexit_registered:
            atexit.register(shutdown)
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _register_multiprocessing_hook()
            _atexit_registered = True
        return _bridge


def _flush_while_flowing(provider: Any) -> Callable[[int], bool] | None:
    """The tracer provider's flush, for the late spans' pacing: only while spans reach every endpoint (a flush waits
    out each batch's export on a collector that is down or hangs); False when it was not done."""
    force = getattr(provider, "force_flush", None)
    if force is None:
        return None

    def flush(timeout_millis: int) -> bool:
        return flowing("traces") and bool(force(timeout_millis))

    return flush


def _before_scrape(cap: LiveCapture, pipeline: Pipeline) -> Callable[[], None]:
    def before() -> None:
        cap.drain()
        pipeline.collect()

    return before


def is_instrumented() -> bool:
    return _bridge is not None


def current() -> Bridge | None:
    return _bridge


def uninstrument(timeout_millis: int | None = None) -> None:
    """Remove every hook and leave torch's loggers exactly as they were; stop what the bridge started.

    The pipeline's sinks stop first (the cache key index and the run summary are written), then the providers and
    servers the bridge made, all within ``timeout_millis`` (default ``TORCH_OTEL_SHUTDOWN_TIMEOUT``).
    """
    global _bridge
    from .._core.import_watch import cancel

    cancel()  # an arming still waiting for torch._dynamo's import (torch_otel.auto, the instrumentor) is off too
    with _lock:
        b = _bridge
        if b is None:
            return
        _bridge = None
        set_live_stats(None)
        if b.unsync is not None:
            b.unsync()
        try:
            b.capture.uninstall()
        except Exception as exc:  # noqa: BLE001
            record_error("uninstrument", exc)
        try:
            b.assembler.flush("the bridge was uninstrumented during the compile", cut_ns=time.time_ns())
        except Exception as exc:  # noqa: BLE001
            record_error("uninstrument flush", exc)
    timeout = b.settings.shutdown_timeout_ms if timeout_millis is None else timeout_millis
    deadline = time.monotonic() + timeout / 1000
    b.pipeline.shutdown(timeout)
    _stop_owned(b, max(0, int((deadline - time.monotonic()) * 1000)))
    if b.closing is not None:
        b.closing()  # after the summary and the exporters' last flush: it says what they did


def _stop_owned(b: Bridge, timeout_millis: int) -> None:
    """Flush and stop the providers and servers the bridge started, within ``timeout_millis`` in all.

    The work runs on a daemon thread: an unreachable or slow collector can cost
    at most the timeout, then the process goes on (or exits) without waiting.
    """
    if not b.owned:
        return
    owned, b.owned = list(b.owned), []
    from .._otel.delivery import LOST_DATA, absent_default, problems_at_exit, reachable, targets

    dead = sorted(t for t in targets() if not reachable(t))
    lost = [t for t in dead if not absent_default(t)]  # OTLP's default endpoint, unnamed and never there: no loss
    if lost:
        warn_once(  # the same key as a failed export's line: a process that lost data says so once
            LOST_DATA,
            "cannot reach the collector at %s; what was not exported yet is dropped (not waiting for it)",
            ", ".join(lost),
        )
    # TLS to a plaintext collector (or the reverse), a certificate that does not verify, the other protocol's port
    untrusted = problems_at_exit(sorted(targets() - set(dead)))
    if (dead or untrusted) and len(dead) + len(untrusted) == len(targets()):
        timeout_millis = min(timeout_millis, 200)
    done = threading.Event()

    def work() -> None:
        try:
            for obj in owned:
                flush = getattr(obj, "force_flush", None)
                if flush is not None:
                    _call(flush, timeout_millis)
            for obj in owned:
                stop = getattr(obj, "shutdown", None)
                if stop is not None:
                    _call(stop, timeout_millis)
        finally:
            done.set()

    threading.Thread(target=work, name="torch-otel-shutdown", daemon=True).start()
    if not done.wait(timeout_millis / 1000) and not dead and not untrusted:
        warn_once(
            "shutdown-timeout",
            "could not finish exporting to %s within %.1f s (is the collector reachable?); going on without waiting. "
            "Set TORCH_OTEL_SHUTDOWN_TIMEOUT to wait longer",
            ", ".join(sorted(targets())) or "the exporters",
            timeout_millis / 1000,
        )


def _call(fn: Callable[..., Any], timeout_millis: int) -> None:
    try:
        if "timeout_millis" in inspect.signature(fn).parameters:
            fn(timeout_millis=timeout_millis)
        else:
            fn()
    except Exception as exc:  # noqa: BLE001
        record_error(f"{getattr(fn, '__qualname__', fn)}", exc)


_flushing: threading.Thread | None = None  # the flush in flight, if any: a hung collector never piles up threads


def force_flush(timeout_millis: int = 10_000) -> bool:
    """Export everything finished so far, waiting at most ``timeout_millis``. Compiles still running are not cut short.

    The SDK's batch processors do not bound their flush (a slow collector holds
    it for the exporter's whole retry time), so the flush runs on a daemon
    thread and the caller waits for it at most ``timeout_millis``. Returns
    whether it finished in time.
    """
    global _flushing
    b = _bridge
    deadline = time.monotonic() + timeout_millis / 1000
    sinks_done = True
    if b is not None:
        b.capture.drain()  # the compiles that ended: their spans and metrics, now
        b.pipeline.collect()  # and the graph calls so far, as a scrape reads them
        sinks_done = b.pipeline.force_flush(timeout_millis)  # what the sinks hold (none buffers today)
        timeout_millis = max(0, int((deadline - time.monotonic()) * 1000))
    provider = b.tracer_provider if b is not None else trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is None:
        return sinks_done
    ok: list[bool] = []

    def work() -> None:
        try:
            ok.append(bool(flush(timeout_millis)))
        except Exception as exc:  # noqa: BLE001
            record_error("force_flush", exc)
            ok.append(False)

    with _lock:
        worker = _flushing
        if worker is None or not worker.is_alive():
            worker = _flushing = threading.Thread(target=work, name="torch-otel-flush", daemon=True)
            worker.start()
    worker.join(timeout_millis / 1000)
    return sinks_done and bool(ok and ok[0]) and not worker.is_alive()


def shutdown(timeout_millis: int | None = None) -> None:
    """Finish compiles in flight (as incomplete), flush, and stop what the bridge started. Safe twice.

    Waits at most ``timeout_millis`` (default ``TORCH_OTEL_SHUTDOWN_TIMEOUT``) for exporters.
    """
    b = _bridge
    if b is None:
        return
    try:
        b.capture.drain()
        b.assembler.flush(cut_ns=time.time_ns())  # a compile cut short (SIGTERM, exit) ends now, not at its last phase
    except Exception as exc:  # noqa: BLE001
        record_error("shutdown flush", exc)
    if not b.owned:  # providers the application owns: flush them, as before
        force_flush(b.settings.shutdown_timeout_ms if timeout_millis is None else timeout_millis)
    uninstrument(timeout_millis)


_sigterm_installed = False
_sigterm_handler: Callable[[int, Any], None] | None = None  # the handler flush_on_sigterm installed
_sigterm_held = threading.local()  # .on: this thread blocked SIGTERM for the fork it is making


def flush_on_sigterm() -> bool:
    """On SIGTERM, shut the bridge down (flushing what finished), then die of SIGTERM as before.

    Installed only over the default disposition and from the main thread: a
    handler the application set is never replaced. Returns whether it was installed.
    A forked child is born without it (:func:`_hold_sigterm_for_fork`).
    """
    global _sigterm_installed, _sigterm_handler
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False

        def on_sigterm(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                shutdown()
            finally:
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError) as exc:  # not the main interpreter, or no SIGTERM here
        record_error("SIGTERM handler", exc)
        return False
    _sigterm_handler = on_sigterm
    _sigterm_installed = True
    os.register_at_fork(before=_hold_sigterm_for_fork, after_in_parent=_release_sigterm, after_in_child=_default_sigterm_in_child)
    return True


def _hold_sigterm_for_fork() -> None:
    """Before a fork, while the bridge's SIGTERM handler is installed: block SIGTERM on the forking thread.

    A forked child must die of SIGTERM at once, as it would without the bridge (:func:`_default_sigterm_in_child`
    says why). The child inherits this thread's signal mask, so a SIGTERM sent before its after-fork hooks have
    run (a pool's parent terminates a worker that has not been scheduled yet) waits, pending, instead of reaching
    the parent's handler, and is delivered once the child has SIGTERM's default action back.
    """
    try:
        if _sigterm_handler is not None and signal.getsignal(signal.SIGTERM) is _sigterm_handler:
            _sigterm_held.on = signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (ValueError, OSError) as exc:  # never fail a fork
        record_error("SIGTERM mask before fork", exc)


def _release_sigterm() -> None:
    """After a fork, in the parent (and last in the child): SIGTERM's mask as it was before the fork."""
    if getattr(_sigterm_held, "on", False):
        _sigterm_held.on = False
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        except (ValueError, OSError) as exc:
            record_error("SIGTERM mask after fork", exc)


def _default_sigterm_in_child() -> None:
    """A forked child gets SIGTERM's default action back: it dies at once, as it would without the bridge.

    ``Pool.terminate()`` (and so the end of every ``with Pool(...)`` block) sends SIGTERM to each worker, then
    joins it with no timeout. A Python handler runs only when the main thread is back in the interpreter; a
    worker waiting for its next task blocks in ``sem_wait`` on the task queue's lock, and a signal that lands in
    glibc's retry loop there (the parent takes that lock just before it signals, which wakes the waiters) never
    interrupts it. The handler never runs, the worker never exits and the parent hangs in ``join()``. The child
    needs no flush on SIGTERM: it exported each compile as it ended (``_flush_in_child``).
    """
    try:
        if _sigterm_handler is not None and signal.getsignal(signal.SIGTERM) is _sigterm_handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError) as exc:  # never fail a fork
        record_error("SIGTERM handler after fork", exc)
    _release_sigterm()  # a SIGTERM that came before this is delivered now, with the default action


def _after_fork_in_child() -> None:
    b = _bridge
    if b is None:
        return
    # The parent's compiles in flight are the parent's to report.
    b.capture.after_fork_in_child()
    b.pipeline.after_fork()  # the features' states (a child counts its own calls) and the metrics
    b.assembler._open.clear()
    b.assembler._lock = threading.RLock()


class _ForkToken:
    """Kept alive for multiprocessing's after-fork registry (it holds objects weakly)."""


_fork_token = _ForkToken()


def _in_multiprocessing_child(_token: object) -> None:
    # multiprocessing children leave through os._exit (no atexit): flush from its own exit hook.
    # Registered here, after Process._bootstrap has cleared the finalizers inherited from the parent.
    import multiprocessing.util

    multiprocessing.util.Finalize(None, shutdown, exitpriority=10)


def _register_multiprocessing_hook() -> None:
    try:
        import multiprocessing.util

        multiprocessing.util.register_after_fork(_fork_token, _in_multiprocessing_child)
    except Exception as exc:  # noqa: BLE001
        record_error("multiprocessing hook", exc)


def _no_trace_destination(env: Mapping[str, str], settings: Settings) -> bool:
    """Whether no exporter could be built for the traces the user sent somewhere by name: no traces file, no tracer
    provider (the bridge's or the application's), and ``OTEL_TRACES_EXPORTER`` is not ``none`` by choice."""
    from .._otel.providers import global_provider_is_set

    if settings.traces_file or global_provider_is_set():
        return False
    chosen = [v.strip().lower() for v in (env.get("OTEL_TRACES_EXPORTER") or "").split(",") if v.strip()]
    return not (chosen and all(v == "none" for v in chosen))


def configure_from_env(env: Mapping[str, str] | None = None, tracer_provider: Any = None, meter_provider: Any = None) -> Any:
    """Configure from ``OTEL_*``/``TORCH_OTEL_*`` and instrument. Returns the bridge, or None.

    What ``torch_otel.auto``, ``torch-otel run`` and the ``opentelemetry-instrument`` instrumentor call; it loads the
    sinks installed as packages (``TORCH_OTEL_SINKS`` chooses among them).
    """
    from .._core.import_watch import sdk_disabled
    from .._otel.providers import configure_providers

    env = os.environ if env is None else env
    if sdk_disabled(env):
        return None
    settings = load_settings(env)
    if settings.capture == "off":
        return None
    c = configure_providers(env, settings)
    summary_unset = not (env.get("TORCH_OTEL_SUMMARY") or "").strip()
    if c.closing_line is not None:
        if summary_unset and c.closing_line.rank == 0:
            settings = dataclasses.replace(settings, summary=("stderr",))  # nothing configured: the summary at exit
        c.closing_line.summary_on_stderr = "stderr" in settings.summary  # the closing line points at it, whoever asked
        c.closing_line.summary_files = any(d not in ("stderr", "stdout") for d in settings.summary)
    elif summary_unset and env_rank(env) == 0 and tracer_provider is None and _no_trace_destination(env, settings):
        # traces were sent somewhere by name, and no destination named can take them (an unknown exporter, an OTLP
        # endpoint that is no URL, each its own line): the run summary at exit is then all the run leaves; keep it
        settings = dataclasses.replace(settings, summary=("stderr",))
    bridge = instrument(
        tracer_provider or c.tracer_provider,
        meter_provider or c.meter_provider,
        logger_provider=c.logger_provider,
        settings=settings,
        _owned=c.owned,
        _on_first_compile=c.on_first_compile,
        sinks=installed_sinks(settings.sinks),  # the sinks installed as packages (entry points torch_otel.sinks)
    )
    if bridge is not None and c.closing_line is not None:
        bridge.closing = c.closing_line.say
    if bridge is not None and settings.flush_on_sigterm:
        flush_on_sigterm()
    return bridge
