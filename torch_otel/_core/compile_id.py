"""Compile ids in the form tlparse prints them: ``0/1``, ``!0/0/1``, ``!0/-/-``, ``0/1_1``."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

_ID_RE = re.compile(r"^\[?(?:!(\d+)(?:/|$))?(?:(\d+)/(\d+)|-/-)?(?:_(\d+))?\]?$")


class CompileId(NamedTuple):
    """A compile's id. A tuple: the assembler keys its compiles by ``(id, kind)``, each event looks one up, and a
    tuple's hash and equality are the interpreter's own, where a dataclass's are Python functions."""

    frame_id: int | None = None
    frame_compile_id: int | None = None
    compiled_autograd_id: int | None = None

    def __str__(self) -> str:
        text = _texts.get(self)
        if text is None:
            ca = f"!{self.compiled_autograd_id}" if self.compiled_autograd_id is not None else ""
            if self.frame_id is None or self.frame_compile_id is None:
                text = f"{ca}/-/-" if ca else "-/-"
            else:
                text = f"{ca}/{self.frame_id}/{self.frame_compile_id}" if ca else f"{self.frame_id}/{self.frame_compile_id}"
            if len(_texts) >= 4096:
                _texts.clear()
            _texts[self] = text
        return text

    def with_attempt(self, attempt: int) -> str:
        """The tlparse directory key: ``0/0`` for attempt 0, ``0/0_1`` for attempt 1."""
        return str(self) if not attempt else f"{self}_{attempt}"

    @property
    def is_known(self) -> bool:
        return self.frame_id is not None or self.compiled_autograd_id is not None


UNKNOWN = CompileId()


# Each id's text, made once (a compile's id is written into many of its spans, series and lines); and each text's id,
# parsed once (every phase event of a compile carries the same text): both bounded, started again when full
_texts: dict[CompileId, str] = {}
_parsed: dict[str, CompileId | None] = {}


def parse_compile_id(text: object) -> CompileId | None:
    """Parse torch's ``str(CompileId)``; ``None`` for anything else (``'None'``, garbage)."""
    try:
        return _parsed[text]  # type: ignore[index]
    except (KeyError, TypeError):  # not parsed yet, or not a text (unhashable)
        pass
    if not isinstance(text, str) or not text or text == "None":
        return None
    cid = _parse(text)
    if len(_parsed) >= 4096:
        _parsed.clear()
    _parsed[text] = cid
    return cid


def _parse(text: str) -> CompileId | None:
    """A text's id, parsed (once per text: ``parse_compile_id`` keeps it)."""
    m = _ID_RE.match(text.strip())
    if not m or (m.group(1) is None and m.group(2) is None):
        return None
    ca, fid, fcid, _attempt = m.groups()
    return CompileId(
        int(fid) if fid is not None else None,
        int(fcid) if fcid is not None else None,
        int(ca) if ca is not None else None,
    )


def _id(v: object) -> int | None:
    """A record's id field: a non-negative int (``True`` is not one), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True is not 1
def _from_parts(fid: object, fcid: object, ca: object, attempt: object) -> tuple[CompileId | None, int]:
    frame, frame_compile, autograd = _id(fid), _id(fcid), _id(ca)
    if frame is None and autograd is None:
        return None, 0
    if frame is None or frame_compile is None:
        frame = frame_compile = None
    return CompileId(frame, frame_compile, autograd), _id(attempt) or 0


def compile_id_from_metadata(md: dict[str, object]) -> tuple[CompileId | None, int]:
    """Compile id and attempt from a TORCH_TRACE record's metadata keys (each distinct set parsed once)."""
    parts = (md.get("frame_id"), md.get("frame_compile_id"), md.get("compiled_autograd_id"), md.get("attempt"))
    try:
        return _from_parts(*parts)
    except TypeError:  # an unhashable value, in a malformed record
        return _from_parts.__wrapped__(*parts)


def current_compile_id() -> CompileId | None:
    """The compile torch is in now (its ``CompileContext``), or None outside one. Imports torch: for hooks only."""
    import torch._guards

    try:
        return parse_compile_id(str(torch._guards.CompileContext.current_compile_id()))
    except Exception:  # noqa: BLE001
        return None


def current_trace() -> tuple[CompileId | None, int]:
    """The compile torch is in now and its attempt (its ``CompileContext``'s trace id); ``(None, 0)`` outside one."""
    import torch._guards

    try:
        trace = torch._guards.CompileContext.current_trace_id()
        if trace is None:
            return None, 0
        attempt = getattr(trace, "attempt", 0)
        return parse_compile_id(str(trace.compile_id)), attempt if isinstance(attempt, int) else 0
    except Exception:  # noqa: BLE001
        return None, 0
