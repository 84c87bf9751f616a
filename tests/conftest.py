from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

# The environment the suite was started with, before the lines below change it: the user's, which the README's command
# ran collector-config/build.sh with (the ``started_with`` fixture).
STARTED_WITH = dict(os.environ)
# collector-config/build.sh keeps what it builds under $XDG_CACHE_HOME/torch-otel (~/.cache without it), where the
# README's command built the collector and Jaeger: pinned there before XDG_CACHE_HOME moves below, so that the suite
# finds them rather than building them again (minutes: issue 49).
os.environ.setdefault(
    "TORCH_OTEL_BUILD_CACHE", os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch-otel")
)
# One warm inductor cache for the whole run (inductor tests are few and share it).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "torch-otel-tests-inductor-cache"))
# Without precompiled headers: torch writes them to /tmp/torchinductor_$USER whatever TORCHINDUCTOR_CACHE_DIR says, about
# 150 MB each, a new one for each checkout's venv (their hash holds its include paths), and never removes them; fresh
# clones of this suite left 16 GB there in a day and a half. A cold kernel build takes about as long without them.
os.environ.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")
# The bridge keeps a copy of each cache directory's key index under $XDG_CACHE_HOME: the tests' own, not the user's,
# and a new one for each run of the suite (its xdist workers share the run's). A test's cache directory is a path under
# pytest's numbered temporary folders, and the same path comes back in a later run (a fixed --basetemp, a machine whose
# /tmp was restored): a copy kept by an earlier run would explain the new run's cold misses as "not in this cache".
if "PYTEST_TORCH_OTEL_XDG_CACHE_HOME" not in os.environ:
    os.environ["PYTEST_TORCH_OTEL_XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="torch-otel-tests-xdg-cache-")
    atexit.register(shutil.rmtree, os.environ["PYTEST_TORCH_OTEL_XDG_CACHE_HOME"], ignore_errors=True)
os.environ["XDG_CACHE_HOME"] = os.environ["PYTEST_TORCH_OTEL_XDG_CACHE_HOME"]

# torch's CPU kernels on one thread in every test process: two xdist workers on two cores, each starting processes
# whose kernels would each spread over both cores, wait on one another's threads (the suite's own time, not the
# bridge's). The bridge's behaviour does not depend on it; a test that sets it sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test process's own start-up is not recorded: the tests that instrument in-process count compile traces, and the
# start-up of pytest's worker (its first step is whichever test's) is nobody's. The start-up's tests run real processes
# (tests/test_startup.py), whose environment (tests/helpers.py's clean_env) does not carry this.
os.environ["TORCH_OTEL_STARTUP"] = "off"

# torch is imported by the fixtures that need it, never here: the fast tier (tests/fast) runs without torch installed
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

import torch_otel  # noqa: E402
from torch_otel._core import errors as _internal  # noqa: E402


def _torch_logger_names() -> list[str]:
    names = ["torch", "torch.__trace", "torch._utils_internal"]
    names += [n for n in logging.root.manager.loggerDict if n.startswith("torch")]
    return names


@pytest.fixture(autouse=True)
def restore_torch_logging() -> Iterator[None]:
    """Every test leaves torch's loggers (handlers, levels, propagate) and dynamo as it found them (the fast tier,
    which has no torch, overrides this in tests/fast/conftest.py)."""
    import torch

    saved = {}
    for name in _torch_logger_names():
        lg = logging.getLogger(name)
        saved[name] = (list(lg.handlers), lg.level, lg.propagate)
    cfg = (torch._dynamo.config.automatic_dynamic_shapes, torch._dynamo.config.recompile_limit)
    torch._dynamo.reset()
    yield
    torch_otel.uninstrument()
    torch._dynamo.reset()
    torch._dynamo.config.automatic_dynamic_shapes, torch._dynamo.config.recompile_limit = cfg
    for name, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
    _internal.reset_for_tests()


@pytest.fixture
def started_with() -> dict[str, str]:
    """A copy of the environment the suite was started with (the user's shell's), before conftest changed it."""
    return dict(STARTED_WITH)


@dataclass
class Capture:
    exporter: InMemorySpanExporter
    provider: TracerProvider
    registry: CollectorRegistry

    def spans(self) -> list[ReadableSpan]:
        torch_otel.force_flush()  # compiles become spans off the compile's path: have them built now
        return list(self.exporter.get_finished_spans())

    def roots(self, kind: str | None = "frame") -> list[ReadableSpan]:
        out = [s for s in self.spans() if s.attributes and "torch.compile.kind" in s.attributes]
        if kind is not None:
            out = [s for s in out if s.attributes["torch.compile.kind"] == kind]
        return sorted(out, key=lambda s: s.start_time)

    def root(self, compile_id: str, kind: str = "frame") -> ReadableSpan:
        matches = [s for s in self.roots(kind) if s.attributes["torch.compile.id"] == compile_id]
        assert len(matches) == 1, f"{compile_id}: {[s.attributes['torch.compile.id'] for s in self.roots(kind)]}"
        return matches[0]

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == span.context.span_id]

    def sample(self, name: str, **labels: str) -> float | None:
        torch_otel.force_flush()
        return self.registry.get_sample_value(name, labels)


@pytest.fixture
def make_capture() -> Iterator:
    made: list[TracerProvider] = []

    def make(capture: str = "default", **settings: object) -> Capture:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        registry = CollectorRegistry()
        s = torch_otel.Settings(**settings) if settings else None  # type: ignore[arg-type]
        torch_otel.instrument(provider, registry=registry, capture=capture, settings=s)
        made.append(provider)
        return Capture(exporter, provider, registry)

    yield make
    torch_otel.uninstrument()
    for p in made:
        p.shutdown()


@pytest.fixture
def cap(make_capture) -> Capture:  # type: ignore[no-untyped-def]
    return make_capture()


# The files that take minutes, by their test time in seconds in a run of the suite (--durations=0, 2026-11-30), each
# test's setup and call summed. xdist's ``--dist loadfile`` hands the files out most tests first, so these, whose time
# goes to a few fixtures, came last, and one worker ran the last of them alone (76 s of the 21:23 run). Handed out
# slowest first, the two workers finish together. Only the order changes: each file still runs whole on one worker.
SLOW_FILES = {
    "tests/test_caches.py": 283,
    "tests/test_startup.py": 177,
    "tests/test_real_models.py": 171,
    "tests/test_faults.py": 152,
    "tests/test_activation.py": 138,
    "tests/test_instructions.py": 130,
    "tests/test_divergence.py": 127,
    "tests/test_docs_commands.py": 100,
    "tests/test_agreement.py": 91,
    "tests/test_compile_paths.py": 81,
    "tests/test_coexistence.py": 76,
    "tests/test_collector_pipeline.py": 74,
    "tests/test_graph_calls.py": 72,
    "tests/test_endpoints.py": 59,
    "tests/test_diff.py": 57,
    "tests/test_lazy_arming.py": 57,
    "tests/test_vm_pipeline.py": 55,
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` with the slow files first (:data:`SLOW_FILES`); any other mode, xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadFileScheduling

    class SlowFirst(OrderedDict):  # type: ignore[type-arg]
        """xdist's queue of files: each file as it is put in goes before the faster ones (xdist puts them in by number
        of tests, and takes them from the front)."""

        def __setitem__(self, scope: str, tests: object) -> None:
            super().__setitem__(scope, tests)
            for other in sorted(self, key=lambda s: -SLOW_FILES.get(s.replace(os.sep, "/"), 0)):
                self.move_to_end(other)

    scheduler = LoadFileScheduling(config, log)  # type: ignore[arg-type]
    scheduler.workqueue = SlowFirst()
    return scheduler
