"""bench/fleet/metrics.py's server process: every simulated rank's /metrics on one 127.0.0.1 port, one path per rank.

    python -m bench.fleet.server WORLD --detail-ranks all|rank0 [--trace LOG]    # started by bench/fleet/metrics.py

One asyncio server serves every rank's exposition (``/rank/N``) from bytes built once by
:func:`fleet_ranks.rank_exposition`; only the fingerprint lines are rebuilt when they change.
``/control?step=S&odd=R`` moves every rank's fingerprints ``S`` compiles on (rank ``R`` also compiled
something the others did not); ``/stats`` tells what was served. Prints ``PORT n`` once every rank's bytes are built.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path

from bench.fleet.ranks import (  # noqa: E402
    ASPECT_LABEL,
    ASPECTS,
    FP,
    POLICIES,
    TRACE,
    base_fingerprints,
    fingerprints_at,
    fmt,
    rank_exposition,
)


class _Fleet:
    def __init__(self, world: int, policy: str, trace: Path) -> None:
        self.world = world
        self.base = base_fingerprints(trace)
        self.head: list[bytes] = []
        self.tail: list[bytes] = []
        self.fp_prefix: list[list[tuple[str, str]]] = []  # per rank: (aspect, line up to its value)
        self.series: list[int] = []
        for rank in range(world):
            text = rank_exposition(rank, world, policy, None, trace)
            lines = text.splitlines()
            idx = [i for i, line in enumerate(lines) if line.startswith(FP + "{")]
            assert idx == list(range(idx[0], idx[0] + len(ASPECTS))), "fingerprint lines must be consecutive"
            self.head.append(("\n".join(lines[: idx[0]]) + "\n").encode())
            self.tail.append(("\n".join(lines[idx[-1] + 1 :]) + "\n").encode())
            prefixes = []
            for i in idx:
                m = ASPECT_LABEL.search(lines[i])
                assert m is not None
                prefixes.append((m.group(1), lines[i].rsplit(" ", 1)[0]))
            self.fp_prefix.append(prefixes)
            self.series.append(sum(1 for line in lines if line and not line.startswith("#")))
        self.requests = 0
        self.bytes = 0
        self.set_state(0, -1)

    def set_state(self, step: int, odd: int) -> None:
        shared = fingerprints_at(self.base, step, False)
        odd_fp = fingerprints_at(self.base, step, True)
        fp = []
        for rank in range(self.world):
            values = odd_fp if rank == odd else shared
            fp.append("".join(f"{p} {fmt(values[a])}\n" for a, p in self.fp_prefix[rank]).encode())
        self.fp = fp  # one assignment: a scrape sees the old list or the new one
        self.step, self.odd = step, odd

    def body(self, rank: int) -> list[bytes]:
        return [self.head[rank], self.fp[rank], self.tail[rank]]


def _response(status: str, ctype: str, parts: list[bytes]) -> list[bytes]:
    n = sum(len(p) for p in parts)
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {n}\r\n\r\n".encode()
    return [head, *parts]


class _Http(asyncio.Protocol):
    fleet: _Fleet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            self.transport.writelines(self._handle(parts[1].decode() if len(parts) > 1 else "/"))  # type: ignore[attr-defined]

    def _handle(self, target: str) -> list[bytes]:
        f = self.fleet
        url = urllib.parse.urlsplit(target)
        if url.path.startswith("/rank/"):
            try:
                body = f.body(int(url.path[6:]))
            except (ValueError, IndexError):
                return _response("404 Not Found", "text/plain", [b"no such rank\n"])
            f.requests += 1
            f.bytes += sum(len(b) for b in body)
            return _response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
        if url.path == "/control":
            q = dict(urllib.parse.parse_qsl(url.query))
            f.set_state(int(q.get("step", f.step)), int(q.get("odd", f.odd)))
            return _response("200 OK", "application/json", [json.dumps({"at": time.time()}).encode()])
        if url.path == "/stats":
            t = os.times()
            stats = {
                "requests": f.requests,
                "bytes": f.bytes,
                "cpu_s": t.user + t.system,
                "series_total": sum(f.series),
                "series_rank0": f.series[0],
                "series_further": f.series[-1],
                "bytes_rank0": sum(len(b) for b in f.body(0)),
                "bytes_further": sum(len(b) for b in f.body(f.world - 1)),
            }
            return _response("200 OK", "application/json", [json.dumps(stats).encode()])
        return _response("404 Not Found", "text/plain", [b"not found\n"])


def serve(world: int, policy: str, trace: Path) -> None:
    """Run the fleet's server until killed; print ``PORT n`` once every rank's bytes are built."""
    _Http.fleet = _Fleet(world, policy, trace)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Http, "127.0.0.1", 0, backlog=4096)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


# --------------------------------------------------------------------------------------------------
# Processes, ports, HTTP
# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("world", type=int, help="the number of simulated ranks")
    p.add_argument("--detail-ranks", choices=POLICIES, default="all")
    p.add_argument("--trace", type=Path, default=TRACE, help="the real rank's TORCH_TRACE log every simulated rank serves")
    args = p.parse_args(argv)
    serve(args.world, args.detail_ranks, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
