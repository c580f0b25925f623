"""A flood of signals while the loop is busy fills asyncio's wakeup socket. CPython's C
handler then, by default, queues a report of each failed write (`Exception ignored when
trying to write to the signal wakeup fd: BlockingIOError`) through the interpreter's
pending-calls lock, taken inside the signal handler: an owner stopping 5,000 apps hung
on it, every thread waiting on a futex. protocol.sighandler's handlers skip a full
socket silently, and the handler still runs."""

from __future__ import annotations

import subprocess
import sys

FLOOD = """
import asyncio, os, signal, sys
sys.path.insert(0, {root!r})
from protocol.sighandler import add_signal_handler

async def main():
    loop = asyncio.get_running_loop()
    seen = asyncio.Event()
    if {ours}:
        add_signal_handler(loop, signal.SIGUSR1, seen.set)
    else:
        loop.add_signal_handler(signal.SIGUSR1, seen.set)
    import socket
    loop._csock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)   # fills sooner
    for _ in range(20_000):           # the loop does not run meanwhile: the socket fills
        os.kill(os.getpid(), signal.SIGUSR1)
    await asyncio.wait_for(seen.wait(), 30)
    print("handled")

asyncio.run(main())
"""


def _flood(ours: bool) -> subprocess.CompletedProcess[str]:
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    return subprocess.run([sys.executable, "-c", FLOOD.format(root=root, ours=ours)],
                          capture_output=True, text=True, timeout=120)


def test_a_full_wakeup_socket_is_skipped_silently_and_the_handler_runs() -> None:
    done = _flood(ours=True)
    assert done.returncode == 0 and done.stdout.strip() == "handled", done.stderr[-2000:]
    assert "wakeup fd" not in done.stderr, done.stderr[-2000:]


def test_asyncio_alone_reports_each_full_write() -> None:
    """The control: the same flood through asyncio's own add_signal_handler takes the
    reporting path (the one that can deadlock)."""
    done = _flood(ours=False)
    assert "Exception ignored when trying to write to the signal wakeup fd" in done.stderr
