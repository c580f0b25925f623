"""Starting application processes: the ``Spawner`` seam and the real implementation.

Invariant on return from :meth:`PopenSpawner.spawn`: the child runs in its own session
(pgid == sid == pid), stdin is /dev/null, stdout and stderr are two separate pipes whose
write ends are closed in the owner, the child inherited no other descriptor, and nobody
but the caller will ever reap it. On failure nothing is left behind: no process, no fd.
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import os
import subprocess
from dataclasses import dataclass

from protocol.errors import LaunchFailed
from protocol.procfs import boottime_ns, ticks_between

from .cgroups import shim_argv
from .fdpass import FdHandoff, PassFds, resolve_program, without_listen_vars
from .procinfo import read_start_ticks
from .runas import ChildSetup, resolve, start_dir
from .spawnerr import os_failure
from .specs import LaunchSpec

__all__ = ["PopenSpawner", "Spawned", "Spawner", "pidfd_supported"]


def pidfd_supported() -> bool:
    """Whether ``os.pidfd_open`` exists and the kernel accepts it."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Spawned:
    """A started process. The caller owns all three fds: ``pidfd`` (None when pidfds are
    unavailable) goes to the process table, the pipe read ends (O_NONBLOCK|O_CLOEXEC) to
    the log drain."""

    pid: int
    pidfd: int | None
    stdout_fd: int
    stderr_fd: int
    start_ticks: int
    pgid: int
    cgroup: str | None = None  # the app's own cgroup directory, in cgroup mode


class Spawner(abc.ABC):
    """The side-effect seam for starting processes (tests substitute a fake)."""

    @abc.abstractmethod
    def spawn(self, spec: LaunchSpec, notify_socket_path: str | None,
              cgroup: str | None = None, passed: PassFds | None = None) -> Spawned:
        """Start ``spec`` (inside ``cgroup`` before its program runs, when given), with
        ``passed`` as its fds 3.. (owner.fdpass). Raises LaunchFailed, leaving nothing
        behind; the caller keeps its own ends of ``passed``."""


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _pipe() -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    # Readers are asyncio drains: they must never block the loop.
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)
    return r, w


class PopenSpawner(Spawner):
    """Starts processes with :class:`subprocess.Popen`.

    Why Popen and not ``os.posix_spawn``: 200 spawns of ``sleep 1000`` with two pipes ran
    at 400-1150/s with Popen and 530-1480/s with posix_spawn over 9 runs each on this
    shared 2-core machine (posix_spawn ~25% ahead in the median, the ranges overlapping
    run to run; bench/spawn.py reached ~1,800/s through the table when the machine was
    quiet). Popen gives, in the child, ``cwd`` (chdir) and
    ``close_fds`` (close_range) which posix_spawn in Python cannot express; doing the
    chdir in the owner would race every other thread, and an inheritable fd opened by a
    C extension would leak into apps. Correctness wins a ~25% difference.
    Popen on 3.11 uses vfork when there is no preexec_fn, which keeps it close.
    """

    def __init__(self, *, use_pidfd: bool | None = None) -> None:
        self._use_pidfd = pidfd_supported() if use_pidfd is None else use_pidfd

    def spawn(self, spec: LaunchSpec, notify_socket_path: str | None,
              cgroup: str | None = None, passed: PassFds | None = None) -> Spawned:
        """Start ``spec`` in its own session with NOTIFY_SOCKET set (when given).

        With ``passed`` (one fd or more) the launch goes through
        :class:`owner.runas.ChildSetup` whatever else it asks for: the child places the
        fds at 3.., sets ``LISTEN_FDS``/``LISTEN_PID``/``LISTEN_FDNAMES`` and execs
        itself (owner.fdpass); nothing else of the owner's stays open in it.

        With ``cgroup`` the child goes through :data:`owner.cgroups.SHIM`: it joins that
        cgroup and only then execs the program, so no process of the app ever runs
        outside it. The program is looked up first (the shim would only report a missing
        one through its exit status). A launch with an identity, umask or rlimits goes
        through :class:`owner.runas.ChildSetup` instead, which also joins the cgroup.

        Raises LaunchFailed (missing program, not executable, bad cwd, fd exhaustion, a
        user or group that no longer exists, a step of the identity switch refused),
        PrivilegeRequired (another user asked of a non-root owner); on failure every fd
        opened here is closed and no child is left.
        """
        env = without_listen_vars(spec.env)
        if notify_socket_path is not None:
            env["NOTIFY_SOCKET"] = notify_socket_path
        creds = resolve(spec.run_as)
        # Where the child starts: the one directory its program is looked up from, by
        # the fd handoff here or by exec there, and that a failure is explained against.
        cwd = start_dir(spec.cwd, creds)
        handoff = None
        if passed is not None and passed.fds:
            try:
                handoff = FdHandoff.build(spec.argv, env, cwd, passed)
            except OSError as e:
                raise LaunchFailed(_reason(spec, e, cwd), _why(spec, e, env, cwd)) from e
        # An identity, umask, rlimits or fds to pass need steps between fork and exec
        # (owner.runas); without them Popen's own (vfork) path runs, as it always did.
        setup = ChildSetup.for_launch(creds, spec.run_as.umask, spec.limits, cwd, cgroup,
                                      handoff)
        with setup or contextlib.nullcontext():
            before = boottime_ns()
            proc, out_r, err_r = self._popen(spec, env, cwd, cgroup, setup)
            forked = ticks_between(before, boottime_ns())
            failure = None if handoff is None or setup is None else setup.confirm_exec()
        if failure is not None:
            os.waitpid(proc.pid, 0)  # it exited: reap it here, the table never saw it
            proc.returncode = 127
            _close_all([out_r, err_r])
            assert setup is not None     # a failure is only reported through a setup
            raise LaunchFailed(f"cannot start {spec.argv[0]!r}: {failure}",
                               {"argv0": spec.argv[0], "spawn": setup.explain()})
        # The table reaps through the pidfd or SIGCHLD. Give Popen a returncode so its
        # __del__ never parks the pid in subprocess._active, whose _cleanup() (run at
        # every later Popen) would waitpid() it and steal the exit status.
        proc.returncode = 0
        try:
            pidfd = self._open_pidfd(proc.pid)
        except OSError as e:
            # Without a pidfd we cannot watch it: undo the launch rather than leak it.
            os.killpg(proc.pid, 9)
            os.waitpid(proc.pid, 0)
            _close_all([out_r, err_r])
            raise LaunchFailed(_reason(spec, e, cwd), _why(spec, e, env, cwd)) from e
        # Forked between two readings of the clock it is stamped with: its start ticks
        # without a read of /proc, unless the readings straddle a tick. The child cannot
        # be reaped yet (only the table reaps), so /proc still has it, if only as a zombie.
        ticks = forked if forked is not None else read_start_ticks(proc.pid)
        return Spawned(pid=proc.pid, pidfd=pidfd, stdout_fd=out_r, stderr_fd=err_r,
                       start_ticks=ticks if ticks is not None else 0, pgid=proc.pid,
                       cgroup=cgroup)

    def _popen(self, spec: LaunchSpec, env: dict[str, str], cwd: str | None,
               cgroup: str | None, setup: ChildSetup | None
               ) -> tuple[subprocess.Popen[bytes], int, int]:
        """Popen with two fresh pipes, the child started in ``cwd`` (start_dir); returns
        the process and the read ends (the write ends are closed). Raises LaunchFailed,
        leaving no fd and no child behind."""
        argv = list(spec.argv)
        opened: list[int] = []
        try:
            if cgroup is not None and setup is None:
                _check_program(spec, env, cwd)
                argv = shim_argv(cgroup, argv)
            out_r, out_w = _pipe()
            opened += [out_r, out_w]
            err_r, err_w = _pipe()
            opened += [err_r, err_w]
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                env=env, cwd=cwd if setup is None else None, close_fds=True,
                start_new_session=True, preexec_fn=setup,
            )
        except (OSError, ValueError) as e:
            _close_all(opened)
            raise LaunchFailed(_reason(spec, e, cwd), _why(spec, e, env, cwd)) from e
        except subprocess.SubprocessError as e:  # only ChildSetup fails this way
            _close_all(opened)
            assert setup is not None
            raise LaunchFailed(f"cannot start {spec.argv[0]!r}: {setup.failure()}",
                               {"argv0": spec.argv[0], "spawn": setup.explain()}) from e
        _close_all([out_w, err_w])
        return proc, out_r, err_r

    def _open_pidfd(self, pid: int) -> int | None:
        if not self._use_pidfd:
            return None
        # Safe against pid reuse: the unreaped child pins its pid.
        return os.pidfd_open(pid)


def _check_program(spec: LaunchSpec, env: dict[str, str], cwd: str | None) -> None:
    """What Popen's exec would refuse, checked up front (the shim's exec happens later,
    in the child, started in ``cwd``). Raises FileNotFoundError or PermissionError like
    exec would; a program removed between this check and the exec makes the shim exit
    127."""
    resolve_program(spec.argv[0], env, cwd)


def _reason(spec: LaunchSpec, e: Exception, cwd: str | None) -> str:
    if isinstance(e, OSError):
        what = e.filename if e.filename is not None else spec.argv[0]
        if cwd is not None and what == cwd:   # the chdir before the exec
            return f"cannot start {spec.argv[0]!r}: working directory {what}: {e.strerror}"
        return f"cannot start {spec.argv[0]!r}: {e.strerror} ({what})"
    return f"cannot start {spec.argv[0]!r}: {e}"


def _why(spec: LaunchSpec, e: Exception, env: dict[str, str],
         cwd: str | None) -> dict[str, object]:
    """The error data of a failed spawn: ``argv0`` and the ``spawn`` map (owner.spawnerr),
    which judges a relative program from ``cwd``, where the child was to start."""
    if not isinstance(e, OSError):
        return {"argv0": spec.argv[0]}
    return {"argv0": spec.argv[0], "spawn": os_failure(spec.argv[0], e, cwd, env)}
