"""torch's own logging machinery sees the bridge's loggers as torch set them up, with logs exported or not.

torch's logging tests (``torch.testing._internal.logging_utils.LoggingTestCase``) patch the ``emit`` of
every handler on torch's registered loggers and count a record once per handler it passes through; they
also assert that each of those loggers has at most two handlers. A handler of the bridge's there
(``OTEL_LOGS_EXPORTER`` used to add one on ``torch._dynamo`` and ``torch._inductor``) counted each
warning twice: test_logging.py's test_custom_format_exc, test_dynamo_error and test_inductor_error
failed. The bridge now takes those warnings from ``logging``'s record factory: these tests watch the
handlers the way torch's helper does, at each capture level, with a logger provider.

PyTorch's own test files are not in the wheel: ``bench/outputs/torch_logging_suite.py`` runs them (from a
pytorch checkout of the installed release) without the bridge, at default and full capture and with
``OTEL_LOGS_EXPORTER`` set, and compares each test's outcome. The last test here runs it when
``TORCH_OTEL_PYTORCH_TESTS`` names such a checkout's ``test`` directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import unittest.mock
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

import torch_otel
from tests.helpers import run_python

try:  # the SDK's name since the rename (1.39); the old one is deprecated there
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as _InMemory
except ImportError:  # pragma: no cover - an older SDK
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as _InMemory  # type: ignore[attr-defined,no-redef]

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "bench" / "outputs" / "torch_logging_suite.py"
LEVELS = ("default", "full")


def _registered() -> list[logging.Logger]:
    from torch._logging._internal import log_registry

    return [logging.getLogger(q) for q in log_registry.get_log_qnames()]


def _not_pytests(lg: logging.Logger) -> list[logging.Handler]:
    """The logger's handlers less pytest's (pytest 9 adds its capture handlers to non-propagating loggers while a
    test runs; torch's own suite is run with ``-p no:logging`` by bench/outputs/torch_logging_suite.py)."""
    return [h for h in lg.handlers if not type(h).__module__.startswith("_pytest")]


def _handlers() -> dict[str, list[logging.Handler]]:
    return {lg.name: _not_pytests(lg) for lg in _registered()}


@contextlib.contextmanager
def handler_watcher(records: list[logging.LogRecord]) -> Iterator[None]:
    """What ``LoggingTestCase._handler_watcher`` does: each handler on a registered logger appends what it emits."""
    with contextlib.ExitStack() as stack:
        for lg in _registered():
            handlers = _not_pytests(lg)
            assert 0 < len(handlers) <= 2, (lg.name, handlers)  # torch's helper asserts the same
            for handler in handlers:
                old_emit = handler.emit

                def new_emit(record: logging.LogRecord, old_emit=old_emit) -> None:  # type: ignore[no-untyped-def]
                    old_emit(record)
                    records.append(record)

                stack.enter_context(unittest.mock.patch.object(handler, "emit", new_emit))
        yield


@contextlib.contextmanager
def torch_stderr_quiet() -> Iterator[None]:
    """torch's stderr handlers write to the stream they were built with: point them at nothing, as pytest would."""
    with contextlib.ExitStack() as stack:
        for lg in _registered():
            for h in lg.handlers:
                if isinstance(h, logging.StreamHandler):
                    stack.enter_context(unittest.mock.patch.object(h, "stream", open(os.devnull, "w")))  # noqa: SIM115
        yield


@pytest.fixture
def logs() -> Iterator:
    """Instrument with a logger provider (as ``OTEL_LOGS_EXPORTER`` does) at a capture level: its exporter."""
    made = []

    def make(capture: str) -> _InMemory:
        exporter = _InMemory()
        lp = LoggerProvider()
        lp.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        tp = TracerProvider()
        torch_otel.instrument(tp, registry=CollectorRegistry(), capture=capture, logger_provider=lp)
        made.append((tp, lp))
        return exporter

    yield make
    torch_otel.uninstrument()
    for tp, lp in made:
        tp.shutdown()
        lp.shutdown()


def _bodies(exporter: _InMemory) -> list[str]:
    torch_otel.force_flush()
    out = []
    for item in exporter.get_finished_logs():
        rec = getattr(item, "log_record", item)
        out.append(str(rec.body))
    return out


def _dynamo_error_fn(a: torch.Tensor) -> torch.Tensor:
    out = a.mul(torch.ones(8, 8))
    return out.add(torch.ones(2, 2))  # a shape error: dynamo won't convert this frame


@pytest.mark.parametrize("level", LEVELS)
def test_the_bridge_adds_no_handler_to_torchs_loggers(logs, level):
    before = _handlers()
    factory = logging.getLogRecordFactory()
    exporter = logs(level)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))  # armed, and past a compile's re-attach
    assert _handlers() == before
    torch._logging.set_logs(dynamo=logging.INFO)  # torch builds its handlers anew
    try:
        rebuilt = _handlers()
        torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
        assert _handlers() == rebuilt
    finally:
        torch._logging.set_logs()
    with torch_stderr_quiet():
        logging.getLogger("torch._dynamo").warning("a warning torch logs outside any compile")
    assert "a warning torch logs outside any compile" in _bodies(exporter)
    torch_otel.uninstrument()
    assert logging.getLogRecordFactory() is factory  # put back as it was


def _log_as_test_custom_format_exc(dynamo_log: logging.Logger) -> None:
    """The three records torch's test_logging.py::test_custom_format_exc logs: an error, and two INFO ones."""
    try:
        raise RuntimeError("foo")
    except RuntimeError:
        dynamo_log.exception("test dynamo")
        dynamo_log.info("with exc", exc_info=True)
    dynamo_log.info("with stack", stack_info=True)


@pytest.mark.parametrize("level", LEVELS)
def test_torchs_handler_watcher_counts_each_warning_once(logs, level):
    """test_logging.py's test_custom_format_exc: three records on torch._dynamo, one of them an error."""
    exporter = logs(level)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    records: list[logging.LogRecord] = []
    dynamo_log = logging.getLogger("torch._dynamo")
    with torch_stderr_quiet(), handler_watcher(records):
        dynamo_log.setLevel(logging.INFO)
        try:
            _log_as_test_custom_format_exc(dynamo_log)
        finally:
            dynamo_log.setLevel(logging.NOTSET)
    assert [r.getMessage() for r in records] == ["test dynamo", "with exc", "with stack"]
    assert "test dynamo" in _bodies(exporter)  # the error still becomes a log record (INFO ones do not)
    assert "with exc" not in _bodies(exporter)


@pytest.mark.parametrize("level", LEVELS)
def test_a_frame_dynamo_wont_convert_is_one_record_for_torch_and_one_log_record(logs, level):
    """test_logging.py's test_dynamo_error (test_inductor_error is the same WARNING from a backend failure)."""
    exporter = logs(level)
    records: list[logging.LogRecord] = []
    with (
        unittest.mock.patch("torch._dynamo.config.suppress_errors", True),
        torch_stderr_quiet(),
        handler_watcher(records),
        contextlib.suppress(RuntimeError),  # run eagerly, the frame raises: as the user's code would
    ):
        torch.compile(_dynamo_error_fn, backend="eager")(torch.ones(8, 8))
    matching = [r for r in records if "WON'T CONVERT" in r.getMessage()]
    assert len(matching) == 1, matching  # torch's getRecord(): "multiple matching records" before the fix
    assert any("WON'T CONVERT" in b for b in _bodies(exporter))


def test_a_factory_installed_over_the_bridges_stays_and_passes_records_through(logs):
    exporter = logs("default")
    ours = logging.getLogRecordFactory()
    seen: list[str] = []

    def theirs(*args, **kwargs):  # type: ignore[no-untyped-def]
        rec = ours(*args, **kwargs)
        seen.append(rec.name)
        return rec

    logging.setLogRecordFactory(theirs)
    try:
        torch_otel.uninstrument()
        assert logging.getLogRecordFactory() is theirs  # someone else's: left in place
        with torch_stderr_quiet():
            logging.getLogger("torch._dynamo").warning("after uninstrument")
        assert "torch._dynamo" in seen
        assert "after uninstrument" not in _bodies(exporter)  # ours only passes records through now
    finally:
        logging.setLogRecordFactory(ours.previous)  # type: ignore[attr-defined]


def test_console_log_exporter_is_the_sdks_current_one():
    from torch_otel._otel.providers import build_logger_provider

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        provider = build_logger_provider({"OTEL_LOGS_EXPORTER": "console"})
    assert provider is not None
    provider.shutdown()


def test_torchs_own_logging_test_case_with_logs_exported(logs):
    """torch's real helper, where this environment can import it (it needs numpy and expecttest)."""
    pytest.importorskip("numpy")
    pytest.importorskip("expecttest")
    from torch.testing._internal.logging_utils import LoggingTestCase, make_logging_test

    class Watched(LoggingTestCase):
        @make_logging_test(dynamo=logging.INFO)
        def test_custom_format_exc(self, records):  # type: ignore[no-untyped-def]
            _log_as_test_custom_format_exc(logging.getLogger("torch._dynamo"))
            self.assertEqual(len(records), 3)

        @make_logging_test()
        def test_dynamo_error(self, records):  # type: ignore[no-untyped-def]
            with contextlib.suppress(RuntimeError):
                torch.compile(_dynamo_error_fn, backend="eager")(torch.ones(8, 8))
            self.getRecord(records, "WON'T CONVERT")

    logs("default")
    pytests = {lg: [h for h in lg.handlers if h not in _not_pytests(lg)] for lg in _registered()}
    for lg, hs in pytests.items():  # torch's helper would count pytest's capture handlers (as -p no:logging does)
        for h in hs:
            lg.removeHandler(h)
    try:
        result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(  # noqa: SIM115
            unittest.defaultTestLoader.loadTestsFromTestCase(Watched)
        )
    finally:
        for lg, hs in pytests.items():
            for h in hs:
                lg.addHandler(h)
    assert result.wasSuccessful(), [str(e[1]) for e in result.failures + result.errors]


@pytest.mark.skipif(not os.environ.get("TORCH_OTEL_PYTORCH_TESTS"), reason="TORCH_OTEL_PYTORCH_TESTS names no pytorch test dir")
def test_pytorchs_own_logging_tests_pass_identically_with_and_without_the_bridge():
    test_dir = Path(os.environ["TORCH_OTEL_PYTORCH_TESTS"])
    files = [test_dir / f for f in ("dynamo/test_logging.py", "dynamo/test_recompile_ux.py")]
    r = run_python(SUITE, args=[*map(str, files)], timeout=3600)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
