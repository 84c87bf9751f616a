"""``TORCH_OTEL_*`` settings: parsed once, each bad value reported in one line, never raised."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import warn_once
from .paths import path_problem
from .ranks import DEFAULT_DETAIL_RANKS, RankSet, env_rank

CAPTURE_LEVELS = ("off", "default", "full")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the bridge reads from ``TORCH_OTEL_*``; see docs/configuration.md."""

    capture: str = "default"
    capture_payloads: bool = False
    attribute_max_length: int = 4096
    redact_paths: bool = False
    max_open_compiles: int = 256
    traces_file: str | None = None
    metrics: bool = True
    pushgateway_url: str | None = None
    pushgateway_job: str = "torch_compile"
    flush_on_sigterm: bool = True
    shutdown_timeout_ms: int = 5_000
    detail_ranks: RankSet = field(default_factory=RankSet)
    summary: tuple[str, ...] = ()  # where to write the run summary at exit: stderr, stdout, or files
    # the cache key index, the next run's baseline: "auto" (beside inductor's cache directory), "off", or a directory
    cache_index: str = "auto"
    cache_baseline: str | None = None  # a previous run's TORCH_TRACE log or directory, or a key index, to explain misses
    # count how often each compiled graph runs (TORCH_OTEL_GRAPH_CALLS; full capture counts them whatever this says):
    # on by default: counted in instructions, 0.03% of a small transformer's training step (docs/benchmarks.md)
    graph_calls: bool = True
    # the sinks installed as packages (entry points ``torch_otel.sinks``) to load: None every one, () none, or these
    sinks: tuple[str, ...] | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)


def _bool(env: Mapping[str, str], name: str, default: bool, problems: list[str]) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    problems.append(f"{name}={raw!r} is not a boolean; use true or false (using {str(default).lower()})")
    return default


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int, problems: list[str]) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        problems.append(f"{name}={raw!r} is not an integer; use a whole number from {lo} to {hi} (using {default})")
        return default
    if not lo <= v <= hi:
        problems.append(f"{name}={raw!r} is out of range; use a whole number from {lo} to {hi} (using {default})")
        return default
    return v


def _float(env: Mapping[str, str], name: str, default: float, lo: float, hi: float, problems: list[str]) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = float(raw.strip())
    except ValueError:
        v = float("nan")
    if not lo <= v <= hi:  # also NaN
        problems.append(f"{name}={raw!r} is not a number of seconds from {lo:g} to {hi:g} (using {default:g})")
        return default
    return v


def is_http_url(raw: str) -> bool:
    """An http(s) URL (``host:port`` means http) with a host and, if given, a port above 0."""
    return url_problem(raw) is None


def url_problem(raw: str) -> str | None:
    """Why ``raw`` is no http(s) URL (``host:port`` means http), in a few words; None if it is one."""
    try:
        parsed = urlsplit(raw if "://" in raw else f"http://{raw}")
    except ValueError:  # e.g. an unbalanced "[" (IPv6 brackets)
        return "is not a URL"
    if parsed.scheme not in ("http", "https"):
        return f"has the scheme {parsed.scheme}://, not http:// or https://" if parsed.scheme else "is not a URL"
    if not parsed.hostname:
        return "is not a URL (it names no host)"
    try:
        port = parsed.port
    except ValueError:  # not a number, or out of range
        digits = parsed.netloc.rpartition(":")[2]
        if digits.isdigit():
            return f"is a URL with a bad port ({digits} is not from 1 to 65535)"
        return "is not a URL (its port is not a number)"
    if port == 0:
        return "is a URL with a bad port (0 is not from 1 to 65535)"
    return None


def url_setting(env: Mapping[str, str], name: str, problems: list[str]) -> str | None:
    """An http(s) URL setting (``host:port`` means http), or None with its one line in ``problems``."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    why = url_problem(raw)
    if why is not None:
        problems.append(f"{name}={raw!r} {why}; use e.g. http://127.0.0.1:9091 (not pushing)")
        return None
    return raw if "://" in raw else f"http://{raw}"


def _ranks(env: Mapping[str, str], name: str, problems: list[str]) -> RankSet:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return RankSet()
    try:
        return RankSet(raw)
    except ValueError as exc:
        problems.append(
            f"{name}={raw!r}: {exc}; use all, none, or ranks such as 0 or 0,8 or 0-7 or %8 (using {DEFAULT_DETAIL_RANKS})"
        )
        return RankSet()


_NOWHERE = frozenset(("none", "off", "false", "0", "no"))


def _destinations(env: Mapping[str, str], name: str, problems: list[str]) -> tuple[str, ...]:
    """``stderr``, ``stdout`` or file paths, comma-separated; a path's ``{rank}`` and ``{pid}`` are filled in at exit.
    ``none`` (or ``off``, ``false``, ``0``, ``no``, as the bridge's other switches say it): nowhere (it turns off the
    summary a run with nothing configured prints), never a file of that name. A path this process could not
    write (its ``{rank}`` and ``{pid}`` filled in now) is a line now, as the settings load, and skipped: not a line at
    exit, after the training."""
    out = []
    for part in (env.get(name) or "").split(","):
        d = part.strip()
        if not d or d.lower() in _NOWHERE:
            continue
        if d.lower() in ("stderr", "stdout"):
            out.append(d.lower())
            continue
        try:
            d.format(rank=0, pid=0)
        except (KeyError, IndexError, ValueError):
            problems.append(
                f"{name}={part.strip()!r}: a path may hold only {{rank}} and {{pid}} placeholders; "
                "use e.g. stderr or summary-{rank}.html (skipped)"
            )
            continue
        path = d.format(rank=env_rank(env), pid=os.getpid())
        why = path_problem(path)
        if why is not None:
            problems.append(
                f"{name}: cannot write the run summary to {path} ({why}); set {name} to a writable path or to stderr (skipped)"
            )
            continue
        out.append(d)
    return tuple(out)


def capture_level(raw: str, name: str, problems: list[str]) -> str:
    """A capture level (``off``, ``default``, ``full``) as ``name`` gives it; a bad one is a line and ``default``."""
    level = raw.strip().lower() or "default"
    if level in CAPTURE_LEVELS:
        return level
    problems.append(f"{name}={raw!r} is not a capture level; use one of {', '.join(CAPTURE_LEVELS)} (using default)")
    return "default"


def _per_process_path(env: Mapping[str, str], name: str, problems: list[str]) -> str | None:
    """A file path in which ``{rank}`` and ``{pid}`` are this process's (torchrun's ranks each write their own); none
    for ``none``, ``off`` and the like (never a file of that name)."""
    raw = (env.get(name) or "").strip()
    if not raw or raw.lower() in _NOWHERE:
        return None
    try:
        return raw.format(rank=env_rank(env), pid=os.getpid())
    except (KeyError, IndexError, ValueError):
        problems.append(
            f"{name}={raw!r}: a path may hold only {{rank}} and {{pid}} placeholders; use e.g. spans-{{rank}}.jsonl "
            "(writing no spans file)"
        )
        return None


def entry_point_names(raw: str | None) -> tuple[str, ...] | None:
    """Which installed entry points to load (TORCH_OTEL_SINKS, TORCH_OTEL_FEATURES): unset or ``all``, every one (None);
    ``none``, none; else the names, comma-separated."""
    names = tuple(n.strip() for n in (raw or "").split(",") if n.strip())
    if not names or names == ("all",):
        return None
    return () if names in (("none",), ("off",)) else names


def load_settings(env: Mapping[str, str] | None = None, report: bool = True) -> Settings:
    """Read settings from ``env`` (default ``os.environ``); bad values fall back to defaults."""
    env = os.environ if env is None else env
    problems: list[str] = []
    capture = capture_level(env.get("TORCH_OTEL_CAPTURE", "default"), "TORCH_OTEL_CAPTURE", problems)
    s = Settings(
        capture=capture,
        capture_payloads=_bool(env, "TORCH_OTEL_CAPTURE_PAYLOADS", False, problems),
        attribute_max_length=_int(env, "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH", 4096, 64, 1_000_000, problems),
        redact_paths=_bool(env, "TORCH_OTEL_REDACT_PATHS", False, problems),
        max_open_compiles=_int(env, "TORCH_OTEL_MAX_OPEN_COMPILES", 256, 1, 100_000, problems),
        traces_file=_per_process_path(env, "TORCH_OTEL_TRACES_FILE", problems),
        metrics=_bool(env, "TORCH_OTEL_METRICS", True, problems),
        pushgateway_url=url_setting(env, "TORCH_OTEL_PUSHGATEWAY_URL", problems),
        flush_on_sigterm=_bool(env, "TORCH_OTEL_FLUSH_ON_SIGTERM", True, problems),
        shutdown_timeout_ms=int(_float(env, "TORCH_OTEL_SHUTDOWN_TIMEOUT", 5.0, 0.0, 3600.0, problems) * 1000),
        detail_ranks=_ranks(env, "TORCH_OTEL_DETAIL_RANKS", problems),
        summary=_destinations(env, "TORCH_OTEL_SUMMARY", problems),
        cache_index=(env.get("TORCH_OTEL_CACHE_INDEX") or "auto").strip() or "auto",
        cache_baseline=(env.get("TORCH_OTEL_CACHE_BASELINE") or "").strip() or None,
        graph_calls=_bool(env, "TORCH_OTEL_GRAPH_CALLS", True, problems),
        sinks=entry_point_names(env.get("TORCH_OTEL_SINKS")),
        pushgateway_job=(env.get("TORCH_OTEL_PUSHGATEWAY_JOB") or env.get("OTEL_SERVICE_NAME") or "torch_compile").strip(),
        problems=tuple(problems),
    )
    raw = env.get("OTEL_SDK_DISABLED")
    if raw is not None and raw.strip().lower() not in _TRUE | _FALSE:  # the SDK's own rule: anything else is false
        problems.append(f"OTEL_SDK_DISABLED={raw!r} is not a boolean; use true or false (using false: torch-otel is on)")
        s = dataclasses.replace(s, problems=tuple(problems))
    if report:
        for p in problems:
            warn_once(p, "%s", p)
    return s


# Variables the OpenTelemetry SDK reads itself while the bridge builds its providers. The SDK
# raises on some bad values (a negative limit) and silently ignores others; the bridge checks
# them first, reports each bad one in a line, and builds with the SDK's default instead.
_COUNT_LIMITS = (
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT",
)
_POSITIVE = (
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BLRP_MAX_QUEUE_SIZE",
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BLRP_SCHEDULE_DELAY",
    "OTEL_METRIC_EXPORT_INTERVAL",
)
_NON_NEGATIVE = ("OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BLRP_EXPORT_TIMEOUT", "OTEL_METRIC_EXPORT_TIMEOUT")
SDK_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_CHOICES = {
    "OTEL_TRACES_SAMPLER": SDK_SAMPLERS,
    "OTEL_METRICS_EXEMPLAR_FILTER": ("always_on", "always_off", "trace_based"),
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": ("cumulative", "delta", "lowmemory"),
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION": (
        "explicit_bucket_histogram",
        "base2_exponential_bucket_histogram",
    ),
}


def registered_samplers() -> set[str]:
    """Samplers installed under the SDK's ``opentelemetry_traces_sampler`` entry point (torch-otel's among them)."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group="opentelemetry_traces_sampler")}


SDK_QUEUE, SDK_BATCH = 2048, 512  # the SDK's batch processors' queue and export batch, where nothing sets them


def _whole(raw: str | None, lo: int) -> int | None:
    v = (raw or "").strip()
    return int(v) if v.isascii() and v.isdigit() and int(v) >= lo else None


def batch_sizes(env: Mapping[str, str], prefix: str) -> tuple[int, int]:
    """The queue and export batch a batch processor runs with (``prefix``: ``OTEL_BSP`` or ``OTEL_BLRP``): the
    settings where they are whole numbers >= 1, else the SDK's defaults; a batch larger than the queue is the queue's
    size (the SDK refuses to build such a processor: :func:`sdk_env_problems` says so in one line)."""
    queue = _whole(env.get(f"{prefix}_MAX_QUEUE_SIZE"), 1) or SDK_QUEUE
    return queue, min(_whole(env.get(f"{prefix}_MAX_EXPORT_BATCH_SIZE"), 1) or SDK_BATCH, queue)


def sdk_env_problems(env: Mapping[str, str]) -> dict[str, str]:
    """Bad values among the SDK's own variables: ``{name: one-line message}`` (a batch processor's queue and batch that
    do not fit together: under ``"OTEL_BSP batch"`` or ``"OTEL_BLRP batch"``)."""
    out: dict[str, str] = {}

    def whole(name: str, lo: int) -> int | None:
        raw = env.get(name)
        if raw is None or not raw.strip():
            return None
        v = _whole(raw, lo)
        if v is None:
            out[name] = f"{name}={raw!r} is not a whole number >= {lo}; fix or unset it (using the SDK's default)"
        return v

    for name in _COUNT_LIMITS + _NON_NEGATIVE:
        whole(name, 0)
    sizes = {name: whole(name, 1) for name in _POSITIVE}
    for prefix in ("OTEL_BSP", "OTEL_BLRP"):
        queue, batch = sizes[f"{prefix}_MAX_QUEUE_SIZE"], sizes[f"{prefix}_MAX_EXPORT_BATCH_SIZE"]
        # (keyed by the pair, not a variable: the bridge's processors run with batches of the queue's size, and neither
        # variable is hidden from the SDK, as a bad value is)
        if batch is not None and batch > (queue or SDK_QUEUE):
            name = f"{prefix}_MAX_EXPORT_BATCH_SIZE"
            out[f"{prefix} batch"] = (
                f"{name}={batch} is larger than the queue ({queue or SDK_QUEUE}); make it at most {prefix}_MAX_QUEUE_SIZE"
                f" (batches of {queue or SDK_QUEUE} meanwhile)"
            )
        elif batch is None and queue is not None and queue < SDK_BATCH:
            name = f"{prefix}_MAX_QUEUE_SIZE"
            out[f"{prefix} batch"] = (
                f"{name}={queue} is smaller than the export batch (the SDK's {SDK_BATCH}); set {prefix}_MAX_EXPORT_BATCH_SIZE"
                f" to at most {queue} (batches of {queue} meanwhile)"
            )
    for name, allowed in _CHOICES.items():
        raw = env.get(name)
        if raw is not None and raw.strip() and raw.strip().lower() not in allowed:
            if name == "OTEL_TRACES_SAMPLER" and raw.strip() in registered_samplers():
                continue
            extra = ", or a registered sampler such as torch_otel_rank" if name == "OTEL_TRACES_SAMPLER" else ""
            out[name] = f"{name}={raw!r} is not one of {', '.join(allowed)}{extra} (using the SDK's default)"
    entries = [p.strip() for p in (env.get("OTEL_RESOURCE_ATTRIBUTES") or "").split(",") if p.strip()]
    broken = [p for p in entries if "=" not in p or not p.partition("=")[0].strip()]
    if broken:
        out["OTEL_RESOURCE_ATTRIBUTES"] = (
            f"OTEL_RESOURCE_ATTRIBUTES has {len(broken)} entr{'y' if len(broken) == 1 else 'ies'} that "
            "are not key=value (skipped); use e.g. team=ml,deployment.environment=prod"
        )
    sampler = (env.get("OTEL_TRACES_SAMPLER") or "").strip().lower()
    arg = env.get("OTEL_TRACES_SAMPLER_ARG")
    if sampler.endswith("traceidratio") and arg is not None and arg.strip():
        try:
            ok = 0.0 <= float(arg) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            out["OTEL_TRACES_SAMPLER_ARG"] = f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a ratio from 0 to 1 (using 1.0)"
    return out


@contextlib.contextmanager
def bad_sdk_values_hidden(env: Mapping[str, str] | None = None) -> Iterator[None]:
    """Report each bad value of a variable the SDK reads, and hide it while the SDK is imported and built.

    The SDK reads these from ``os.environ`` when its modules are imported and
    as it constructs processors, readers and limits, and raises on some bad
    values: inside this block it sees its default instead. The user's
    environment is restored on leaving.
    """
    env = os.environ if env is None else env
    bad = sdk_env_problems(env)
    for message in bad.values():
        warn_once(message, "%s", message)
    # The resource's good pairs are kept: the SDK skips the bad ones (torch-otel quiets its messages).
    hidden = {
        name: os.environ.pop(name)
        for name in bad
        if env is os.environ and name in os.environ and name != "OTEL_RESOURCE_ATTRIBUTES"
    }
    try:
        yield
    finally:
        os.environ.update(hidden)
