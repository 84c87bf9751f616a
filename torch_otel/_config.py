"""``TORCH_OTEL_*`` settings: parsed once, each bad value reported in one line, never raised."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ._internal import warn_once

CAPTURE_LEVELS = ("off", "default", "full")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the bridge reads from ``TORCH_OTEL_*``; see the README's table."""

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


def _url(env: Mapping[str, str], name: str, problems: list[str]) -> str | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    parsed = urlsplit(raw if "://" in raw else f"http://{raw}")
    try:
        port_ok = parsed.port is None or 0 < parsed.port
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
        problems.append(f"{name}={raw!r} is not an http(s) URL; use e.g. http://127.0.0.1:9091 (not pushing)")
        return None
    return raw if "://" in raw else f"http://{raw}"


def load_settings(env: Mapping[str, str] | None = None, report: bool = True) -> Settings:
    """Read settings from ``env`` (default ``os.environ``); bad values fall back to defaults."""
    env = os.environ if env is None else env
    problems: list[str] = []
    capture = env.get("TORCH_OTEL_CAPTURE", "default").strip().lower() or "default"
    if capture not in CAPTURE_LEVELS:
        problems.append(
            f"TORCH_OTEL_CAPTURE={env.get('TORCH_OTEL_CAPTURE')!r} is not a capture level; "
            f"use one of {', '.join(CAPTURE_LEVELS)} (using default)"
        )
        capture = "default"
    s = Settings(
        capture=capture,
        capture_payloads=_bool(env, "TORCH_OTEL_CAPTURE_PAYLOADS", False, problems),
        attribute_max_length=_int(env, "TORCH_OTEL_ATTRIBUTE_MAX_LENGTH", 4096, 64, 1_000_000, problems),
        redact_paths=_bool(env, "TORCH_OTEL_REDACT_PATHS", False, problems),
        max_open_compiles=_int(env, "TORCH_OTEL_MAX_OPEN_COMPILES", 256, 1, 100_000, problems),
        traces_file=(env.get("TORCH_OTEL_TRACES_FILE") or None),
        metrics=_bool(env, "TORCH_OTEL_METRICS", True, problems),
        pushgateway_url=_url(env, "TORCH_OTEL_PUSHGATEWAY_URL", problems),
        flush_on_sigterm=_bool(env, "TORCH_OTEL_FLUSH_ON_SIGTERM", True, problems),
        shutdown_timeout_ms=int(_float(env, "TORCH_OTEL_SHUTDOWN_TIMEOUT", 5.0, 0.0, 3600.0, problems) * 1000),
        pushgateway_job=(env.get("TORCH_OTEL_PUSHGATEWAY_JOB") or env.get("OTEL_SERVICE_NAME") or "torch_compile").strip(),
        problems=tuple(problems),
    )
    if report:
        for p in problems:
            warn_once(p, "%s", p)
    return s
