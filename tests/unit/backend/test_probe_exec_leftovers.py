"""An exec probe is judged by its command's own exit, and leaves nothing running.

Was: a command that left a process in the background (``sh -c "sleep 60 & exit 0"``)
failed with "no exit within Ns" although it had exited 0 at once (the wait lasted until
the background child closed the output pipe it inherited), and that child was never
killed: each attempt left an orphaned ``sleep`` behind. Real ``sh`` and ``sleep``.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psutil
import pytest

from backend.model import Health, HealthKind, Readiness, ReadyKind
from backend.probes import Probe, ProbeRunner, Verdict, exec_ok, health_probe, readiness_probe
from backend.testing import run_bounded

HANG_GUARD = 30.0  # reached only when broken; never a timing assert
QUICK = 5.0        # an answer at the command's exit comes in far less than this
ENV = {"PATH": "/usr/bin:/bin"}
T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    return run_bounded(coro_fn, HANG_GUARD)  # type: ignore[no-any-return]


def _sleeps(arg: str) -> list[psutil.Process]:
    """Live (not zombie) ``sleep ARG`` processes: ARG is unique to one test."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["cmdline"] == ["sleep", arg] and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


@contextmanager
def background_sleep() -> Iterator[str]:
    """A unique ``sleep`` argument for a probe's background child. Afterwards the test
    checks none is left; whatever is (the probe failed to kill it), is killed here."""
    arg = f"61{secrets.randbelow(100):02d}.{os.getpid()}{secrets.randbelow(10**6):06d}"
    fds = len(os.listdir("/proc/self/fd"))
    try:
        yield arg
    finally:
        for p in _sleeps(arg):  # only when the probe failed to: by pid, ours alone
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert psutil.Process().children(recursive=True) == []
    assert len(os.listdir("/proc/self/fd")) == fds, "the probe leaked a file descriptor"


def assert_gone(arg: str) -> None:
    """No ``sleep ARG`` is alive; SIGKILL was sent, but its delivery is asynchronous."""
    deadline = time.monotonic() + HANG_GUARD
    while _sleeps(arg) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _sleeps(arg) == []


def _timed(probe: Probe) -> tuple[Verdict | bool, float]:
    async def go() -> tuple[Verdict | bool, float]:
        t0 = time.monotonic()
        said = await probe()
        return said, time.monotonic() - t0
    return run(go)


def test_a_command_that_leaves_a_child_passes_at_its_exit_and_the_child_is_killed() -> None:
    with background_sleep() as arg:
        said, took = _timed(lambda: exec_ok(("sh", "-c", f"sleep {arg} & exit 0"), 20.0, ENV))
        assert said == Verdict(True, "exit 0")
        assert took < QUICK
        assert_gone(arg)


def test_its_failure_and_first_line_are_known_at_its_exit_and_the_child_is_killed() -> None:
    with background_sleep() as arg:
        script = f"sleep {arg} & echo db not up; exit 3"
        said, took = _timed(lambda: exec_ok(("sh", "-c", script), 20.0, ENV))
        assert said == Verdict(False, "exit 3: db not up")
        assert took < QUICK
        assert_gone(arg)


@pytest.mark.parametrize("check", ["ready", "health"])
def test_readiness_and_health_exec_checks_pass_and_leave_nothing(check: str) -> None:
    with background_sleep() as arg:
        command = ("sh", "-c", f"sleep {arg} & exit 0")
        if check == "ready":
            ready = Readiness(kind=ReadyKind.EXEC, command=command, timeout=8.0)
            probe = readiness_probe(ready, 0, set, env=ENV)
            assert probe is not None
            seen: list[Verdict] = []
            runner = ProbeRunner(probe, interval=ready.interval, timeout=ready.timeout,
                                 on_attempt=seen.append)
            t0 = time.monotonic()
            assert run(runner.run)
            assert seen == [Verdict(True, "exit 0")] and time.monotonic() - t0 < QUICK
        else:
            health = Health(kind=HealthKind.EXEC, command=command, interval=1.0,
                            timeout=3.0, failures=2)
            said, took = _timed(health_probe(health, 0, set, env=ENV))
            assert said == Verdict(True, "exit 0") and took < QUICK
        assert_gone(arg)



def test_what_a_probe_left_after_setsid_is_stopped_by_a_subreaper_backend() -> None:
    """`setsid sleep N &` left the probe's group and outlived its shell: each run of a
    health check added one, for good (they went to init). In a child that became a
    subreaper, as the backend does at its start, none is left."""
    import multiprocessing

    tag = str(100_000 + secrets.randbelow(899_999))

    def child() -> None:
        import asyncio

        from backend.probe_exec import adopt_strays, run_check
        assert adopt_strays()

        async def main() -> None:
            for _ in range(3):
                code, _line = await run_check(["sh", "-c", f"setsid sleep {tag} & exit 0"],
                                              QUICK, env=ENV)
                assert code == 0
        asyncio.run(main())
        os._exit(0 if not _sleeps(tag) else 3)

    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=child)
    proc.start()
    proc.join(HANG_GUARD)
    try:
        assert proc.exitcode == 0, f"sleeps left: {_sleeps(tag)}"
    finally:
        for p in _sleeps(tag):
            p.kill()


def test_a_process_that_is_not_the_backend_keeps_its_other_children() -> None:
    """The sweep after a probe takes every child of a subreaper backend that is not a
    probe's for a stray; elsewhere (a test's process, running probes in process) a
    child of its own is no stray and must live on."""
    import asyncio
    import subprocess

    from backend.probe_exec import run_check
    mine = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL)
    try:
        code, _ = asyncio.run(run_check(["true"], QUICK, env=ENV))
        assert code == 0
        assert mine.poll() is None, "a child of the test process was killed"
    finally:
        mine.kill()
        mine.wait()
