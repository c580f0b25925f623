"""Who an application runs as: its user, groups and umask, switched to between fork and exec.

Wire shape (launch param ``identity``; every key optional)::

    {"user": "www", "group": "www", "supplementary_groups": ["ssl-cert"], "umask": 0o027}

The owner resolves the names when it launches (:func:`resolve`): the user's primary group
unless ``group`` names another, the user's own supplementary groups from the group
database (``getgrouplist``, as ``login`` and systemd's ``User=`` do) plus the configured
ones — never the owner's. Only a root owner can switch: a non-root owner asked for any
uid, gid or group list other than its own refuses with ``PRIVILEGE_REQUIRED``.

The switch happens in the child, between fork and exec (:class:`ChildSetup`, run as
Popen's ``preexec_fn``), in this order: join the app's cgroup (needs root), place the
fds a launch passes (owner.fdpass), set the rlimits (as root, so a hard limit may be
raised), ``setgroups`` → ``setresgid`` → ``setresuid`` (all three ids, so nothing can
switch back), umask, and only then ``chdir`` — the working directory is entered with
the app's own permissions, as under systemd's ``WorkingDirectory=``.

Why ``preexec_fn`` here although :mod:`owner.cgroups` avoids it: Popen cannot set rlimits
or order the steps above itself, and an exec shim cannot switch users without a helper
binary. The callable only calls C-level ``os``/``resource`` functions on values computed
before the fork: it imports nothing, takes no lock another thread could hold (the
child's GIL is fresh; glibc resets malloc's locks at fork) and logs nothing. It costs the
vfork fast path: a plain fork copies the owner's page tables, about 4-6 ms more per launch
on a shared 2-core machine (``bench/spawn.py --user nobody``: 100-180 launches/s against
370-750/s without an identity). Only launches that ask for an identity, a umask or
rlimits take it; the others keep Popen's vfork path unchanged.

A launch that passes fds (owner.fdpass) takes it too, whatever else it asks for: it
places them at 3.. (closing every other fd) before the rlimits, whose ``nofile`` would
leave no free slot to move them through while the owner's fds are still open, and
execs with ``LISTEN_PID`` as its last step; it never returns to Popen.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import resource
import select
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.codes import Code
from protocol.errors import BadRequest, LaunchFailed, PrivilegeRequired, error_class

from .fdpass import EXIT_HANDOFF_FAILED, FdHandoff
from .limits import Limits
from .spawnerr import Step, identity_failure, setup_failure

__all__ = ["ChildSetup", "Credentials", "RunAs", "launch_error", "privileges", "resolve",
           "start_dir"]

_KEYS = frozenset({"user", "group", "supplementary_groups", "umask"})
_MAX_GROUPS = 64


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value or len(value) > 256:
        raise BadRequest(f"identity.{what} must be a non-empty name")
    return value


@dataclass(frozen=True)
class RunAs:
    """The identity a launch asks for; all None/empty means "as the owner"."""

    user: str | None = None
    group: str | None = None
    supplementary_groups: tuple[str, ...] = ()
    umask: int | None = None

    @property
    def empty(self) -> bool:
        return self == RunAs()

    @classmethod
    def from_wire(cls, d: object) -> RunAs:
        """Parse the ``identity`` map. Raises BadRequest (and nothing else) for a
        non-map, a bad name, too many groups, a group without a user, or a umask
        outside 0..0o777. Unknown keys are ignored."""
        if not isinstance(d, Mapping):
            raise BadRequest(f"identity must be a map, not {type(d).__name__}")
        user = None if d.get("user") is None else _name(d["user"], "user")
        group = None if d.get("group") is None else _name(d["group"], "group")
        extra = d.get("supplementary_groups") or []
        if not isinstance(extra, list | tuple) or len(extra) > _MAX_GROUPS:
            raise BadRequest(f"identity.supplementary_groups must be a list of at most "
                             f"{_MAX_GROUPS} names")
        groups = tuple(_name(g, "supplementary_groups[]") for g in extra)
        if (group or groups) and user is None:
            raise BadRequest("identity.group and supplementary_groups need identity.user")
        umask = d.get("umask")
        if umask is not None and (isinstance(umask, bool) or not isinstance(umask, int)
                                  or not 0 <= umask <= 0o777):
            raise BadRequest("identity.umask must be an integer between 0 and 0o777")
        return cls(user, group, groups, umask)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.user is not None:
            out["user"] = self.user
        if self.group is not None:
            out["group"] = self.group
        if self.supplementary_groups:
            out["supplementary_groups"] = list(self.supplementary_groups)
        if self.umask is not None:
            out["umask"] = self.umask
        return out


@dataclass(frozen=True)
class Credentials:
    """Resolved ids to switch to (``groups`` is the complete supplementary list)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    home: str


def _group_id(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise LaunchFailed(f"group {name!r} does not exist",
                           {"group": name, "spawn": identity_failure(Step.GROUP, name)}
                           ) from None


OwnerIds = tuple[int, int, frozenset[int]]
"""(euid, egid, supplementary groups) of the owner."""


def _owner_ids() -> OwnerIds:
    return os.geteuid(), os.getegid(), frozenset(os.getgroups())


def resolve(run_as: RunAs, owner: OwnerIds | None = None) -> Credentials | None:
    """The credentials ``run_as`` names, or None when nothing is to be switched.

    Raises LaunchFailed when a name no longer resolves, PrivilegeRequired when the owner
    (``owner``, default this process's ids) is not root and the credentials differ from
    its own. Blocks on the name service (NSS) like ``getpwnam`` does.
    """
    if run_as.user is None:
        return None
    try:
        pw = pwd.getpwnam(run_as.user)
    except KeyError:
        raise LaunchFailed(f"user {run_as.user!r} does not exist",
                           {"user": run_as.user,
                            "spawn": identity_failure(Step.USER, run_as.user)}) from None
    gid = pw.pw_gid if run_as.group is None else _group_id(run_as.group)
    groups = list(os.getgrouplist(pw.pw_name, gid))
    for name in run_as.supplementary_groups:
        g = _group_id(name)
        if g not in groups:
            groups.append(g)
    creds = Credentials(pw.pw_uid, gid, tuple(groups), pw.pw_name, pw.pw_dir)
    uid, egid, owner_groups = owner or _owner_ids()
    if uid == 0:
        return creds
    # A non-root owner may run an app as itself, with nothing to switch.
    if creds.uid != uid or creds.gid != egid or not set(groups) <= {egid, *owner_groups}:
        raise PrivilegeRequired(
            f"the owner runs as uid {uid}, not root: it cannot start an app as user "
            f"{run_as.user!r} (uid {creds.uid}, gid {creds.gid}, groups {groups})",
            {"user": run_as.user, "uid": creds.uid, "owner_uid": uid})
    return None


def start_dir(cwd: str | None, creds: Credentials | None) -> str | None:
    """The directory a launch starts in, so also the one a relative program with a '/'
    is found from: its ``cwd``; else ``/`` when it switches to another user (``creds``);
    else None, the owner's own working directory, which the child keeps.

    The one answer for the fd handoff's program lookup, the child's chdir and the words
    of a failed exec: each deciding on its own ran another user's ``rvbin/app`` from the
    owner's directory when a socket was passed, and looked for it in ``/`` otherwise."""
    if cwd is None and creds is not None:
        # As under systemd: another user's app without a cwd starts in /, not in the
        # owner's working directory (which that user may not be able to enter).
        return "/"
    return cwd


@dataclass
class ChildSetup:
    """The ``preexec_fn`` of a launch with an identity or rlimits (see the module
    docstring for the order and why). A failing step writes ``step,errno`` to an
    error pipe before the child exits, so the parent can say what failed
    (:meth:`failure`); Popen itself only reports "Exception occurred in preexec_fn"."""

    creds: Credentials | None
    umask: int | None
    rlimits: tuple[tuple[int, tuple[int, int]], ...]
    cwd: str | None
    cgroup_procs: str | None = None
    handoff: FdHandoff | None = None  # the last step: place fds 3.. and exec (fdpass)
    _pipe: tuple[int, int] = field(default=(-1, -1), repr=False)
    _said: tuple[str, str] | None = field(default=None, repr=False)

    @classmethod
    def for_launch(cls, creds: Credentials | None, umask: int | None, limits: Limits,
                   cwd: str | None, cgroup: str | None, handoff: FdHandoff | None = None
                   ) -> ChildSetup | None:
        """The setup a launch needs, or None when Popen's own path suffices (nothing to
        switch to, no umask, no rlimits, no fds to pass). ``creds`` is what
        :func:`resolve` gave, ``cwd`` what :func:`start_dir` made of the launch's."""
        rlimits = limits.rlimits()
        if creds is None and umask is None and not rlimits and handoff is None:
            return None
        procs = None if cgroup is None else os.path.join(cgroup, "cgroup.procs")
        return cls(creds, umask, rlimits, cwd, procs, handoff)

    def __enter__(self) -> ChildSetup:
        self._pipe = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._pipe:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pipe = (-1, -1)

    def __call__(self) -> None:  # in the child, between fork and exec
        if self.handoff is None:
            self._steps()   # a failure is reported and raised back to Popen
            return
        # Once the fds are placed Popen's own error pipe may be closed or renumbered
        # over (owner.fdpass): nothing goes back to Popen, a failure exits 127 here.
        try:
            report = self._steps()
        except BaseException:
            os._exit(EXIT_HANDOFF_FAILED)
        self.handoff.exec(report)  # never returns

    def _steps(self) -> int:
        """The steps before the exec, in the order the module docstring gives; returns
        where the report pipe is then (the fd placement moves it). A failing step
        writes ``step,errno`` to the report pipe and raises."""
        report = self._pipe[1]
        step = "cgroup"
        try:
            if self.cgroup_procs is not None:
                fd = os.open(self.cgroup_procs, os.O_WRONLY)
                os.write(fd, b"0")  # "0" moves the writer itself
                os.close(fd)
            if self.handoff is not None:
                # Before the rlimits: a lower nofile leaves no slot to move fds to
                # while the owner's are still open (owner.fdpass). Exits on failure.
                report = self.handoff.place(report)
            step = "rlimit"
            for res, value in self.rlimits:
                _setrlimit(res, value)
            if self.creds is not None:
                step = "setgroups"
                os.setgroups(list(self.creds.groups))
                step = "setgid"
                os.setresgid(self.creds.gid, self.creds.gid, self.creds.gid)
                step = "setuid"
                os.setresuid(self.creds.uid, self.creds.uid, self.creds.uid)
            if self.umask is not None:
                os.umask(self.umask)
            step = "chdir"
            if self.cwd is not None:
                os.chdir(self.cwd)
        except BaseException as e:
            os.write(report, f"{step},{getattr(e, 'errno', 0) or 0}".encode())
            raise
        return report

    def _report(self, raw: bytes | None = None) -> tuple[str, str]:
        """(step, errno digits) the child wrote; read once (or given), then remembered."""
        if self._said is None:
            if raw is None:
                try:
                    raw = os.read(self._pipe[0], 256)
                except OSError:
                    raw = b""
            step, _, num = raw.decode(errors="replace").partition(",")
            self._said = (step, num)
        return self._said

    def explain(self) -> dict[str, Any]:
        """The ``spawn`` map (owner.spawnerr) of what the child reported."""
        step, num = self._report()
        return setup_failure(step, int(num) if num.isdigit() else None, self.cwd,
                             None if self.creds is None else self.creds.user)

    def confirm_exec(self) -> str | None:
        """In the parent, after Popen returned, for a setup with a ``handoff``: wait
        until the child exec'd (end of file on the report pipe) or reported a failure;
        returns that failure (the child then exits 127 and must be reaped), else None.
        Blocks no longer than the child takes to reach its exec, as Popen does."""
        os.close(self._pipe[1])
        self._pipe = (self._pipe[0], -1)
        select.select([self._pipe[0]], [], [])
        try:
            raw = os.read(self._pipe[0], 256)
        except BlockingIOError:
            raw = b""
        if not raw:
            return None
        self._report(raw)
        return self.failure()

    def failure(self) -> str:
        """What the child reported before it exited (read after Popen raised, or by
        :meth:`confirm_exec`)."""
        step, num = self._report()
        if not step:
            return "the child failed before exec"
        reason = os.strerror(int(num)) if num.isdigit() else "failed"
        who = f" as user {self.creds.user!r}" if self.creds is not None else ""
        where = {"chdir": f"chdir to {self.cwd!r}{who}",
                 "cgroup": f"joining {self.cgroup_procs!r}",
                 "rlimit": "setting resource limits",
                 "fds": "passing file descriptors",
                 "exec": f"exec of {self.handoff.program!r}" if self.handoff else "exec",
                 }.get(step, f"{step}{who}")
        return f"{where}: {reason}"


def privileges(controllers: tuple[str, ...] | None) -> dict[str, Any]:
    """What this owner can enforce, for ``status``: the backend checks a config against
    it when it plans (``uid`` 0 can switch users; ``cgroup_controllers`` None means no
    per-app cgroups, so no cgroup limits)."""
    return {"uid": os.geteuid(), "switch_users": os.geteuid() == 0,
            "cgroup_controllers": None if controllers is None else list(controllers),
            # how many files it may hold open (a running instance costs it about 3)
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}


def launch_error(code: object) -> type[LaunchFailed]:
    """The class to re-raise a recorded launch failure with: its own kind of
    LaunchFailed (PRIVILEGE_REQUIRED, LIMIT_UNENFORCEABLE) when it was one."""
    try:
        cls = error_class(Code(str(code)))
    except ValueError:
        return LaunchFailed
    return cls if issubclass(cls, LaunchFailed) else LaunchFailed


def _setrlimit(res: int, value: tuple[int, int]) -> None:
    try:
        resource.setrlimit(res, value)
    except ValueError:
        raise OSError(errno.EINVAL, "invalid limit") from None
