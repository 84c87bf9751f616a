"""The bridge's own logger, error accounting and re-entry guard.

Nothing in here may raise into torch: every hook is wrapped by :func:`guarded`.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from typing import ParamSpec

logger = logging.getLogger("torch_otel")
# Our own messages go to stderr through our own handler, never through the
# user's or torch's logging tree.
logger.propagate = False
if not logger.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("torch-otel: %(levelname)s: %(message)s"))
    logger.addHandler(_h)
    logger.setLevel(logging.WARNING)

_in_bridge: contextvars.ContextVar[bool] = contextvars.ContextVar("torch_otel_in_bridge", default=False)

_lock = threading.Lock()
_errors: dict[str, int] = {}
_warned: set[str] = set()

P = ParamSpec("P")


def internal_error_count() -> int:
    """How many exceptions the bridge caught inside its own hooks."""
    with _lock:
        return sum(_errors.values())


def internal_errors() -> dict[str, int]:
    with _lock:
        return dict(_errors)


def record_error(where: str, exc: BaseException) -> None:
    """Count an internal error; log the first one of each kind, once."""
    key = f"{where}:{type(exc).__name__}"
    with _lock:
        _errors[key] = _errors.get(key, 0) + 1
        first = _errors[key] == 1
    if first:
        try:
            logger.warning(
                "internal error in %s (%s: %s); torch.compile is unaffected. "
                "Further errors of this kind are counted, not logged.",
                where,
                type(exc).__name__,
                exc,
            )
        except Exception:  # pragma: no cover - logging itself failed
            pass


_not_sampled: dict[str, int] = {}


def count_not_sampled(kind: str) -> None:
    """A compile the trace sampler dropped (no span was built for it)."""
    with _lock:
        _not_sampled[kind] = _not_sampled.get(kind, 0) + 1


def not_sampled() -> dict[str, int]:
    with _lock:
        return dict(_not_sampled)


def warned(key: str) -> bool:
    """Whether :func:`warn_once` has printed the line of ``key``."""
    with _lock:
        return key in _warned


def warn_once(key: str, message: str, *args: object) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    try:
        logger.warning(message, *args)
    except Exception:  # pragma: no cover
        pass


# The live assembler's counts (its ``stats``), for the health series served at scrape time; None when not instrumented.
_live_stats: Mapping[str, int] | None = None


def set_live_stats(stats: Mapping[str, int] | None) -> None:
    global _live_stats
    _live_stats = stats


def live_stat(key: str) -> int:
    """One of the live assembler's counts (0 when the bridge is not instrumented)."""
    stats = _live_stats
    return int(stats.get(key, 0)) if stats is not None else 0


def reset_for_tests() -> None:
    with _lock:
        _errors.clear()
        _warned.clear()


def guarded(where: str) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """Run the wrapped hook at most once per call chain and never let it raise (errors are counted)."""

    def deco(fn: Callable[P, None]) -> Callable[P, None]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
            if _in_bridge.get():
                return
            token = _in_bridge.set(True)
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the point of this wrapper
                record_error(where, exc)
            finally:
                _in_bridge.reset(token)

        return wrapper

    return deco
