"""Large synthetic TORCH_TRACE logs, made from a real one: its records repeated with fresh compile ids.

``python -m tests.synthetic REAL.log OUT.log SIZE_MB``. Each copy of the real
log shifts every frame id (in the metadata and in the chromium payloads) past
the previous copy's, so the result reads like one long run with many frames.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

_FRAME = re.compile(rb'"frame_id": (\d+)')
_CID = re.compile(rb'"compile_id": "(!\d+/)?(\d+)/')
_HASH = re.compile(rb'"has_payload": "[0-9a-f]+"')


def _records(lines: list[bytes]) -> list[tuple[bytes, list[bytes]]]:
    """(metadata line, payload lines) per record, as tlparse groups them."""
    out: list[tuple[bytes, list[bytes]]] = []
    for line in lines:
        if line.startswith(b"\t") and out:
            out[-1][1].append(line)
        else:
            out.append((line, []))
    return out


def _copy(records: list[tuple[bytes, list[bytes]]], off: int) -> bytes:
    def frame(m: re.Match[bytes]) -> bytes:
        return b'"frame_id": %d' % (int(m.group(1)) + off)

    def cid(m: re.Match[bytes]) -> bytes:
        return b'"compile_id": "%s%d/' % (m.group(1) or b"", int(m.group(2)) + off)

    parts = []
    for md, payload in records:
        md = _FRAME.sub(frame, md)
        if payload:
            new = [_CID.sub(cid, p) for p in payload]
            if new != payload:  # keep has_payload torch's md5 of the payload, as tlparse checks it
                digest = hashlib.md5(b"\n".join(p[1:].rstrip(b"\n") for p in new)).hexdigest().encode()  # noqa: S324
                md = _HASH.sub(b'"has_payload": "' + digest + b'"', md)
            payload = new
        parts.append(md)
        parts.extend(payload)
    return b"".join(parts)


def make_log(real: Path, out: Path, size_bytes: int) -> int:
    """Write at least ``size_bytes`` to ``out``; returns the number of copies of ``real``."""
    lines = real.read_bytes().splitlines(keepends=True)
    frames = [int(m) for line in lines for m in _FRAME.findall(line)]
    stride = (max(frames) + 1) if frames else 1
    records = _records(lines)
    written = copies = 0
    with out.open("wb") as fh:
        while written < size_bytes:
            chunk = _copy(records, copies * stride)
            fh.write(chunk)
            written += len(chunk)
            copies += 1
    return copies


if __name__ == "__main__":
    n = make_log(Path(sys.argv[1]), Path(sys.argv[2]), int(float(sys.argv[3]) * 1e6))
    print(f"{sys.argv[2]}: {n} copies of {sys.argv[1]}")
