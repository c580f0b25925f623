"""Passing file descriptors to an app as fds 3.., the systemd way (sd_listen_fds(3)).

The app finds ``LISTEN_FDS`` descriptors starting at 3, named by ``LISTEN_FDNAMES``
(colon-separated), and ``LISTEN_PID`` equal to its own pid — libraries (systemd-python,
gunicorn, uvicorn) ignore the variables when the pid differs, so that a child the app
starts does not take the sockets for its own.

Why the exec happens in the child setup here: Popen can keep descriptors open
(``pass_fds``) but not renumber them, and the environment it hands to exec is built
before the fork, when the child's pid is not known yet. So a launch that passes fds goes
through :class:`owner.runas.ChildSetup` (Popen's ``preexec_fn``). Its first step after
joining the cgroup is :meth:`FdHandoff.place` (move every descriptor to its place, close
everything else: before rlimits lower ``nofile``, see there), its last
:meth:`FdHandoff.exec` (add ``LISTEN_PID`` = ``getpid()`` and ``execve``). Such a child
never returns to Popen, whose own error pipe the placement may have closed or renumbered
over; success and failure are reported on the setup's own close-on-exec pipe instead
(:meth:`owner.runas.ChildSetup.confirm_exec`): end of file means the exec happened,
``step,errno`` means it did not and the child exited 127.

The child only calls C-level ``os``/``fcntl`` functions on values computed before the
fork (see owner.runas for why that is safe in a threaded owner). Nothing but 0, 1, 2 and
the passed descriptors survives the exec: everything else is closed explicitly, and the
report pipe is close-on-exec.
"""

from __future__ import annotations

import fcntl
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from .spawnerr import search_path

__all__ = [
    "EXIT_HANDOFF_FAILED",
    "LISTEN_FDS_START",
    "LISTEN_VARS",
    "FdHandoff",
    "PassFds",
    "resolve_program",
    "without_listen_vars",
]

LISTEN_FDS_START = 3
LISTEN_VARS = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
EXIT_HANDOFF_FAILED = 127


@dataclass(frozen=True)
class PassFds:
    """Descriptors of the owner to pass, in order (the first becomes 3), and their names."""

    fds: tuple[int, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.fds) != len(self.names):
            raise ValueError("every passed fd needs a name")

    def env(self) -> dict[str, str]:
        """``LISTEN_FDS`` and ``LISTEN_FDNAMES`` (``LISTEN_PID`` is set in the child)."""
        return {"LISTEN_FDS": str(len(self.fds)), "LISTEN_FDNAMES": ":".join(self.names)}


def without_listen_vars(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without ``LISTEN_*``: only the owner sets them, and only when it passes
    descriptors (a stale set would make an app look for fds it does not have)."""
    return {k: v for k, v in env.items() if k not in LISTEN_VARS}


def resolve_program(argv0: str, env: Mapping[str, str], cwd: str | None) -> str:
    """The path exec will run for ``argv0``: as given when it holds a '/' (relative to
    ``cwd``, where the child will start: :func:`owner.runas.start_dir`, None for the
    owner's own working directory), else looked up in the app's PATH.

    Raises FileNotFoundError or PermissionError like exec would.
    """
    if "/" in argv0:
        full = argv0 if os.path.isabs(argv0) else os.path.join(cwd or os.getcwd(), argv0)
        if not os.path.exists(full):
            raise FileNotFoundError(2, "No such file or directory", argv0)
        if os.path.isdir(full) or not os.access(full, os.X_OK):
            raise PermissionError(13, "Permission denied", argv0)
        return full
    found = search_path(argv0, env)
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", argv0)
    return found


def _fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(soft, hard)
    return 1 << 20 if top == resource.RLIM_INFINITY or top > 1 << 20 else top


@dataclass(frozen=True)
class FdHandoff:
    """The exec of a launch that passes descriptors (built before the fork)."""

    program: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    fds: tuple[int, ...]
    max_fd: int

    @classmethod
    def build(cls, argv: tuple[str, ...], env: Mapping[str, str], cwd: str | None,
              passed: PassFds) -> FdHandoff:
        """Raises FileNotFoundError or PermissionError for a program exec would refuse."""
        return cls(resolve_program(argv[0], env, cwd), argv,
                   {**without_listen_vars(env), **passed.env()}, passed.fds, _fd_limit())

    def place(self, report_fd: int) -> int:
        """In the child, before any step that may lower RLIMIT_NOFILE: move the fds to
        3.., close every other descriptor but the report pipe, and return where the
        report pipe is now (close-on-exec, above the placed fds). On failure write
        ``fds,errno`` to the report pipe and exit 127; never raises.

        It runs first because every descriptor of the owner is still open in the child
        (close-on-exec acts only at the exec): moving a fd needs a free slot at or above
        3+n, which an app's lower ``nofile`` would not leave once the owner holds more
        files than that."""
        n = len(self.fds)
        try:
            # Everything that must outlive the renumbering moves above 3+n first: a
            # source or the report pipe may sit exactly where another fd must go.
            report = fcntl.fcntl(report_fd, fcntl.F_DUPFD_CLOEXEC, LISTEN_FDS_START + n)
            report_fd = report
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, LISTEN_FDS_START + n)
                    for fd in self.fds]
            for i, fd in enumerate(high):
                os.dup2(fd, LISTEN_FDS_START + i, inheritable=True)
            os.closerange(LISTEN_FDS_START + n, report)
            os.closerange(report + 1, self.max_fd)
        except BaseException as e:
            _fail(report_fd, "fds", e)
        return report

    def exec(self, report_fd: int) -> NoReturn:
        """In the child, once :meth:`place` put the fds in place (``report_fd`` is what
        it returned): exec with ``LISTEN_PID``. On failure write ``exec,errno`` to
        ``report_fd`` and exit 127; never returns or raises."""
        try:
            env = {**self.env, "LISTEN_PID": str(os.getpid())}
            os.execve(self.program, list(self.argv), env)
        except BaseException as e:
            _fail(report_fd, "exec", e)
        os._exit(EXIT_HANDOFF_FAILED)  # execve returned without raising: impossible


def _fail(report_fd: int, step: str, e: BaseException) -> NoReturn:
    """In the child: say ``step,errno`` on the report pipe and exit 127."""
    try:
        os.write(report_fd, f"{step},{getattr(e, 'errno', 0) or 0}".encode())
    finally:
        os._exit(EXIT_HANDOFF_FAILED)
