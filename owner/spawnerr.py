"""Why a launch could not start: the ``spawn`` map of a ``LAUNCH_FAILED`` (capability
``spawnErrors`` 1).

A failed launch's error data carries, besides the owner's message::

    {"step": "exec", "path": "/srv/app", "errno": 13, "errno_name": "EACCES",
     "strerror": "Permission denied", "hint": "not executable",
     "text": "spawn failed: /srv/app: Permission denied (not executable)"}

``step`` says what was refused (:class:`Step`); ``text`` is the one line an operator
reads (in ``tenure status``, ``inspect`` and the app's own log stream). ``errno`` and
``path`` are null for failures without an OS error (a user that does not exist). The
same map is kept in the launch's durable row (``error.data.spawn``).

Pure functions but :func:`exec_hint`, which looks at the file the kernel refused (after
the failure, only to word it; nothing depends on it).
"""

from __future__ import annotations

import errno as _errno
import os
import stat
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = ["Step", "exec_hint", "identity_failure", "os_failure", "search_path", "setup_failure"]


class Step(StrEnum):
    """What a failed launch was doing (stable wire values)."""

    EXEC = "exec"          # the program: missing, not executable, bad format
    CWD = "cwd"            # entering the working directory
    USER = "user"          # the user does not exist
    GROUP = "group"        # a group does not exist
    IDENTITY = "identity"  # setgroups / setgid / setuid refused
    CGROUP = "cgroup"      # joining the app's cgroup
    RLIMIT = "rlimit"      # setting resource limits
    SETUP = "setup"        # anything else between fork and exec (pipes, session)


# ChildSetup's step names -> Step
SETUP_STEPS: Mapping[str, Step] = {
    "chdir": Step.CWD, "setgroups": Step.IDENTITY, "setgid": Step.IDENTITY,
    "setuid": Step.IDENTITY, "cgroup": Step.CGROUP, "rlimit": Step.RLIMIT,
    "exec": Step.EXEC,
}

_EXEC_HINTS: Mapping[int, str] = {
    _errno.ENOEXEC: "no #! line, or not a program for this machine",
    _errno.ETXTBSY: "the file is open for writing",
}


def _failure(step: Step, text: str, *, path: str | None = None, num: int | None = None,
             hint: str | None = None) -> dict[str, Any]:
    return {"step": str(step), "path": path, "errno": num,
            "errno_name": None if num is None else _errno.errorcode.get(num),
            "strerror": None if num is None else os.strerror(num), "hint": hint,
            "text": text + (f" ({hint})" if hint else "")}


def search_path(argv0: str, env: Mapping[str, str]) -> str | None:
    """The file exec would run for ``argv0`` (a name without a slash) with ``env``'s PATH,
    or None when there is none. shutil is imported here, not by the owner's start: it
    imports bz2 and lzma and maps their libraries (~0.5 MiB resident), and a launch
    looks a program up only for a cgroup, passed fds, or a failure to explain."""
    import shutil
    return shutil.which(argv0, path=os.pathsep.join(os.get_exec_path(dict(env))))


def exec_hint(argv0: str, num: int, cwd: str | None, env: Mapping[str, str]) -> str | None:
    """A few words on why exec refused ``argv0`` with errno ``num``, or None. A relative
    ``argv0`` is judged from ``cwd``, where the child started and exec looked (None: the
    owner's own working directory). Never raises OSError."""
    if num in _EXEC_HINTS:
        return _EXEC_HINTS[num]
    if "/" not in argv0:
        found = search_path(argv0, env)
        if num == _errno.ENOENT and found is None:
            return "not found in PATH"
        full = found
    else:
        full = argv0 if os.path.isabs(argv0) else os.path.join(cwd or os.getcwd(), argv0)
    try:
        st = os.stat(full) if full is not None else None
    except OSError:
        return None
    if st is None:
        return None
    if num == _errno.ENOENT:
        # The file is there: exec did not find the interpreter its #! line names.
        return "its #! interpreter was not found"
    if num == _errno.EACCES and stat.S_ISDIR(st.st_mode):
        return "a directory"
    if num == _errno.EACCES and not st.st_mode & 0o111:
        return "not executable"
    return None


def os_failure(argv0: str, exc: OSError, cwd: str | None,
               env: Mapping[str, str]) -> dict[str, Any]:
    """The ``spawn`` map for an OSError Popen raised: the child's chdir (its filename is
    the cwd) or exec (the program), or a failure before either."""
    num = exc.errno or 0
    if cwd is not None and exc.filename == cwd and exc.filename != argv0:
        return _failure(Step.CWD, f"cwd {cwd}: {os.strerror(num)}", path=cwd, num=num)
    if exc.filename is None and num in (_errno.EMFILE, _errno.ENFILE):
        return _failure(Step.SETUP, f"spawn failed: {_out_of_files(num)}", num=num)
    if exc.filename is None and num:
        return _failure(Step.SETUP, f"spawn failed: {os.strerror(num)}", num=num)
    if not num:
        return _failure(Step.SETUP, f"spawn failed: {exc}")
    path = os.fsdecode(exc.filename)
    return _failure(Step.EXEC, f"spawn failed: {path}: {os.strerror(num)}", path=path,
                    num=num, hint=exec_hint(argv0, num, cwd, env))


def _out_of_files(num: int) -> str:
    """EMFILE: the owner holds as many files as its RLIMIT_NOFILE lets it (each app costs
    it a few: its pipes and pidfd), not the app's fault; ENFILE: the whole system does."""
    if num == _errno.ENFILE:
        return "the system is out of open files (fs.file-max)"
    import resource
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (f"the owner is out of file descriptors (its limit is {soft}; each app holds "
            "3 of them): raise the owner's limit (LimitNOFILE= in its unit, `ulimit -n` "
            "where `tenure up` runs) and start it again")


def setup_failure(step: str, num: int | None, cwd: str | None,
                  user: str | None) -> dict[str, Any]:
    """The ``spawn`` map for a step of :class:`owner.runas.ChildSetup` that failed in
    the child (``num`` None: the child said nothing)."""
    kind = SETUP_STEPS.get(step, Step.SETUP)
    who = f" (as user {user})" if user is not None else ""
    reason = os.strerror(num) if num is not None else "failed"
    if kind is Step.CWD:
        return _failure(kind, f"cwd {cwd}: {reason}{who}", path=cwd, num=num)
    what = {Step.IDENTITY: f"switching to user {user}", Step.CGROUP: "joining its cgroup",
            Step.RLIMIT: "setting resource limits", Step.EXEC: "exec"}.get(
                kind, "passing file descriptors" if step == "fds" else "preparing the process")
    return _failure(kind, f"spawn failed: {what}: {reason}", num=num)


def identity_failure(step: Step, name: str) -> dict[str, Any]:
    """The ``spawn`` map for a user or group name that does not resolve."""
    return _failure(step, f"{step} {name}: no such {step}")
