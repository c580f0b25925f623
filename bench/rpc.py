"""Ping round trips over the tenure protocol vs a raw length-prefixed msgpack echo.

Both servers are separate asyncio processes on AF_UNIX stream sockets in the same private
temporary directory; both clients are blocking sockets in this process. Prints p50/p99
and calls/s for each, then the ratio, and as its last line one JSON object.

    python bench/rpc.py [--calls 20000] [--warmup 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

from protocol import Client
from protocol.sockets import ensure_private_dir

RAW_SERVER = r"""
import asyncio, struct, sys, msgpack
H = struct.Struct(">I")
async def conn(r, w):
    try:
        while True:
            n = H.unpack(await r.readexactly(4))[0]
            req = msgpack.unpackb(await r.readexactly(n), raw=False)
            body = msgpack.packb({"t": "res", "id": req["id"], "ok": {}}, use_bin_type=True)
            w.write(H.pack(len(body)) + body)
    except asyncio.IncompleteReadError:
        w.close()
async def main():
    srv = await asyncio.start_unix_server(conn, sys.argv[1])
    print("READY", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def time_calls(fn, calls: int, warmup: int) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def raw_client(path: str):  # type: ignore[no-untyped-def]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    h = struct.Struct(">I")
    counter = iter(range(1, 1 << 62))

    def ping() -> None:
        body = msgpack.packb({"t": "req", "id": next(counter), "m": "ping", "p": {}},
                             use_bin_type=True)
        s.sendall(h.pack(len(body)) + body)
        n = h.unpack(s.recv(4, socket.MSG_WAITALL))[0]
        msgpack.unpackb(s.recv(n, socket.MSG_WAITALL), raw=False)
    return s, ping


def start(args: list[str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline().startswith("READY")
    return p


def stop(p: subprocess.Popen[str]) -> None:
    p.terminate()
    p.wait(10)
    if p.stdout:
        p.stdout.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tb", dir="/tmp"))
    procs: list[subprocess.Popen[str]] = []
    try:
        run = ensure_private_dir(home / "r", root=home)
        tsock, rsock = str(run / "t.sock"), str(run / "r.sock")
        # with latency histograms on, as the backend's API server keeps them
        procs.append(start([sys.executable, "-m", "protocol.testing", tsock, "--timings"]))
        procs.append(start([sys.executable, "-c", RAW_SERVER, rsock]))
        client = Client(tsock)
        client.connect()
        raw_sock, raw_ping = raw_client(rsock)
        # interleave rounds so drift in machine speed hits both sides alike
        tenure: list[float] = []
        raw: list[float] = []
        rounds = 10
        for _ in range(rounds):
            tenure += time_calls(lambda: client.call("ping"), a.calls // rounds,
                                 a.warmup // rounds)
            raw += time_calls(raw_ping, a.calls // rounds, a.warmup // rounds)
        client.close()
        raw_sock.close()
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(home, ignore_errors=True)
    res = {
        "p50_us": round(percentile(tenure, 0.5), 1),
        "p99_us": round(percentile(tenure, 0.99), 1),
        "raw_p50_us": round(percentile(raw, 0.5), 1),
        "raw_p99_us": round(percentile(raw, 0.99), 1),
        "calls_per_s": round(len(tenure) / (sum(tenure) / 1e6)),
        "raw_calls_per_s": round(len(raw) / (sum(raw) / 1e6)),
    }
    res["ratio_p50"] = round(res["p50_us"] / res["raw_p50_us"], 2)
    print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    print(f"tenure protocol: p50 {res['p50_us']} us  p99 {res['p99_us']} us  "
          f"{res['calls_per_s']} calls/s")
    print(f"raw msgpack echo: p50 {res['raw_p50_us']} us  p99 {res['raw_p99_us']} us  "
          f"{res['raw_calls_per_s']} calls/s")
    print(f"ratio p50 tenure/raw: {res['ratio_p50']} (target <= 1.5; p50 target <= 120 us)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
