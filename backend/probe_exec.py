"""The command of an exec probe: run in a session of its own, judged by its own exit.

:func:`run_check` starts the command with stdin from /dev/null and stdout and stderr on
one pipe of ours, and answers its exit status and the first line of its output as soon
as the command itself exits. A process it leaves in the background (``sleep 60 &``) may
hold the pipe open for as long as it lives: that neither delays the answer nor survives
it, since the whole process group is SIGKILLed once the command is done, every time.
One that left the group (``setsid``) and outlived its parent is re-parented to the
backend, a child subreaper from its first exec probe on (:func:`adopt_strays`): once a
probe is done, every child of the backend that is not a running probe's command is
such a stray, and is SIGKILLed and reaped (:func:`_sweep`). Without that, a health
check that started a daemon added one each interval, for good. Every probe carries its
backend's marker (:mod:`backend.probe_orphans`), by which the next backend ends what a
probe of a backend killed meanwhile left running. :mod:`backend.probes` turns the answer
into a verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence

from .probe_orphans import probe_env

__all__ = ["FIRST_LINE_MAX", "OUTPUT_READ_MAX", "adopt_strays", "run_check"]

log = logging.getLogger("tenure.backend")

FIRST_LINE_MAX = 200
"""Characters of an exec probe's output kept for its verdict (its first line)."""
OUTPUT_READ_MAX = 4096
"""Bytes of output looked at for that line; the rest is read and discarded."""


_LIVE: set[int] = set()   # the commands of the probes running now
_spawning = 0             # probes between their fork and their pid in _LIVE
_may_adopt = False        # this process is the backend (allow_adopting)
_adopting = False         # and it is a subreaper now (adopt_strays)
REAP_AFTER_S = 0.05
"""How long after its SIGKILL a stray is looked for again, to be reaped."""


def allow_adopting() -> None:
    """This process is the backend: its first exec probe makes it a subreaper
    (:func:`adopt_strays`; then, not at its start: ctypes costs a start ~3 ms and
    0.4 MiB, which a config without exec probes need not pay)."""
    global _may_adopt
    _may_adopt = True


def adopt_strays() -> bool:
    """Make the backend the reaper of what its probes leave behind (a child subreaper);
    False (logged) when the kernel refuses: strays then go to init, as before. Raises
    nothing."""
    global _adopting
    from owner.reaper import become_subreaper
    try:
        become_subreaper()
    except OSError as exc:
        log.warning("exec probes: what they leave running after setsid cannot be stopped "
                    "(%s)", exc)
        return False
    _adopting = True
    return True


def _children() -> list[int]:
    """This process's children (of any of its threads), from /proc."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), \
                    open(f"/proc/self/task/{task}/children", "rb") as f:
                out += [int(p) for p in f.read().split()]
    return out


async def _sweep() -> int:
    """SIGKILL every child that is not a running probe's command (a stray some probe
    left, re-parented here), with its process group when it leads one, then reap the
    strays; how many were killed. Skipped while a probe is being started (its pid is
    not known yet: it could be taken for a stray), and in any process but the backend's
    (a test's, whose other children are not strays). Raises nothing."""
    if _spawning or not _adopting:
        return 0
    strays = [pid for pid in _children() if pid not in _LIVE]
    for pid in strays:
        with contextlib.suppress(OSError):   # gone meanwhile
            if os.getpgid(pid) == pid:   # its group, itself included
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
    if strays:
        log.warning("exec probes: stopped %d process(es) a probe left running (pids %s)",
                    len(strays), " ".join(map(str, strays[:10])))
        await asyncio.sleep(REAP_AFTER_S)
        from owner.reaper import reap_orphans
        reap_orphans(lambda pid: pid in _LIVE, lambda pid: None)   # a probe's: asyncio's
    return len(strays)


class _Output:
    """The head of what a command writes to the read end ``fd`` of its pipe (non-blocking).
    Invariant: at most OUTPUT_READ_MAX bytes are kept; the pipe is drained whenever it is
    readable, so the command never blocks on a full pipe. Never waits for EOF: a process
    the command left behind may hold the pipe open for as long as it lives."""

    def __init__(self, fd: int) -> None:
        self.fd, self.head = fd, bytearray()

    def _read(self) -> bytes | None:
        """One read: what came (b"" at EOF), or None when nothing is there now."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        except OSError:  # a broken read end will never give more: as good as EOF
            return b""
        self.head += chunk[:OUTPUT_READ_MAX - len(self.head)]
        return chunk

    def on_readable(self) -> None:
        """The loop's reader callback. At EOF the fd stays readable: stop watching it."""
        if self._read() == b"":
            asyncio.get_running_loop().remove_reader(self.fd)

    def take_written(self) -> None:
        """Read what the pipe holds now, up to the head's size, without blocking. Called
        once the command exited: all it wrote itself is in the pipe by then."""
        while len(self.head) < OUTPUT_READ_MAX and self._read():
            pass

    def first_line(self) -> str:
        """The first non-empty line of the head, at most FIRST_LINE_MAX characters."""
        lines = [ln.strip() for ln in self.head.decode(errors="replace").splitlines()]
        first = next((ln for ln in lines if ln), "")
        return "".join(c if c.isprintable() else "?" for c in first)[:FIRST_LINE_MAX]


async def _end_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL everything left in the command's process group (it leads a session of its
    own, so the group id is its pid, and that id stays taken while any member lives) and
    reap the command. Raises only CancelledError, and only once the kill was sent."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # group already empty
        os.killpg(proc.pid, signal.SIGKILL)
    # Reap even if we are being cancelled: SIGKILL makes the wait short, and the shielded
    # wait goes on (and reaps) even if our await of it is cancelled.
    await asyncio.shield(proc.wait())


async def _at_exit(proc: asyncio.subprocess.Process, r: int, timeout: float
                   ) -> tuple[int, str]:
    """Wait up to ``timeout`` for ``proc`` to exit, draining the read end ``r`` of its
    output pipe meanwhile: its exit status (negative: the signal that killed it) and
    first line. Then, whatever happened, its process group is ended
    (:func:`_end_group`). Raises TimeoutError when it did not exit in time."""
    loop = asyncio.get_running_loop()
    out = _Output(r)
    loop.add_reader(r, out.on_readable)
    try:
        async with asyncio.timeout(timeout):
            code = await proc.wait()
        out.take_written()
        return code, out.first_line()
    finally:
        loop.remove_reader(r)
        await _end_group(proc)


async def run_check(argv: Sequence[str], timeout: float, *,
                    env: Mapping[str, str] | None = None, cwd: str | None = None
                    ) -> tuple[int, str]:
    """Run ``argv`` in a new session: its exit status (negative: killed by that signal)
    and the first line of its output (stdout and stderr together), as soon as it exits,
    whatever a process it left behind does with the pipe. Raises OSError when it cannot
    be started, TimeoutError when it did not exit within ``timeout``. The command's
    environment is ``env`` (None: ours) with the backend's probe marker added
    (:func:`backend.probe_orphans.probe_env`). Invariant: however this ends (answer,
    timeout, cancellation), everything left in its process group has been sent SIGKILL,
    the command is reaped and both pipe ends are closed."""
    global _spawning
    if _may_adopt and not _adopting:   # before any probe could leave a stray
        adopt_strays()
    r, w = os.pipe()
    pid = None
    try:
        try:
            os.set_blocking(r, False)
            _spawning += 1
            # Our own pipe, not asyncio's PIPE: Process.wait() then returns once the
            # command exits, not once every holder of the pipe has closed it.
            proc = await asyncio.create_subprocess_exec(
                *argv, env=probe_env(env), cwd=cwd,
                stdin=asyncio.subprocess.DEVNULL, stdout=w,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
            pid = proc.pid
            _LIVE.add(pid)
        finally:
            _spawning -= 1
            os.close(w)  # the command has its copy; ours would keep the pipe from ending
        return await _at_exit(proc, r, timeout)
    finally:
        os.close(r)
        if pid is not None:
            _LIVE.discard(pid)
            await asyncio.shield(_sweep())
