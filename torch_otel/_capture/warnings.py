"""torch's compile warnings, taken as torch creates their log records: no handler on torch's loggers.

The warnings are taken as torch creates their ``LogRecord`` (:class:`WarningRecordHook`, a link in
``logging``'s record factory), not by a handler on torch's loggers: torch's logging machinery and its
test helpers (``torch.testing._internal.logging_utils``, which counts a record once per handler it
passes through) see the handlers torch set up and no other, and what torch prints does not change.
The live capture turns each into a ``LogEvent``; the log-record sink (torch_otel._sinks.logs) sends them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any


class _RecordFactory:
    """The link in ``logging``'s record factory chain: builds the record with the previous factory, then looks."""

    __slots__ = ("previous", "active", "_on_record", "_level", "_names", "_prefixes")

    def __init__(self, previous: Callable[..., logging.LogRecord], hook: WarningRecordHook) -> None:
        self.previous = previous
        self.active = True
        self._on_record, self._level = hook._on_record, hook._level
        self._names, self._prefixes = frozenset(hook._loggers), tuple(n + "." for n in hook._loggers)

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if self.active:
            try:
                name = record.name
                if record.levelno >= self._level and (name in self._names or name.startswith(self._prefixes)):
                    self._on_record(record)
            except Exception:  # noqa: BLE001, S110 - a record of a shape we do not know: torch's logging goes on
                pass
        return record


class WarningRecordHook:
    """torch's compile warnings, taken as torch creates their log records: no handler on torch's loggers.

    A link in ``logging``'s record factory (``logging.setLogRecordFactory``) hands ``on_record`` each record
    of ``level`` or above whose logger is one of ``loggers`` or below one, and returns the record unchanged:
    the loggers keep exactly the handlers, levels and ``propagate`` torch gave them, so what torch prints,
    and what its test helpers count per handler, is as without the bridge. A record exists only once its
    logger is enabled for its level, so this sees what torch logs, whether or not a handler prints it.

    ``unhook()`` puts the previous factory back if ours is still the current one; if someone installed a
    factory over ours since, ours stays in their chain and only passes records through.
    """

    def __init__(
        self, on_record: Callable[[logging.LogRecord], None], loggers: Iterable[str], level: int = logging.WARNING
    ) -> None:
        self._on_record = on_record
        self._loggers = tuple(loggers)
        self._level = level
        self._factory: _RecordFactory | None = None  # ours, while hooked

    @property
    def hooked(self) -> bool:
        return self._factory is not None

    def hook(self) -> None:
        if self._factory is not None:
            return
        self._factory = _RecordFactory(logging.getLogRecordFactory(), self)
        logging.setLogRecordFactory(self._factory)

    def unhook(self) -> None:
        factory, self._factory = self._factory, None
        if factory is None:
            return
        factory.active = False
        if logging.getLogRecordFactory() is factory:
            logging.setLogRecordFactory(factory.previous)
