"""A small real RPC server for tests and benchmarks: ``python -m protocol.testing SOCKET``.

It serves ``echo`` (returns its params), ``sleep`` (answers after ``seconds``),
``subscribe`` (joins the ``ticks`` stream), ``emit`` (pushes ``count`` events) and
``fail`` (raises a real failure of ``kind``: ``disk-full``, ``no-space`` or ``bug``),
``blob`` (answers ``size`` bytes, a method with large answers, as ``logs.read`` is) and
``made`` (how many ``blob`` answers it has begun to make), prints
``READY <instance>`` on stdout once it listens, and exits cleanly on SIGTERM or SIGINT.
Capabilities come from ``--cap name=version`` arguments; ``--max-connections
role=N``, ``--max-pending N``, ``--frame-timeout S`` and ``--idle-after S`` set the server's limits.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from typing import Any

from .framing import FrameDecoder
from .identity import new_identity
from .schema import Field, Schema, check_int
from .server import Call, Method, RpcServer

__all__ = ["main", "next_frame", "serve"]


async def _echo(call: Call) -> Any:
    return call.params


async def _sleep(call: Call) -> Any:
    await asyncio.sleep(call.params["seconds"])
    return {"slept": call.params["seconds"]}


async def _fail(call: Call) -> Any:
    kind = call.params["kind"]
    if kind == "disk-full":   # SQLite's own SQLITE_FULL, from a database capped at 2 pages
        import sqlite3
        db = sqlite3.connect(":memory:")
        try:
            db.execute("PRAGMA max_page_count = 2")
            db.execute("CREATE TABLE t (x BLOB)")
            db.execute("INSERT INTO t VALUES (zeroblob(100000))")
        finally:
            db.close()
    if kind == "no-space":
        import errno
        raise OSError(errno.ENOSPC, "No space left on device")
    raise ValueError("a defect")


async def _subscribe(call: Call) -> Any:
    call.conn.subscribe("ticks")
    return {}


def _methods(server_ref: list[RpcServer]) -> dict[str, Method]:
    made = [0]

    async def blob(call: Call) -> Any:
        made[0] += 1
        await asyncio.sleep(0)   # as a read off the loop would
        return {"x": b"y" * call.params["size"]}

    async def count(call: Call) -> Any:
        return {"made": made[0]}

    async def emit(call: Call) -> Any:
        n = call.params["count"]
        for i in range(n):
            server_ref[0].publish("ticks", i + 1, {"n": i + 1})
        return {"sent": n}

    return {
        "echo": Method(_echo, role="viewer"),
        "sleep": Method(_sleep, Schema(Field("seconds", float, check=check_int(0, 3600)))),
        "subscribe": Method(_subscribe, role="viewer"),
        "emit": Method(emit, Schema(Field("count", int, check=check_int(0, 1_000_000)))),
        "fail": Method(_fail, Schema(Field("kind", str))),
        "blob": Method(blob, Schema(Field("size", int, check=check_int(0, 3 << 20))),
                       large=True),
        "made": Method(count, role="viewer"),
    }


async def serve(path: str, caps: dict[str, int], **limits: Any) -> None:
    """Run until SIGTERM/SIGINT; then drain admitted requests and close. ``limits`` are
    passed to :class:`RpcServer`."""
    ref: list[RpcServer] = []
    server = RpcServer(path, new_identity(), caps, _methods(ref), **limits)
    ref.append(server)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server.identity.instance}", flush=True)
    await stop.wait()
    server.begin_drain()
    await server.wait_idle()
    await server.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m protocol.testing")
    ap.add_argument("socket")
    ap.add_argument("--cap", action="append", default=[], help="name=version")
    ap.add_argument("--max-connections", action="append", default=[], help="role=N")
    ap.add_argument("--max-pending", type=int)
    ap.add_argument("--frame-timeout", type=float)
    ap.add_argument("--idle-after", type=float)
    ap.add_argument("--timings", action="store_true",
                    help="keep per-method latency histograms, as the backend's API does")
    args = ap.parse_args(argv)
    caps = {k: int(v) for k, v in (c.split("=", 1) for c in args.cap)}
    limits: dict[str, Any] = {}
    if args.max_connections:
        limits["max_connections"] = {k: int(v) for k, v in
                                     (c.split("=", 1) for c in args.max_connections)}
    if args.max_pending is not None:
        limits["max_pending"] = args.max_pending
    if args.frame_timeout is not None:
        limits["frame_timeout"] = args.frame_timeout
    if args.idle_after is not None:
        limits["idle_after"] = args.idle_after
    if args.timings:
        from .timing import Timings
        limits["timings"] = Timings()
    asyncio.run(serve(args.socket, caps, **limits))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def next_frame(s: socket.socket, dec: FrameDecoder | None = None) -> dict[str, Any]:
    """The next frame a raw client socket ``s`` receives (``dec``: the connection's
    decoder, when frames may come several to a read). Raises AssertionError when the
    server closes first."""
    dec = dec or FrameDecoder()
    while True:
        data = s.recv(65536)
        assert data, "closed without an answer"
        frames = dec.feed(data)
        if frames:
            return frames[0]
