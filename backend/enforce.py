"""What a config asks of this host, checked when a plan is made.

A config may name users, groups, a viewer group and cgroup limits that parse fine but
cannot work here (job templates take the identity keys of apps, and the same checks).
:func:`check_config` turns each such case into ``CONFIG_INVALID`` with the key and line,
before anything is applied:

- every ``user``, ``group`` and ``supplementary_groups`` name resolves, and so does a unix
  socket's ``owner`` and ``group``, which the owner must be allowed to give it to;
- the owner can switch to the user: only an owner running as root starts apps as
  another uid;
- cgroup limits have what enforces them: per-app cgroups with the controller;
- with the control plane split (owner as root, backend as the service account, system
  scope) every app names its user — an app without one would run as root — and no app
  runs as the service account or in its group, which can reach the owner's socket;
- no app runs in the viewer group (apps are refused on every socket), and the service
  account can hand the API socket to the viewer group (it is a member);
- an app or job that switches to its ``user`` and has no ``cwd`` starts in ``/``: its
  program is absolute or found in PATH, not a relative path such as ``bin/app``, which
  exec would look for as ``/bin/app`` (an app without a user starts in the owner's
  working directory, and its ``./app`` is found there, as docs/config.md says);
- ``limits.nofile`` leaves the app room to start (:data:`NOFILE_FLOOR`, plus the fds
  it is passed) and stays within ``fs.nr_open``;
- no wait an app or a job sets (readiness, health checks, backoff, start limit, a job's
  timeout) is longer than MAX_WAIT_S: a unit mistake (ms for s, 1e300) would hold an
  operation that waits for the app for ever. Checked here, not at parse, so a config
  applied before the bound parses as it did;
- no probe ``interval`` or ``timeout`` (readiness and health) is shorter than
  MIN_PROBE_S: ``interval = 1e-9`` ran a check back to back, an exec check hundreds of
  forks a second. Checked here for the same reason.

The owner checks identities and limits again when it launches (names may vanish in
between); this is the early, precise error. Reads the user and group databases.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from msgspec import Struct, structs

from .config import config_error
from .config_lines import KeyPath
from .model import MAX_STOP_WAIT_S, App, Config, Limits, RunAs, Settings, SocketSpec

__all__ = ["Host", "app_env", "app_uids", "check_config", "identity_view", "launch_fields",
           "user_env"]

_CONTROLLER = {"memory_max": "memory", "cpu_quota": "cpu", "pids_max": "pids"}
Fail = Callable[[KeyPath, str], NoReturn]


class Host(Struct, frozen=True):
    """The owner's and this backend's privileges."""

    owner_uid: int
    controllers: tuple[str, ...] | None  # None: no per-app cgroups
    backend_uid: int
    backend_gid: int
    backend_groups: frozenset[int]
    owner_nofile: int | None = None   # its RLIMIT_NOFILE; None: an owner that predates it

    @classmethod
    def of(cls, owner_status: Mapping[str, Any]) -> Host:
        """From the owner's ``status`` answer and this process's ids."""
        ctl = owner_status.get("cgroup_controllers")
        nofile = owner_status.get("nofile")
        return cls(owner_uid=int(owner_status.get("uid", os.geteuid())),
                   controllers=None if ctl is None else tuple(ctl),
                   backend_uid=os.geteuid(), backend_gid=os.getegid(),
                   backend_groups=frozenset(os.getgroups()),
                   owner_nofile=nofile if isinstance(nofile, int) and
                   not isinstance(nofile, bool) and nofile > 0 else None)

    @property
    def split(self) -> bool:
        """Owner as root, backend as another uid: system scope's privilege split."""
        return self.owner_uid == 0 and self.backend_uid != 0


def check_config(config: Config, text: str, host: Host) -> None:
    """Raises ConfigInvalid for the viewer group, then the first app, then the first job
    template (stacks and names in order) that cannot work on ``host``; see the module
    docstring."""
    def fail(path: KeyPath, problem: str) -> NoReturn:
        raise config_error(text, config.source, path, problem)

    viewers = _viewer_gid(config.settings, host, fail)
    _check_descriptors(config, host, fail)
    for app in config.apps():
        path: KeyPath = ("stacks", app.stack, "apps", app.name)
        _check_waits(_app_waits(app), path, fail)
        _check_run_as(app.run_as, "app", host, viewers, path, fail)
        _check_program_dir(app.command, app.cwd, app.run_as, "app", host, path, fail)
        _check_limits(app.limits, host, (*path, "limits"), fail,
                      passed=len(app.sockets) + app.fd_store_max)
        for sock in app.sockets:
            _check_socket_accounts(sock, host, (*path, "sockets", sock.name), fail)
    for job in config.jobs():
        path = ("stacks", job.stack, "jobs", job.name)
        _check_waits({("timeout",): job.timeout}, path, fail)
        _check_run_as(job.run_as, "job", host, viewers, path, fail)
        _check_program_dir(job.command, job.cwd, job.run_as, "job", host, path, fail)


FDS_PER_INSTANCE = 3
"""The owner's descriptors a running instance holds: its stdout and stderr pipes and
its pidfd (a socket it is given adds one more, and its fd store up to ``fd_store_max``
more: the owner keeps every stored fd open)."""
OWNER_FDS = 64
"""What the owner holds besides (its databases, sockets, journal; measured ~22)."""


def _check_descriptors(config: Config, host: Host, fail: Fail) -> None:
    """The owner can hold the files of every instance the config runs, and every fd
    their stores may keep: past its RLIMIT_NOFILE the launches beyond it failed 'Too
    many open files' one by one, each app then given up at its start limit, the plan
    having said nothing. (Was: the fd stores were not counted, and an app storing 240
    fds in an owner limited to 300 left no descriptor for the next launches.)"""
    if host.owner_nofile is None:
        return
    held = OWNER_FDS
    for app in config.apps():
        held += app.instances * (FDS_PER_INSTANCE + len(app.sockets) + app.fd_store_max)
        if held > host.owner_nofile:
            fail(("stacks", app.stack, "apps", app.name, "instances"),
                 f"the owner may hold {host.owner_nofile} open files (its RLIMIT_NOFILE) "
                 f"and each instance costs it about {FDS_PER_INSTANCE} (and one per "
                 "socket, and its fd_store_max: the owner holds every fd it stores): "
                 "this config needs more from here on; raise the owner's limit "
                 "(LimitNOFILE= in its unit, `ulimit -n` where `tenure up` runs) and start "
                 "it again, or run fewer instances or store fewer fds")


MAX_WAIT_S = MAX_STOP_WAIT_S
"""The longest wait a config may set, as for a stop: a week."""


def _app_waits(app: App) -> dict[KeyPath, float | None]:
    """Every wait ``app`` sets, by its key below the app."""
    waits: dict[KeyPath, float | None] = {
        ("ready", "delay"): app.ready.delay, ("ready", "timeout"): app.ready.timeout,
        ("ready", "interval"): app.ready.interval,
        ("backoff", "initial"): app.backoff.initial, ("backoff", "max"): app.backoff.max,
        ("backoff", "reset_after"): app.backoff.reset_after,
        ("start_limit", "interval"): app.start_limit.interval}
    if app.health is not None:
        waits.update({("health", k): getattr(app.health, k)
                      for k in ("interval", "timeout", "grace")})
    return waits


MIN_PROBE_S = 0.05
"""The shortest probe interval or timeout a config may set. A probe is repeated every
interval (a failed readiness probe, every health check), so a tiny one runs it back to
back: an exec check forked hundreds of times a second and took the backend's CPU. A
timeout that short fails every attempt before it could answer. 50 ms still allows 20
checks a second per instance, as fast as a check needs to run."""

_PROBE_WAITS = frozenset({("ready", "interval"), ("ready", "timeout"),
                          ("health", "interval"), ("health", "timeout")})


def _check_waits(waits: Mapping[KeyPath, float | None], path: KeyPath, fail: Fail) -> None:
    for key, seconds in waits.items():
        if seconds is not None and seconds > MAX_WAIT_S:
            fail((*path, *key), f"must be at most {MAX_WAIT_S:g} s (a week), not "
                 f"{seconds:g}")
        if seconds is not None and key in _PROBE_WAITS and seconds < MIN_PROBE_S:
            fail((*path, *key), f"must be at least {MIN_PROBE_S:g} s (the shortest probe "
                 f"interval or timeout), not {seconds:g}")


def _check_socket_accounts(sock: SocketSpec, host: Host, path: KeyPath, fail: Fail) -> None:
    """A unix socket's ``owner`` and ``group`` name accounts of this host that the owner
    can give the socket file to: another user only when it runs as root, a group it is
    in otherwise (what chown(2) allows)."""
    if sock.owner is not None:
        uid = _passwd(sock.owner, (*path, "owner"), fail).pw_uid
        if host.owner_uid != 0 and uid != host.owner_uid:
            fail((*path, "owner"), f"the owner runs as uid {host.owner_uid}, not root, so it "
                 f"cannot give the socket to {sock.owner!r} (uid {uid})")
    if sock.group is not None:
        gid = _gid(sock.group, (*path, "group"), fail)
        if host.owner_uid != 0 and gid not in {host.backend_gid, *host.backend_groups}:
            fail((*path, "group"), f"the owner runs as uid {host.owner_uid}, not root, and "
                 f"is not in group {sock.group!r}, so it cannot give the socket to it")


def _passwd(name: str, path: KeyPath, fail: Fail) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        fail(path, f"unknown user {name!r} (no such user on this host)")


def _gid(name: str, path: KeyPath, fail: Fail) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        fail(path, f"unknown group {name!r} (no such group on this host)")


def _check_run_as(ra: RunAs, what: str, host: Host, viewers: int | None, path: KeyPath,
                  fail: Fail) -> None:
    """The identity of an app or job template (``what``) at ``path``."""
    if ra.user is None:
        if host.split:
            fail((*path, "user"), f"is required: the owner runs as root, so this {what} "
                 "would run as root; name the user it runs as (user = \"root\" if that is "
                 "meant)")
    else:
        pw = _passwd(ra.user, (*path, "user"), fail)
        gid = pw.pw_gid if ra.group is None else _gid(ra.group, (*path, "group"), fail)
        extra = [_gid(g, (*path, "supplementary_groups", i), fail)
                 for i, g in enumerate(ra.supplementary_groups)]
        _check_user(pw, {*os.getgrouplist(pw.pw_name, gid), *extra}, host, viewers,
                    (*path, "user"), fail)


def _check_user(pw: pwd.struct_passwd, groups: set[int], host: Host, viewers: int | None,
                path: KeyPath, fail: Fail) -> None:
    if host.owner_uid != 0 and pw.pw_uid != host.owner_uid:
        fail(path, f"the owner runs as uid {host.owner_uid}, not root, so it cannot start "
             f"apps as {pw.pw_name!r} (uid {pw.pw_uid}); in user scope every app runs as "
             "the user tenure runs as")
    if host.split and pw.pw_uid == host.backend_uid:
        fail(path, f"{pw.pw_name!r} is tenure's service account: an app running as it "
             "could use the control plane")
    if host.split and host.backend_gid in groups:
        fail(path, f"{pw.pw_name!r} would be in group {host.backend_gid}, the service "
             "account's, which reaches the owner's socket")
    # an app running as the admin itself (user scope: every app runs as you) could use
    # the API as the admin anyway: the viewer group gives it nothing more, and an app
    # without a user is not refused either
    admin = not host.split and pw.pw_uid == host.backend_uid
    if viewers is not None and viewers in groups and not admin:
        fail(path, f"{pw.pw_name!r} would be in the viewer group: apps are refused on "
             "every socket, so they cannot be viewers")


NR_OPEN = "/proc/sys/fs/nr_open"


def _nr_open() -> int | None:
    """The most descriptors the kernel lets a process have (fs.nr_open), or None."""
    try:
        with open(NR_OPEN, "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _check_program_dir(command: tuple[str, ...], cwd: str | None, ra: RunAs, what: str,
                       host: Host, path: KeyPath, fail: Fail) -> None:
    """A relative program with a '/' is found from where the process starts, which for
    an app switched to its user without a ``cwd`` is ``/`` (owner.runas.start_dir): not
    where the config was written. (Was: it ran when the app had a socket, failed
    otherwise, and the failure blamed the script's #! line.)"""
    program = command[0]
    if "/" not in program or os.path.isabs(program) or cwd is not None:
        return
    if ra.user is None or host.owner_uid != 0:
        return   # no switch: it starts in the owner's working directory, as documented
    fail((*path, "command", 0), f"is the relative path {program!r}, and this {what} runs "
         f"as {ra.user!r} without a cwd, so it starts in / and exec would look for "
         f"{os.path.join('/', program)!r}: give an absolute path or a cwd")


NOFILE_FLOOR = 16
"""The fewest open files an app's program needs to start at all, besides the fds it is
passed: 0-2 (stdio); one through which the dynamic loader opens each shared library
(it closes each once mapped: a plain binary starts with 4); the few a wrapper script or
an interpreter holds as it starts (a shell shim in front of python3 needed 6); and a
margin for what a program opens before it could report anything. With ``nofile = 3``
every exec failed 'error while loading shared libraries ... Error 24' (exit 127) until
the start limit gave up, the plan having accepted it."""


def _check_limits(limits: Limits, host: Host, path: KeyPath, fail: Fail,
                  passed: int = 0) -> None:
    """``passed``: the fds the app is handed at 3.. (its sockets and its fd store)."""
    if limits.nofile is not None:
        most = _nr_open()
        if most is not None and not 0 <= limits.nofile <= most:
            fail((*path, "nofile"), f"must be at most {most} on this host (fs.nr_open: "
                 f"the kernel refuses more open files, \"infinity\" included)")
        floor = NOFILE_FLOOR + passed
        if 0 <= limits.nofile < floor:
            fail((*path, "nofile"), f"is {limits.nofile}, below {floor}, the fewest files "
                 f"the app needs to start: {NOFILE_FLOOR} for its stdio and the libraries "
                 "its program loads, plus one per socket and its fd_store_max")
    for key, value in structs.asdict(limits).items():
        if value is None or key not in _CONTROLLER:
            continue
        if host.controllers is None:
            fail((*path, key), "needs per-app cgroups, and the owner tracks apps by process "
                 "group (no delegated cgroup: run it under systemd, Delegate=yes)")
        if _CONTROLLER[key] not in host.controllers:
            fail((*path, key), f"needs the {_CONTROLLER[key]} controller, which the owner's "
                 f"cgroup does not have (it has: {' '.join(host.controllers) or 'none'})")


def _viewer_gid(settings: Settings, host: Host, fail: Fail) -> int | None:
    name = settings.viewer_group
    if name is None:
        return None
    path: KeyPath = ("settings", "viewer_group")
    gid = _gid(name, path, fail)
    if host.backend_uid != 0 and gid not in {host.backend_gid, *host.backend_groups}:
        who = _user_name(host.backend_uid)
        fail(path, f"the backend runs as {who}, which is not a member of group {name!r}, "
             f"so it cannot give the group the API socket; add it (usermod -aG {name} "
             f"{who}) and restart tenure.service")
    return gid


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


# -- what the owner is asked for, and what inspect shows ------------------------------


def launch_fields(app: App) -> dict[str, Any]:
    """The ``identity`` and ``limits`` launch parameters of ``app`` (only when set)."""
    out: dict[str, Any] = {}
    identity, limits = app.run_as.to_wire(), app.limits.to_wire()
    if identity:
        out["identity"] = identity
    if limits:
        out["limits"] = limits
    return out


def app_env(base: Mapping[str, str], app: App) -> dict[str, str]:
    """The environment of ``app`` before tenure's own variables: ``base`` (inherited from
    the backend), then HOME, USER and LOGNAME of the app's user when it names one, then
    the app's own ``env`` (which wins)."""
    return user_env(base, app.run_as.user, app.env)


def user_env(base: Mapping[str, str], user: str | None, env: Mapping[str, str]
             ) -> dict[str, str]:
    """``base``, then HOME, USER and LOGNAME of ``user`` (when named and known), then
    ``env`` (which wins): the environment of an app or a job before tenure's own
    variables."""
    out = dict(base)
    if user is not None:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            pass  # the owner refuses the launch with the reason
        else:
            out.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)
    out.update(env)
    return out


def app_uids(config: Config) -> frozenset[int]:
    """The uids the apps and job templates of ``config`` run as (names that resolve
    now): refused on the API socket."""
    uids = set()
    users = [a.run_as.user for a in config.apps()] + [j.run_as.user for j in config.jobs()]
    for user in users:
        if user is not None:
            try:
                uids.add(pwd.getpwnam(user).pw_uid)
            except KeyError:
                continue
    return frozenset(uids)


def identity_view(app: App) -> dict[str, Any]:
    """``identity`` and ``limits`` for ``tenure inspect``: what is configured, and the
    ids the names resolve to now."""
    ra = app.run_as
    view: dict[str, Any] = {"user": ra.user, "group": ra.group,
                            "supplementary_groups": list(ra.supplementary_groups),
                            "umask": None if ra.umask is None else f"{ra.umask:04o}"}
    if ra.user is None:
        view["resolved"] = _own_ids()
        return {"identity": view, "limits": app.limits.to_wire()}
    try:
        pw = pwd.getpwnam(ra.user)
        gid = pw.pw_gid if ra.group is None else grp.getgrnam(ra.group).gr_gid
        extra = [grp.getgrnam(g).gr_gid for g in ra.supplementary_groups]
    except KeyError:
        view["resolved"] = None  # a name vanished: the next launch fails
    else:
        groups = list(dict.fromkeys([*os.getgrouplist(pw.pw_name, gid), *extra]))
        view["resolved"] = {"uid": pw.pw_uid, "gid": gid, "groups": groups,
                            "home": pw.pw_dir}
    return {"identity": view, "limits": app.limits.to_wire()}


def _own_ids() -> dict[str, Any]:
    """The ids an app without a ``user`` runs with: the owner's, which are this
    process's (every tenure daemon of a home runs as the same user); ``home`` None when
    the uid has no passwd entry."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        home: str | None = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = None
    return {"uid": uid, "gid": gid, "groups": list(dict.fromkeys([gid, *os.getgroups()])),
            "home": home}
