"""Regression: in cgroup mode, what outlived an app's leader was dropped. A cgroup
launch has no tracked descendants, and only those counted: a forking daemon's child
still in the app's cgroup was not in the exit event (the backend never stopped it, a
restart ran beside it), the owner's shutdown left its key out, and `stop_budget` (what
`tenure down` waits for) ignored it.

This machine has no cgroup2 mount to delegate: the tree is plain files, and a "kernel"
task keeps ``cgroup.procs`` as the kernel would (only processes that run; the file gone
with the last, so the directory can be removed). The app writes its daemon's pid into
``cgroup.procs`` itself: what the kernel shows for a forked child, once the leader is
gone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from owner.cgroups import CgroupTree
from owner.journal import Journal
from owner.observations import ObservationRing
from owner.procs import ExitStatus, LaunchSpec, ProcessTable, StopOutcome, StopPolicy
from owner.store import OwnerStore
from owner.supervise import Launcher
from protocol.procfs import kill_verified, read_stat

# The leader forks a daemon and exits; the daemon stays in the app's cgroup.
DAEMONIZES = 'sleep 1000 >/dev/null 2>&1 & echo $! > "$CG/cgroup.procs"; exit 0'
POLICY = StopPolicy(signal=signal.SIGTERM, timeout=1.0, kill_after=1.0)


def _alive(pid: int) -> bool:
    st = read_stat(pid)
    return st is not None and not st.zombie


def _spec(cg: Path) -> LaunchSpec:
    return LaunchSpec(argv=("sh", "-c", DAEMONIZES),
                      env={"PATH": "/usr/bin:/bin", "CG": os.fspath(cg)}, stop=POLICY)


def _fake_tree(tmp: Path) -> CgroupTree:
    (tmp / "apps").mkdir()
    return CgroupTree(own=tmp, controllers=(), has_kill=False)


async def _kernel(apps: Path) -> None:
    """Keep every app's ``cgroup.procs`` to the processes that still run, removing the
    file with the last of them (so an empty cgroup's directory can be removed). Started
    once the leader exited: the app's own write is done by then."""
    while True:
        for procs in apps.glob("*/cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids = [int(w) for w in procs.read_text().split()]
                left = [p for p in pids if _alive(p)]
                if not left:
                    procs.unlink()
                elif left != pids:
                    procs.write_text("".join(f"{p}\n" for p in left))
        await asyncio.sleep(0.01)


class _Daemon:
    """The daemon the app left, once read from its cgroup; the kernel started then.
    ``end()`` kills it (if it is still the process read) and stops the kernel."""

    def __init__(self) -> None:
        self.pid, self.ticks = 0, -1
        self._kernel: asyncio.Task[None] | None = None

    def found(self, cg: Path) -> int:
        self.pid = int((cg / "cgroup.procs").read_text())
        st = read_stat(self.pid)
        assert st is not None and not st.zombie, "the daemon is not running"
        self.ticks = st.start_ticks
        self._kernel = asyncio.get_running_loop().create_task(_kernel(cg.parent))
        return self.pid

    def end(self) -> None:
        if self._kernel is not None:
            self._kernel.cancel()
        if self.pid:
            kill_verified(self.pid, self.ticks, signal.SIGKILL)


def test_a_daemon_left_in_the_cgroup_lingers_until_it_is_gone(tmp_path: Path) -> None:
    async def main() -> None:
        at_exit: list[int] = []
        t = ProcessTable(lambda k, p, s: at_exit.append(t.left_behind(k)))
        t.cgroups = _fake_tree(tmp_path)
        cg = t.cgroups.app_dir("k1")
        sp = t.launch(_spec(cg), "k1")
        daemon = _Daemon()
        try:
            assert await t.wait("k1") == ExitStatus(0, None)
            daemon.found(cg)
            assert at_exit == [1]               # what the exit event names
            t.track()
            assert (t.left_behind("k1"), t.lingering(), t.policies()) == (1, ["k1"], {"k1": 2.0})
            assert kill_verified(daemon.pid, daemon.ticks, signal.SIGKILL)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while t.lingering():
                assert loop.time() < deadline, "the empty cgroup still lingers"
                await asyncio.sleep(0.02)
                t.track()
            assert (t.left_behind("k1"), t.policies()) == (0, {})
            assert not cg.exists()              # removed once empty
        finally:
            daemon.end()
            t.close()
            os.close(sp.stdout_fd)
            os.close(sp.stderr_fd)
    asyncio.run(main())


async def _exit_event(ring: ObservationRing) -> dict[str, Any]:
    """The first exit event (it follows the launch's write, which may come after the
    leader's reap)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        found = [e for e in ring.read(0, 100)["events"] if e["kind"] == "exit"]
        if found:
            return found[0]
        assert loop.time() < deadline, "no exit event"
        await asyncio.sleep(0.01)


def test_the_exit_names_the_daemon_and_the_shutdown_stops_it(tmp_path: Path) -> None:
    store = OwnerStore(str(tmp_path / "owner.db"))
    journal = Journal(tmp_path / "journal.db")
    (tmp_path / "cg").mkdir()

    async def main() -> None:
        launcher = Launcher(store, journal, ObservationRing(), "boot",
                            str(tmp_path / "n.sock"), reap_orphans=False,
                            home=str(tmp_path))
        launcher.use_cgroups(_fake_tree(tmp_path / "cg"))
        assert launcher.cgroups is not None
        cg = launcher.cgroups.app_dir("k1")
        daemon = _Daemon()
        try:
            await launcher.launch({"launch_key": "k1", "stack": "s", "app": "a",
                                   "instance": 0, "generation": 1}, _spec(cg), 1)
            exit_ = await _exit_event(launcher.ring)
            daemon.found(cg)
            assert exit_.get("descendants") == 1, exit_
            assert launcher.stop_budget() == 2.0   # `tenure down` waits for it
            results = await launcher.stop_all()
            assert [(k, getattr(r, "outcome", r)) for k, r in results] == \
                [("k1", StopOutcome.STOPPED)]
            assert not _alive(daemon.pid)
            assert launcher.procs.lingering() == [] and not cg.exists()
        finally:
            daemon.end()
            launcher.close()
    try:
        asyncio.run(main())
    finally:
        journal.close()
        store.close()
