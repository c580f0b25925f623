"""The notify socket with Debian's real systemd-notify, run from inside apps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from owner.notify import NotifyListener, pgid_resolver
from owner.procs import ExitStatus, LaunchSpec, ProcessTable, Spawned, StopPolicy

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/systemd-notify"),
                                reason="needs Debian's /usr/bin/systemd-notify")

ENV = {"PATH": "/usr/bin:/bin"}
HANG_GUARD = 30.0  # reached only when broken; never a timing assert
Msg = tuple[str, int, dict[str, str]]


class Rig:
    def __init__(self, home: Path) -> None:
        self.path = str(home / "notify.sock")
        self.messages: asyncio.Queue[Msg] = asyncio.Queue()
        self.exited: dict[int, asyncio.Event] = {}
        self.table = ProcessTable(self._on_exit, notify_socket_path=self.path)
        self.keys: dict[int, str] = {}
        self.listener: NotifyListener[str] = NotifyListener(
            self.path, pgid_resolver(self.keys.get),
            lambda key, pid, fields, fds: self.messages.put_nowait((key, pid, fields)))
        self.launched: list[Spawned] = []

    def _on_exit(self, key: str, pid: int, status: ExitStatus) -> None:
        self.exited.setdefault(pid, asyncio.Event()).set()

    def launch(self, key: str, script: str) -> Spawned:
        sp = self.table.launch(LaunchSpec(("sh", "-c", script), ENV), key)
        self.keys[sp.pgid] = key
        self.launched.append(sp)
        return sp

    async def next_message(self) -> Msg:
        return await asyncio.wait_for(self.messages.get(), HANG_GUARD)

    async def until(self, cond: Callable[[], bool]) -> None:
        async def poll() -> None:
            while not cond():
                await asyncio.sleep(0.01)
        await asyncio.wait_for(poll(), HANG_GUARD)

    async def cleanup(self) -> None:
        for sp in self.launched:
            os.close(sp.stdout_fd)
            os.close(sp.stderr_fd)
            await self.table.stop(self.keys[sp.pgid], StopPolicy(signal=signal.SIGKILL))
        self.table.close()
        self.listener.close()


def run(home: Path, body: Callable[[Rig], Awaitable[None]]) -> None:
    async def main() -> None:
        rig = Rig(home)
        rig.listener.open()
        try:
            await body(rig)
        finally:
            await rig.cleanup()

    asyncio.run(main())


def test_systemd_notify_ready_from_a_child_shell_is_attributed_to_the_app(
        short_home: Path) -> None:
    # The app's shell runs systemd-notify as a child (not exec), as app scripts do.
    script = ("sh -c 'systemd-notify --ready; echo done'; "
              "systemd-notify --status='serving 3 clients'; exec sleep 1000")

    async def body(rig: Rig) -> None:
        rig.launch("other", "exec sleep 1000")  # a second launch must not get it
        app = rig.launch("app", script)
        mode = stat.S_IMODE(os.stat(rig.path).st_mode)
        assert mode == 0o600
        key, pid, fields = await rig.next_message()
        assert (key, fields) == ("app", {"READY": "1"})
        assert pid != app.pid   # a grandchild's shell: in the app's group while it lives
        with contextlib.suppress(ProcessLookupError):   # it exits right after `echo done`
            assert os.getpgid(pid) == app.pgid
        key, pid, fields = await rig.next_message()
        assert (key, pid, fields) == ("app", app.pid, {"STATUS": "serving 3 clients"})
        assert rig.listener.stats["unattributed"] == 0
        assert rig.listener.stats["barrier"] >= 1  # answered by closing its fd

    run(short_home, body)


def test_datagrams_from_unrelated_processes_are_dropped_and_counted(
        short_home: Path) -> None:
    async def body(rig: Rig) -> None:
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", "systemd-notify --no-block --ready; true",
            env={**ENV, "NOTIFY_SOCKET": rig.path})
        await proc.wait()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"READY=1", rig.path)  # from the owner's own pid
            s.sendto(b"STATUS=" + b"x" * 5000, rig.path)
            s.sendto(b"X_UNKNOWN=1", rig.path)
        stats = rig.listener.stats
        await rig.until(lambda: stats["received"] >= 4)
        assert stats["unattributed"] == 2
        assert stats["oversized"] == 1
        assert stats["ignored"] == 1
        assert stats["delivered"] == 0 and rig.messages.empty()

    run(short_home, body)


def test_leader_sending_itself_is_attributed(short_home: Path) -> None:
    code = ("import os, socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
            "s.sendto(b'READY=1\\nMAINPID=' + str(os.getpid()).encode(), "
            "os.environ['NOTIFY_SOCKET'])")

    async def body(rig: Rig) -> None:
        sp = rig.launch("py", f"exec python3 -c \"{code}\"")
        key, pid, fields = await rig.next_message()
        assert (key, pid, fields) == ("py", sp.pid, {"READY": "1", "MAINPID": str(sp.pid)})
        await asyncio.wait_for(rig.exited.setdefault(sp.pid, asyncio.Event()).wait(),
                               HANG_GUARD)

    run(short_home, body)


def test_a_live_socket_at_the_path_is_not_stolen(short_home: Path) -> None:
    from protocol.errors import AlreadyRunning

    async def body(rig: Rig) -> None:
        second: NotifyListener[str] = NotifyListener(rig.path, lambda pid: None,
                                                     lambda *a: None)
        with pytest.raises(AlreadyRunning):
            second.open()

    run(short_home, body)
