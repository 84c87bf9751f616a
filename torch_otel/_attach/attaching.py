"""Attaching a table of rows (torch_otel._attach.points) and taking it off: every row the capture wants, the lazy
ones once their module is imported; what this torch lacks said once, in one line. Never raises."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import record_error, warn_once
from .._core.import_watch import forget, when_imported
from .points import AttachTarget, Source
from .releases import in_releases as _in_releases

__all__ = ["Attached", "attach_all", "detach_all", "lacking_line", "reattach", "report_lacking_row"]


@dataclass
class Attached:
    """What a capture attached: the rows in place, the rows waiting for their module, the rows this torch lacks."""

    rows: list[Source[Any]] = field(default_factory=list)
    waiting: list[tuple[Source[Any], Callable[[], None]]] = field(default_factory=list)
    lacking: list[Source[Any]] = field(default_factory=list)


def lacking_line(version: str, rows: Iterable[Source[Any]]) -> str:
    gives = "; ".join(f"{s.gives} ({s.name})" for s in rows)
    return f"torch {version} lacks what torch-otel attaches to for: {gives}. The rest is captured"


def attach_all(cap: AttachTarget, version: str, sources: Iterable[Source[Any]]) -> Attached:
    """Attach every row the capture wants; the lazy ones once their module is imported. Never raises."""
    out = Attached()
    lacking: list[Source[Any]] = []
    for src in sources:
        if not src.wanted(cap) or (src.variant and not _in_releases(version, src.releases)):
            continue
        if src.lazy:
            callback = _later(cap, src, version, out)
            out.waiting.append((src, callback))
            when_imported(src.module, callback)  # at once if torch has imported it already
        else:
            attached = _attach_one(cap, src)
            if attached:
                out.rows.append(src)
            elif attached is False:
                lacking.append(src)
    if lacking:
        out.lacking.extend(lacking)
        warn_once("sources-lacking", "%s", lacking_line(version, lacking))
    return out


def _attach_one(cap: AttachTarget, src: Source[Any]) -> bool | None:
    """True: attached; False: this torch lacks the row's attach point; None: attaching failed (counted and logged
    once as the bridge's own error: torch is not blamed for it)."""
    try:
        return src.attach(cap)
    except Exception as exc:  # noqa: BLE001 - never into the user's program
        record_error(f"attaching {src.name}", exc)
        return None


def _later(cap: AttachTarget, src: Source[Any], version: str, out: Attached) -> Callable[[], None]:
    def attach() -> None:
        with cap.attach_lock:  # two threads importing the module at once attach once
            if not cap.installed or src in out.rows or src in out.lacking:
                return
            attached = _attach_one(cap, src)
            if attached:
                out.rows.append(src)
            elif attached is False:
                out.lacking.append(src)
                report_lacking_row(src)

    return attach


def detach_all(cap: AttachTarget, attached: Attached) -> None:
    for src, callback in attached.waiting:
        forget(src.module, callback)
    for src in reversed(attached.rows):
        try:
            src.detach(cap)
        except Exception as exc:  # noqa: BLE001
            record_error(f"detaching {src.name}", exc)
    attached.rows.clear()
    attached.waiting.clear()


def reattach(cap: AttachTarget, attached: Attached) -> None:
    """Attach the logger rows again (torch's ``set_logs()`` clears handlers and resets levels)."""
    for src in attached.rows:
        if src.reattach:
            src.attach(cap)


def report_lacking_row(row: Source[Any]) -> None:
    """A row whose attach point turned out missing once its module was imported (lazy rows, and the export and
    mega-cache hooks, which find torch's names only then): its one line, once per row."""
    version = str(getattr(sys.modules.get("torch"), "__version__", "?"))
    warn_once(f"source-lacking:{row.name}", "%s", lacking_line(version, [row]))
