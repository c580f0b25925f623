"""A server out of file descriptors says so a bounded number of times, spends no CPU
waiting, and serves the connections that queued meanwhile once descriptors are free
again. A real RpcServer in a process of its own whose descriptors the test exhausts."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from protocol import Client
from protocol.framing import encode_frame
from protocol.sockets import ensure_private_dir
from protocol.testing import next_frame

HELLO = encode_frame({"t": "hello", "proto": 1, "role": "viewer"})

# Serves ping on argv[1], logs to argv[2]. On "hoard" it opens /dev/null until EMFILE
# (under a low limit, so it is quick), on "free" it closes them again; EOF ends it.
CHILD = r"""
import asyncio, logging, os, resource, sys
from protocol.identity import new_identity
from protocol.server import RpcServer

logging.basicConfig(filename=sys.argv[2], level=logging.DEBUG)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

async def main():
    server = RpcServer(sys.argv[1], new_identity(), {}, {})
    await server.start()
    hoard, done = [], asyncio.Event()

    def command():
        line = sys.stdin.readline().strip()
        if line == "hoard":
            for _ in range(1000):
                try:
                    hoard.append(os.open("/dev/null", os.O_RDONLY))
                except OSError:
                    break
        elif line == "free":
            while hoard:
                os.close(hoard.pop())
        else:
            done.set()
            return
        print(line.upper(), flush=True)

    asyncio.get_running_loop().add_reader(0, command)
    print("READY", flush=True)
    await done.wait()
    await server.close()

asyncio.run(main())
"""


class Child:
    def __init__(self, home: Path) -> None:
        self.path = str(ensure_private_dir(home / "run", root=home) / "s.sock")
        self.log = home / "server.log"
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, self.path, str(self.log)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.said() == "READY"

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def tell(self, what: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        assert self.said() == what.upper()

    def cpu(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return float(t.user + t.system)

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


@pytest.fixture
def child(short_home: Path) -> Iterator[Child]:
    c = Child(short_home)
    yield c
    c.stop()



def test_a_server_out_of_fds_logs_a_line_not_a_flood_and_recovers(child: Child):
    child.tell("hoard")   # first: a connection the server closes later frees an fd
    waiting = []
    try:
        for _ in range(3):   # queued by the kernel; the server cannot accept them
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            waiting.append(s)
            s.settimeout(10)
            s.connect(child.path)
            s.sendall(HELLO)
        cpu = child.cpu()
        time.sleep(2.5)
        busy = child.cpu() - cpu
        text = child.log.read_text()
        # the reported repro: 106,591 tracebacks in 30 s, ~3 MB/s
        assert text.count("Traceback") == 0, text[:2000]
        assert sum("accept" in line for line in text.splitlines()) == 1, text[:2000]
        assert busy < 0.5
        child.tell("free")
        assert [next_frame(s)["t"] for s in waiting] == ["welcome"] * 3
    finally:
        for s in waiting:
            s.close()
    with Client(child.path, role="viewer") as c:
        assert c.call("ping") == {}
    text = child.log.read_text()
    assert sum("accept" in line for line in text.splitlines()) <= 2
