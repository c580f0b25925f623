"""The process table with real processes: exits, stops, failed launches, fallbacks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from owner.procinfo import group_members, inspect, read_start_ticks, read_stat
from owner.procs import (
    ExitMode,
    ExitStatus,
    LaunchSpec,
    ProcessTable,
    Spawned,
    StopOutcome,
    StopPolicy,
)
from protocol.errors import LaunchFailed, NotFound

ENV = {"PATH": "/usr/bin:/bin"}
KILL_NOW = StopPolicy(signal=signal.SIGKILL, timeout=10, kill_after=10)
HANG_GUARD = 30.0  # only ever reached when something is broken; never a timing assert


def spec(*argv: str, **kw: Any) -> LaunchSpec:
    return LaunchSpec(argv=argv, env=kw.pop("env", ENV), **kw)


class Harness:
    """A table plus a record of exits (by pid); launches get the keys k0, k1, ...; cleans
    up every launch by key at the end."""

    def __init__(self, mode: ExitMode | None = None, notify: str | None = None) -> None:
        self.exits: dict[int, ExitStatus] = {}
        self.exit_events: dict[int, asyncio.Event] = {}
        self.table = ProcessTable(self._on_exit, mode=mode, notify_socket_path=notify)
        self.launched: list[tuple[str, Spawned]] = []
        self._keys: dict[int, str] = {}

    def _on_exit(self, key: str, pid: int, status: ExitStatus) -> None:
        assert pid not in self.exits, "on_exit reported twice"
        assert self._keys[pid] == key
        self.exits[pid] = status
        self.exit_events.setdefault(pid, asyncio.Event()).set()

    def launch(self, s: LaunchSpec, key: str | None = None) -> Spawned:
        key = key or f"k{len(self.launched)}"
        sp = self.table.launch(s, key)
        self.launched.append((key, sp))
        self._keys[sp.pid] = key
        return sp

    def key(self, sp: Spawned) -> str:
        return self._keys[sp.pid]

    async def exited(self, pid: int) -> ExitStatus:
        ev = self.exit_events.setdefault(pid, asyncio.Event())
        await asyncio.wait_for(ev.wait(), HANG_GUARD)
        return self.exits[pid]

    async def cleanup(self) -> None:
        for key, sp in self.launched:
            for fd in (sp.stdout_fd, sp.stderr_fd):
                _UNREAD.pop(fd, None)       # the number is reused by the next pipe
                with contextlib.suppress(OSError):
                    os.close(fd)
            await self.table.stop(key, KILL_NOW)
        self.table.close()


def run(body: Callable[[Harness], Awaitable[None]], mode: ExitMode | None = None,
        notify: str | None = None) -> None:
    async def main() -> None:
        h = Harness(mode, notify)
        try:
            await body(h)
        finally:
            await h.cleanup()

    asyncio.run(main())


_UNREAD: dict[int, bytes] = {}   # what a read brought beyond the line asked for, per fd


async def read_line(fd: int) -> str:
    """One line from a non-blocking pipe, without blocking the loop. A read that brings
    more than one line (the child wrote them before we looked) keeps the rest for the
    next call."""
    buf = _UNREAD.pop(fd, b"")
    loop = asyncio.get_running_loop()
    while b"\n" not in buf:
        ready = asyncio.Event()
        loop.add_reader(fd, ready.set)
        try:
            await asyncio.wait_for(ready.wait(), HANG_GUARD)
        finally:
            loop.remove_reader(fd)
        chunk = os.read(fd, 4096)
        if not chunk:
            raise EOFError(buf)
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    if rest:
        _UNREAD[fd] = rest
    return line.decode() + "\n"


def alive(pid: int) -> bool:
    st = read_stat(pid)
    return st is not None and st.state != "Z"


def test_kill_9_of_one_of_50_reports_exactly_that_pid() -> None:
    async def body(h: Harness) -> None:
        spawned = [h.launch(spec("sleep", "1000")) for _ in range(50)]
        assert all(sp.pgid == sp.pid and os.getpgid(sp.pid) == sp.pid for sp in spawned)
        assert all(os.getsid(sp.pid) == sp.pid for sp in spawned)
        victim = spawned[17]
        os.kill(victim.pid, signal.SIGKILL)
        assert await h.exited(victim.pid) == ExitStatus(None, signal.SIGKILL)
        assert list(h.exits) == [victim.pid]
        others = [sp for sp in spawned if sp is not victim]
        assert all(alive(sp.pid) and h.table.is_tracked(h.key(sp)) for sp in others)
        assert not h.table.is_tracked(h.key(victim))

    run(body)


def test_sigterm_ignoring_app_is_escalated_and_its_grandchild_dies_too() -> None:
    script = "trap '' TERM; sleep 1000 & echo $!; wait; wait"

    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", script))
        grandchild = int(await read_line(sp.stdout_fd))
        assert os.getpgid(grandchild) == sp.pgid
        result = await h.table.stop(h.key(sp), StopPolicy(timeout=0.3, kill_after=10))
        assert result.outcome is StopOutcome.STOPPED
        assert result.escalated
        assert result.exit == ExitStatus(None, signal.SIGKILL)
        assert group_members(sp.pgid) == []
        assert not alive(grandchild)

    run(body)


def test_polite_stop_is_not_escalated() -> None:
    async def body(h: Harness) -> None:
        sp = h.launch(spec("sleep", "1000"))
        result = await h.table.stop(h.key(sp), StopPolicy(timeout=HANG_GUARD))
        assert (result.outcome, result.escalated) == (StopOutcome.STOPPED, False)
        assert result.exit == ExitStatus(None, signal.SIGTERM)
        assert h.exits[sp.pid] == result.exit

    run(body)


def test_stop_of_an_already_exited_process() -> None:
    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", "exit 4"))
        assert await h.exited(sp.pid) == ExitStatus(4, None)
        result = await h.table.stop(h.key(sp), StopPolicy())
        assert (result.outcome, result.escalated) == (StopOutcome.ALREADY_EXITED, False)
        assert result.exit == ExitStatus(4, None)
        with pytest.raises(NotFound):
            h.table.signal(h.key(sp), signal.SIGTERM)

    run(body)


def test_stop_after_the_leader_exited_still_kills_the_group() -> None:
    script = "trap '' TERM; sleep 1000 & echo $!; exit 0"

    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", script))
        grandchild = int(await read_line(sp.stdout_fd))
        assert await h.exited(sp.pid) == ExitStatus(0, None)
        assert alive(grandchild)
        result = await h.table.stop(h.key(sp), StopPolicy(timeout=0.2, kill_after=10))
        assert (result.outcome, result.escalated) == (StopOutcome.STOPPED, True)
        assert not alive(grandchild)

    run(body)


def test_stop_and_signal_reach_a_grandchild_that_left_the_group_with_setsid() -> None:
    script = "setsid sh -c 'trap \"\" TERM; echo $$; exec sleep 1000' & exec sleep 1000"

    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", script))
        escapee = int(await read_line(sp.stdout_fd))
        assert os.getsid(escapee) == escapee != sp.pgid
        h.table.signal(h.key(sp), signal.SIGSTOP)
        assert await _stopped(escapee)
        result = await h.table.stop(h.key(sp), StopPolicy(timeout=0.3, kill_after=10))
        assert (result.outcome, result.escalated) == (StopOutcome.STOPPED, True)
        assert not alive(escapee)

    run(body)


async def _stopped(pid: int) -> bool:
    for _ in range(int(HANG_GUARD / 0.01)):
        st = read_stat(pid)
        if st is not None and st.state == "T":
            return True
        await asyncio.sleep(0.01)
    return False


def test_stop_of_unknown_key_is_not_found() -> None:
    async def body(h: Harness) -> None:
        with pytest.raises(NotFound):
            await h.table.stop("never-launched", StopPolicy())

    run(body)


def _fds() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
    return out


@pytest.mark.parametrize("argv,cwd,reason", [
    (("/nonexistent/prog",), None, "No such file"),
    (("no-such-program-xyz",), None, "No such file"),
    (("NOEXEC",), None, "Permission denied"),
    (("sleep", "1"), "/nonexistent-dir", "/nonexistent-dir"),
])
def test_failed_launch_raises_and_leaves_nothing(argv: tuple[str, ...], cwd: str | None,
                                                 reason: str, tmp_path: Path) -> None:
    if argv == ("NOEXEC",):
        script = tmp_path / "not-executable"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o644)
        argv = (str(script),)

    async def body(h: Harness) -> None:
        before = _fds()
        with pytest.raises(LaunchFailed, match=reason):
            h.launch(spec(*argv, cwd=cwd))
        assert _fds() == before
        assert h.table.pids() == []

    run(body)


def test_child_sees_only_its_environment_devnull_stdin_and_three_fds(tmp_path: Path) -> None:
    script = "echo \"$FOO|$NOTIFY_SOCKET|$(pwd)\"; ls /proc/self/fd | wc -l; cat; echo err >&2"

    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", script, env={**ENV, "FOO": "bar"}, cwd=str(tmp_path)))
        assert await read_line(sp.stdout_fd) == f"bar|/tmp/nowhere.sock|{tmp_path}\n"
        # ls's own fds: 0, 1, 2 and the directory it reads, nothing of ours.
        assert int(await read_line(sp.stdout_fd)) == 4
        assert await read_line(sp.stderr_fd) == "err\n"
        assert await h.exited(sp.pid) == ExitStatus(0, None)

    run(body, notify="/tmp/nowhere.sock")


def test_raise_nofile_limit_lifts_soft_to_hard() -> None:
    # A resource limit is process-wide: change it in a helper, not in the test runner.
    code = ("import resource; from owner.reaper import raise_nofile_limit; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1])); n = raise_nofile_limit(); "
            "print(n, *resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    new, soft, hard = map(int, out.stdout.split())
    assert new == soft and soft > 256
    assert soft == hard or hard == -1


def test_sigchld_fallback_detects_exits() -> None:
    async def body(h: Harness) -> None:
        assert h.table.mode is ExitMode.SIGCHLD
        quick = h.launch(spec("sh", "-c", "exit 3"))
        slow = h.launch(spec("sleep", "1000"))
        assert quick.pidfd is None
        assert await h.exited(quick.pid) == ExitStatus(3, None)
        h.table.signal(h.key(slow), signal.SIGKILL)
        assert await h.exited(slow.pid) == ExitStatus(None, signal.SIGKILL)
        result = await h.table.stop(h.key(slow), StopPolicy())
        assert result.outcome is StopOutcome.ALREADY_EXITED

    run(body, ExitMode.SIGCHLD)


def test_sigchld_fallback_stop_escalates() -> None:
    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"))
        await read_line(sp.stdout_fd)
        result = await h.table.stop(h.key(sp), StopPolicy(timeout=0.2, kill_after=10))
        assert (result.outcome, result.escalated) == (StopOutcome.STOPPED, True)

    run(body, ExitMode.SIGCHLD)


def test_signal_leader_only_uses_the_pidfd() -> None:
    async def body(h: Harness) -> None:
        sp = h.launch(spec("sh", "-c", "sleep 1000 & echo $!; wait"))
        grandchild = int(await read_line(sp.stdout_fd))
        h.table.signal(h.key(sp), signal.SIGKILL, group=False)
        assert await h.exited(sp.pid) == ExitStatus(None, signal.SIGKILL)
        assert alive(grandchild)  # the cleanup's group stop takes it

    run(body)


def test_inspect_checks_identity() -> None:
    async def body(h: Harness) -> None:
        sp = h.launch(spec("sleep", "1000"))
        assert read_start_ticks(sp.pid) == sp.start_ticks
        info = inspect(sp.pid, sp.start_ticks)
        assert info["rss_bytes"] > 0 and info["num_threads"] == 1 and info["children"] == 0
        assert {"cpu_percent", "cpu_user_s", "cpu_system_s"} <= set(info)
        with pytest.raises(NotFound):
            inspect(sp.pid, sp.start_ticks + 1)

    run(body)


_ORPHAN_HELPER = textwrap.dedent("""
    import asyncio, json, os, psutil
    from owner.procs import ProcessTable, LaunchSpec, become_subreaper
    from owner.procinfo import read_stat
    from owner.reaper import is_subreaper

    async def main():
        exits = {}
        done = asyncio.Event()
        def on_exit(key, pid, st):
            exits[pid] = st
            if len(exits) == 2:
                done.set()
        table = ProcessTable(on_exit, reap_orphans=True)
        env = {"PATH": "/usr/bin:/bin"}
        app = table.launch(LaunchSpec(("sh", "-c", "sleep 1 & echo $!; exit 0"), env), "app")
        tracked = table.launch(LaunchSpec(("sh", "-c", "sleep 0.3; exit 7"), env), "tracked")
        with os.fdopen(app.stdout_fd, "rb", closefd=True) as f:
            os.set_blocking(f.fileno(), True)
            orphan = int(f.readline())
        for fd in (app.stderr_fd, tracked.stdout_fd, tracked.stderr_fd):
            os.close(fd)
        parent_seen = None
        await asyncio.wait_for(done.wait(), 30)
        while read_stat(orphan) is not None:
            st = read_stat(orphan)
            if st is not None and st.state != "Z":
                parent_seen = st.ppid
            await asyncio.sleep(0.02)
        zombies = [c.pid for c in psutil.Process().children() if c.status() == "zombie"]
        table.close()
        print(json.dumps({"orphan_parent": parent_seen, "me": os.getpid(),
                          "reaped": table.orphans_reaped, "zombies": zombies,
                          "subreaper": is_subreaper(),
                          "exits": sorted([s.exit_code for s in exits.values()])}))

    become_subreaper()
    asyncio.run(main())
""")


def test_orphaned_grandchild_is_reaped_by_the_subreaper() -> None:
    # Becoming a subreaper is for life and process-wide: do it in a helper process.
    out = subprocess.run([sys.executable, "-c", _ORPHAN_HELPER], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).parents[3])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["subreaper"] is True
    assert report["orphan_parent"] == report["me"]  # re-parented to the subreaper
    assert report["reaped"] >= 1
    assert report["zombies"] == []
    assert report["exits"] == [0, 7]  # the tracked exit status was not stolen


def test_many_table_launches_share_no_pipe_between_apps() -> None:
    async def body(h: Harness) -> None:
        a = h.launch(spec("sh", "-c", "echo a"))
        b = h.launch(spec("sh", "-c", "echo b"))
        assert (await read_line(a.stdout_fd), await read_line(b.stdout_fd)) == ("a\n", "b\n")
        await h.exited(a.pid)
        await h.exited(b.pid)

    run(body)


def test_exited_launches_are_forgotten_beyond_the_memory_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from owner import procexits
    monkeypatch.setattr(procexits, "EXITED_MEMORY", 2)

    async def body(h: Harness) -> None:
        done = []
        for _ in range(4):   # one after the other: the exits are reaped in this order
            done.append(h.launch(spec("true")))
            await h.exited(done[-1].pid)
        keys = [h.key(sp) for sp in done]
        assert list(h.table._exited) == keys[2:]       # the oldest two are forgotten
        for key in keys[:2]:
            with pytest.raises(NotFound):              # the backend reads: already gone
                await h.table.stop(key, StopPolicy())
        result = await h.table.stop(keys[3], StopPolicy())
        assert result.outcome is StopOutcome.ALREADY_EXITED
        h.launched = [(k, sp) for k, sp in h.launched if k not in keys[:2]]
        for sp in done[:2]:
            os.close(sp.stdout_fd)
            os.close(sp.stderr_fd)

    run(body)
