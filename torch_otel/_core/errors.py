"""The bridge's own logger, its error accounting (caught, counted, logged once) and its re-entry guard.

Nothing in here may raise into torch: every hook is wrapped by :func:`guarded`.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections.abc import Callable
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


def by_own_level(lg: logging.Logger) -> Callable[[int], bool]:
    """An ``isEnabledFor`` for ``lg`` by its own level and ``disabled``, not ``logging.disable``'s."""

    def is_enabled_for(level: int) -> bool:
        return not lg.disabled and level >= lg.getEffectiveLevel()

    return is_enabled_for


# The bridge's lines say what it lost, or what to fix: they are not a library's chatter. They follow this logger's own
# level (set it to quiet them), not logging.disable(level), which applications call to quiet libraries' chatter.
logger.isEnabledFor = by_own_level(logger)  # type: ignore[method-assign,assignment]


def _voice() -> logging.Logger:
    """The bridge's logger, to say one line: ``logging.config.dictConfig`` disables every logger that exists when it runs
    (unless given ``disable_existing_loggers=False``), this one too, which would drop the lines that say what the
    bridge lost. The logger is enabled again to say them (its level quiets it)."""
    if logger.disabled:
        logger.disabled = False
    return logger


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
            _voice().warning(
                "internal error in %s (%s: %s); torch.compile is unaffected. "
                "Further errors of this kind are counted, not logged.",
                where,
                type(exc).__name__,
                exc,
            )
        except Exception:  # pragma: no cover - logging itself failed
            pass


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
        _voice().warning(message, *args)
    except Exception:  # pragma: no cover
        pass


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
