"""FDSTORE=1 over a real notify socket: a message whose descriptors did not all arrive
keeps none of them (owner.notify, owner.fdstore)."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import sys
from pathlib import Path

import pytest

from owner import notify
from owner.fdstore import FdStore
from owner.notify import NotifyListener

HANG_GUARD = 30.0  # reached only when broken; never a timing assert

# A sender outside the owner (its own pid is never attributed): one message per
# (FDNAME, fds attached), each fd a fresh /dev/null; the last one is over MAX_DATAGRAM.
SENDER = r"""
import array, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for name, n in (("big", 7), ("small", 2), ("big2", 7), ("huge", 1)):
    fds = array.array("i", [os.open("/dev/null", os.O_RDONLY) for _ in range(n)])
    text = f"FDSTORE=1\nFDNAME={name}\n" + ("STATUS=" + "x" * 5000 if name == "huge" else "")
    s.sendmsg([text.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, sys.argv[1])
"""


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_message_with_descriptors_cut_short_stores_none_of_them(
        short_home: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Regression: 7 fds sent, room for 2 (MSG_CTRUNC): the store kept those 2 as the
    entry, refused 0 and the message counted as delivered."""
    monkeypatch.setattr(notify, "_ANCILLARY",
                        socket.CMSG_SPACE(12) + socket.CMSG_SPACE(2 * 4))
    path = str(short_home / "notify.sock")
    store = FdStore()

    def on_message(key: str, pid: int, fields: dict[str, str], fds: list[int]) -> None:
        store.add(("s", "a", 0), fields.get("FDNAME", "stored"), fds, 16)

    async def main() -> tuple[int, int, int]:
        listener: NotifyListener[str] = NotifyListener(path, lambda pid: "app", on_message,
                                                       store.count_refused)
        listener.open()
        try:
            before = _fd_count()
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, path)
            assert await asyncio.wait_for(proc.wait(), HANG_GUARD) == 0
            async with asyncio.timeout(HANG_GUARD):
                while listener.stats["received"] < 4:
                    await asyncio.sleep(0.01)
            stats = listener.stats
            assert (stats["truncated"], stats["delivered"], stats["oversized"]) == (2, 1, 1)
            return before, _fd_count(), stats["fds_closed"]
        finally:
            listener.close()

    with caplog.at_level(logging.WARNING, logger="owner.notify"):
        before, after, closed = asyncio.run(main())
    stored = [[f["name"] for f in e["fds"]] for e in store.to_wire()]
    store.close_all()
    assert stored == [["small", "small"]]
    assert store.stats["refused"] == 4 and store.stats["stored"] == 2   # 2 arrived of each 7
    assert after == before + 2 and closed == 2 + 2 + 1   # only the stored two stay open
    warned = [r for r in caplog.records if "did not all arrive" in r.getMessage()]
    assert len(warned) == 1, "a flood of them is told once per TRUNCATED_LOG_EVERY"


# Sends one FDSTORE=1 message with 3 fds once told to (a line on stdin).
SEND_ON_CUE = r"""
import array, os, socket, sys
sys.stdin.readline()
fds = array.array("i", [os.open("/dev/null", os.O_RDONLY) for _ in range(3)])
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg(
    [b"FDSTORE=1\nFDNAME=kept"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, sys.argv[1])
"""


def test_an_owner_out_of_descriptors_stores_nothing_and_counts_the_message(
        short_home: Path) -> None:
    """The kernel itself cuts the descriptors short (EMFILE on receipt: none arrive):
    the fields alone must not be delivered as if the fds were stored."""
    path = str(short_home / "notify.sock")
    store = FdStore()
    got: list[dict[str, str]] = []

    def on_message(key: str, pid: int, fields: dict[str, str], fds: list[int]) -> None:
        got.append(fields)
        store.add(("s", "a", 0), fields.get("FDNAME", "stored"), fds, 16)

    async def main() -> dict[str, int]:
        listener: NotifyListener[str] = NotifyListener(path, lambda pid: "app", on_message,
                                                       store.count_refused)
        listener.open()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SEND_ON_CUE, path, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        os.close(lowest)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))   # every open: EMFILE
        try:
            proc.stdin.write(b"go\n")
            async with asyncio.timeout(HANG_GUARD):
                while listener.stats["received"] < 1:
                    await asyncio.sleep(0.01)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), HANG_GUARD) == 0
        listener.close()
        return dict(listener.stats)

    stats = asyncio.run(main())
    assert got == [] and store.to_wire() == []
    assert (stats["truncated"], stats["delivered"]) == (1, 0)
