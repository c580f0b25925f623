"""Supervision plans: prepare (no OS change) → operator review → install exactly that plan.

``prepare`` renders both services into the plan directory (``/etc/tenure/supervision-plan``
in system scope, ``<home>/runtime/supervision-plan`` in user scope): the unit files
(or plists), ``environment.json`` (the private environment record, 0600) and ``plan.json``
(format version, scope, target paths, sha256 of every file). It writes nothing else.

``install`` trusts no path: the plan directory and every file in it must be private
files of ours; in system scope the plan lives in a root-owned directory outside the
service account's home (``/etc/tenure``, units.trust), every directory above it must be
changeable by root alone, and the operator passes the plan's ``digest`` (printed by
prepare) so a plan other than the reviewed one is refused. Every target must lie in the
scope's unit directory. It then re-reads the plan, verifies every file's sha256 (a
modified plan is refused with StateCorrupt), refuses with ServiceActive unless both units
are inactive with no queued job and no unmanaged owner/guardian/backend answers on a
socket under the home, then writes the unit files atomically, ``daemon-reload`` and
``enable``; in system scope it records the installation (home, service account) for
the CLI. It never starts
and never stops anything: starting is the operator's explicit next step, and stopping a
running owner would stop every application. launchd plans are written the same way; a
plist in LaunchAgents/LaunchDaemons is loaded at the next login/boot, the launchd analogue
of ``enable``; ``launchctl bootstrap`` is left to the operator.

``uninstall`` removes only what tenure wrote: unit files whose bytes are the plan's (or
carry tenure's header line), the installation record of this home and the plan
directory; anything else at those paths is left in place and reported.

Invariant: between the checks and the writes nothing here is started or stopped; the
refusals are the whole protection against replacing the files under a running service.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import platform
import pwd
import socket
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from protocol.durable import atomic_write, atomic_write_json, read_json, read_private
from protocol.errors import (
    BadRequest,
    Conflict,
    ServiceActive,
    ServiceError,
    StateCorrupt,
    UnsafePath,
)

from .model import (
    GUARDIAN_UNIT,
    OWNER_UNIT,
    Installation,
    Manager,
    Scope,
    default_target_dir,
    services,
)
from .render import HEADER, plist_name, render_launchd, render_systemd
from .trust import (
    check_plan_files,
    check_trusted_chain,
    ensure_trusted_dir,
    read_record,
    write_record,
)

__all__ = ["PLAN_FORMAT", "Plan", "PlannedFile", "Removal", "Systemctl", "SystemctlLike",
           "install", "live_sockets", "load_plan", "prepare", "status", "uninstall"]

PLAN_KIND = "tenure-supervision-plan"
ENV_KIND = "tenure-environment-record"
PLAN_FORMAT = 1
PLAN_FILE = "plan.json"
ENV_FILE = "environment.json"
UNITS = (OWNER_UNIT, GUARDIAN_UNIT)
STATUS_PROPS = ("LoadState", "UnitFileState", "ActiveState", "SubState", "MainPID",
                "NRestarts", "ExecMainStatus")
IDLE_STATES = frozenset({"inactive", "failed"})
SOCKETS = ("execution/owner.sock", "runtime/guardian.sock", "backend/api.sock")
TARGET_MODE = 0o644  # the service manager reads unit files; they hold no secrets
HEADER_LINE = (HEADER + "\n").encode()  # the first line of every unit tenure renders


class SystemctlLike(Protocol):
    """The seam between install logic and the service manager (fake: units.testing)."""

    @property
    def scope(self) -> Scope: ...

    def run(self, *args: str) -> str:
        """Run ``systemctl [--user] ARGS``; return stdout. Raises ServiceError."""
        ...

    def show(self, unit: str, props: Sequence[str]) -> dict[str, str]:
        """``systemctl show -p P... UNIT`` as a dict. Raises ServiceError."""
        ...


class Systemctl:
    """``subprocess.run(["systemctl", ("--user"), ...])`` with a timeout."""

    def __init__(self, scope: Scope, *, timeout: float = 30.0,
                 binary: str = "systemctl") -> None:
        self._scope = scope
        self.timeout = timeout
        self.binary = binary

    @property
    def scope(self) -> Scope:
        return self._scope

    def run(self, *args: str) -> str:
        """Raises ServiceError (missing binary, timeout, non-zero exit with its stderr)."""
        argv = [self.binary, *(["--user"] if self._scope is Scope.USER else []), *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ServiceError(f"{self.binary} not found", {"argv": argv}) from None
        except subprocess.TimeoutExpired:
            raise ServiceError(f"{' '.join(argv)} timed out after {self.timeout} s",
                               {"argv": argv}) from None
        if done.returncode != 0:
            err = done.stderr.strip()[-2000:]
            raise ServiceError(f"{' '.join(argv)} failed ({done.returncode}): {err}",
                               {"argv": argv, "returncode": done.returncode, "stderr": err})
        return done.stdout

    def show(self, unit: str, props: Sequence[str]) -> dict[str, str]:
        """Raises ServiceError."""
        out = self.run("show", *(f"--property={p}" for p in props), "--", unit)
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@dataclass(frozen=True)
class PlannedFile:
    name: str
    target: Path
    sha256: str


@dataclass(frozen=True)
class Plan:
    """A prepared plan as recorded in ``plan.json``."""

    plan_dir: Path
    scope: Scope
    manager: Manager
    home: Path
    units: tuple[str, ...]
    files: tuple[PlannedFile, ...]
    environment_sha256: str
    environment: tuple[tuple[str, str], ...]

    @property
    def digest(self) -> str:
        """sha256 of the canonical plan.json, which holds every file's sha256: the one
        value an operator reviews and hands to ``install`` (``--digest``)."""
        canon = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return _sha256(canon.encode())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": PLAN_KIND, "format": PLAN_FORMAT, "scope": str(self.scope),
            "manager": str(self.manager), "home": str(self.home), "units": list(self.units),
            "files": [{"name": f.name, "target": str(f.target), "sha256": f.sha256}
                      for f in self.files],
            "environment_record": {"name": ENV_FILE, "sha256": self.environment_sha256},
            "environment": dict(self.environment),
        }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rendered(inst: Installation) -> dict[str, bytes]:
    """File name → content for ``inst``'s manager. Raises BadRequest."""
    specs = services(inst)
    if inst.manager is Manager.LAUNCHD:
        return {plist_name(s): render_launchd(s) for s in specs}
    return {s.name: render_systemd(s).encode() for s in specs}


def _installed_names(inst: Installation) -> dict[str, bytes | None]:
    """File name → what tenure renders for ``inst`` now, or None for each when it
    cannot be rendered (an interpreter path systemd refuses, say: an uninstall needs no
    rendering, the plan's digests and tenure's header line tell its files)."""
    try:
        return dict(_rendered(inst))
    except BadRequest:
        specs = services(inst)
        return {plist_name(s) if inst.manager is Manager.LAUNCHD else s.name: None
                for s in specs}


def _environment_record(inst: Installation) -> bytes:
    record = {
        "kind": ENV_KIND, "format": 1, "scope": str(inst.scope), "manager": str(inst.manager),
        "home": str(inst.home), "python": str(inst.python),
        "python_version": platform.python_version(), "user": inst.user, "group": inst.group,
        "prepared_by_uid": os.geteuid(),
        "services": {s.name: {"exec_start": list(s.exec_start), "environment": s.env}
                     for s in services(inst)},
    }
    return (json.dumps(record, sort_keys=True, indent=1) + "\n").encode()


def prepare(inst: Installation, plan_dir: Path | None = None) -> Plan:
    """Write a reviewable plan to ``plan_dir`` (default ``inst.plan_dir``); no OS changes.

    Creates missing directories 0700 (on system scope as root, a newly created home or
    ``runtime/`` is handed to the service account, which owns them). Raises BadRequest
    (unrenderable value, unknown service account), UnsafePath (symlink or foreign plan
    directory).
    """
    pdir = Path(os.path.abspath(plan_dir or inst.plan_dir))
    rendered = _rendered(inst)
    env_bytes = _environment_record(inst)
    if inst.scope is Scope.SYSTEM:
        _make_home(inst)
        ensure_trusted_dir(pdir.parent)  # root's, outside the service account's home
        with contextlib.suppress(FileExistsError):
            os.mkdir(pdir, 0o700)
        check_plan_files(pdir)
    else:
        _make_plan_dir(inst, pdir)
    files = []
    for name, data in rendered.items():
        atomic_write(pdir / name, data, 0o600)
        files.append(PlannedFile(name, inst.target_dir / name, _sha256(data)))
    atomic_write(pdir / ENV_FILE, env_bytes, 0o600)
    owner = services(inst)[0]
    plan = Plan(pdir, inst.scope, inst.manager, inst.home, UNITS, tuple(files),
                _sha256(env_bytes), owner.environment)
    atomic_write_json(pdir / PLAN_FILE, plan.to_json(), 0o600)  # written last: the commit
    return plan


def _make_plan_dir(inst: Installation, pdir: Path) -> None:
    """mkdir the chain from the home (or the leaf only, outside the home). Raises
    UnsafePath for a symlink/non-directory or a plan dir not private to us."""
    home = inst.home
    chain = [pdir]
    if pdir.is_relative_to(home):
        chain = [home, *(home.joinpath(*pdir.relative_to(home).parts[:i + 1])
                         for i in range(len(pdir.relative_to(home).parts)))]
    for d in chain:
        if _mkdir_private(d) and d in (home, home / "runtime"):
            _hand_over(inst, d)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{d} is a symlink or not a directory", {"path": str(d)})
    st = os.lstat(pdir)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UnsafePath(f"{pdir} must be a 0700 directory owned by uid {os.geteuid()}",
                         {"path": str(pdir)})


def _make_home(inst: Installation) -> None:
    """System scope: create a missing home and runtime/ (0700), handed to the service
    account. Raises BadRequest (no such account), UnsafePath (not a directory)."""
    for d in (inst.home, inst.home / "runtime"):
        if _mkdir_private(d):
            _hand_over(inst, d)
        elif not stat.S_ISDIR(os.lstat(d).st_mode):
            raise UnsafePath(f"{d} is a symlink or not a directory", {"path": str(d)})


def _mkdir_private(d: Path) -> bool:
    """mkdir ``d`` 0700; False when something is there already. Prepare creates the home
    and what is below it, never the directories above it (whose owner and mode are the
    operator's to choose). Raises UnsafePath when its parent is missing or not a
    directory."""
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        return False
    except (FileNotFoundError, NotADirectoryError):
        raise UnsafePath(f"{d.parent} does not exist or is not a directory: create it "
                         f"first, or name another home (--home)",
                         {"path": str(d.parent)}) from None
    return True


def _hand_over(inst: Installation, d: Path) -> None:
    """chown a directory prepare created to the service account (system scope, as root).
    Raises BadRequest when the account does not exist."""
    if inst.scope is not Scope.SYSTEM or os.geteuid() != 0:
        return
    assert inst.user is not None and inst.group is not None  # Installation checks this
    try:
        uid = pwd.getpwnam(inst.user).pw_uid
        gid = grp.getgrnam(inst.group).gr_gid
    except KeyError:
        raise BadRequest(f"service account {inst.user}:{inst.group} does not exist; create "
                         "it before preparing a system-scope plan",
                         {"user": inst.user, "group": inst.group}) from None
    os.chown(d, uid, gid)


def load_plan(plan_dir: Path) -> Plan:
    """Read ``plan.json`` and verify every listed file. Raises FileNotFoundError (no plan),
    UnsafePath, StateCorrupt (unknown format, wrong target, modified or missing file)."""
    plan = _parse_plan(Path(plan_dir))
    _read_verified(plan)
    return plan


def _trusted_plan(pdir: Path, digest: str | None, target_dir: Path | None) -> Plan:
    """The plan in ``pdir``, only if it is the one the operator reviewed and can be
    trusted: the directory and every file in it are ours and private; in system scope
    the directories above it are root's alone and ``digest`` is required and must equal
    the plan's; every target lies in ``target_dir`` (default: the scope's own unit
    directory). Raises UnsafePath, StateCorrupt, BadRequest (no digest)."""
    check_plan_files(pdir)
    plan = _parse_plan(pdir)
    if plan.scope is Scope.SYSTEM:
        check_trusted_chain(pdir.parent)
        if digest is None:
            raise BadRequest("a system-scope install needs the digest of the plan you "
                             "reviewed (tenure service install --digest DIGEST)")
    if digest is not None and digest != plan.digest:
        raise StateCorrupt(f"{pdir} is not the plan that was reviewed (digest "
                           f"{plan.digest[:16]}..., expected {digest[:16]}...); prepare and "
                           "review it again", {"path": str(pdir), "digest": plan.digest})
    pinned = Path(os.path.abspath(target_dir or default_target_dir(plan.scope, plan.manager)))
    strays = [str(f.target) for f in plan.files if f.target.parent != pinned]
    if strays:
        raise StateCorrupt(f"the plan targets {strays}, outside {pinned}; prepare and "
                           "review it again", {"path": str(pdir), "targets": strays})
    return plan


def _parse_plan(pdir: Path) -> Plan:
    raw = read_json(pdir / PLAN_FILE, PLAN_KIND, (PLAN_FORMAT,))
    try:
        scope, manager = Scope(raw["scope"]), Manager(raw["manager"])
        files = tuple(PlannedFile(str(f["name"]), Path(f["target"]), str(f["sha256"]))
                      for f in raw["files"])
        plan = Plan(pdir, scope, manager, Path(raw["home"]), tuple(raw["units"]), files,
                    str(raw["environment_record"]["sha256"]),
                    tuple(sorted(dict(raw["environment"]).items())))
    except (KeyError, TypeError, ValueError) as exc:
        raise StateCorrupt(f"{pdir / PLAN_FILE} is malformed: {exc!r}",
                           {"path": str(pdir / PLAN_FILE)}) from None
    _check_shape(plan)
    return plan


def _check_shape(plan: Plan) -> None:
    """Only tenure's own files, each targeting ``<absolute dir>/<its own name>``."""
    names = {f.name for f in plan.files}
    expected = ({"dev.tenure.owner.plist", "dev.tenure.guardian.plist"}
                if plan.manager is Manager.LAUNCHD else set(UNITS))
    bad_target = [f.name for f in plan.files
                  if not f.target.is_absolute() or f.target.name != f.name]
    if (names != expected or len(plan.files) != len(expected) or bad_target
            or set(plan.units) != set(UNITS) or not plan.home.is_absolute()):
        raise StateCorrupt(f"{plan.plan_dir / PLAN_FILE} does not describe tenure's "
                           f"services (files {sorted(names)}, bad targets {bad_target})",
                           {"path": str(plan.plan_dir / PLAN_FILE)})


def _read_verified(plan: Plan) -> dict[str, bytes]:
    """Each planned file's bytes, read once and checked against plan.json."""
    out: dict[str, bytes] = {}
    wanted = [(f.name, f.sha256) for f in plan.files]
    for name, digest in [*wanted, (ENV_FILE, plan.environment_sha256)]:
        path = plan.plan_dir / name
        try:
            data = read_private(path, owners=(os.geteuid(),))
        except FileNotFoundError:
            raise StateCorrupt(f"{path} is missing from the plan", {"path": str(path)}) from None
        if _sha256(data) != digest:
            raise StateCorrupt(f"{path} was modified after the plan was prepared; prepare "
                               "and review it again", {"path": str(path)})
        out[name] = data
    return out


def _controller(scope: Scope, ctl: SystemctlLike | None) -> SystemctlLike:
    if ctl is None:
        return Systemctl(scope)
    if ctl.scope is not scope:
        raise BadRequest(f"a {ctl.scope} systemctl cannot manage a {scope} installation")
    return ctl


def live_sockets(home: Path) -> list[str]:
    """Sockets under ``home`` that answer a connect (or cannot be proven silent)."""
    live = []
    for rel in SOCKETS:
        path = home / rel
        if not os.path.lexists(path):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            try:
                s.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                continue
            except OSError as exc:  # EACCES, timeout, too long: cannot prove it idle
                live.append(f"{path} ({exc})")
                continue
            live.append(str(path))
    return live


def _refuse_busy(home: Path, ctl: SystemctlLike | None) -> None:
    """Raises ServiceActive when a unit is not idle or has a queued job, or a tenure
    daemon answers under ``home``; ServiceError when systemctl fails."""
    busy = {}
    if ctl is not None:
        for unit in UNITS:
            props = ctl.show(unit, ("ActiveState", "Job"))
            state, job = props.get("ActiveState", ""), props.get("Job", "")
            if state not in IDLE_STATES or job not in ("", "0"):
                busy[unit] = f"ActiveState={state or '?'} Job={job or 'none'}"
    live = live_sockets(home)
    if busy or live:
        raise ServiceActive(
            "tenure is running or has a queued job; stop it explicitly first (this "
            f"command never stops anything): units {busy or 'idle'}, sockets {live or 'none'}",
            {"units": busy, "sockets": live})


def install(plan_dir: Path, *, systemctl: SystemctlLike | None = None,
            digest: str | None = None, target_dir: Path | None = None,
            record: Path | None = None) -> Plan:
    """Install exactly the plan in ``plan_dir``: verify (see :func:`_trusted_plan`), check
    idle, write, daemon-reload, enable (never start); in system scope then write the
    installation record to ``record`` (default: beside the plan directory).

    Raises StateCorrupt (modified, retargeted or not the reviewed plan), UnsafePath
    (a plan directory, file or parent another user could change), ServiceActive,
    ServiceError (systemctl failed), BadRequest (systemctl of the other scope; no
    digest in system scope)."""
    pdir = Path(os.path.abspath(plan_dir))
    plan = _trusted_plan(pdir, digest, target_dir)
    contents = _read_verified(plan)
    ctl = _controller(plan.scope, systemctl) if plan.manager is Manager.SYSTEMD else None
    _refuse_busy(plan.home, ctl)
    for f in plan.files:
        f.target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        atomic_write(f.target, contents[f.name], TARGET_MODE)
    if ctl is not None:
        ctl.run("daemon-reload")
        ctl.run("enable", *plan.units)
    if plan.scope is Scope.SYSTEM:
        account = json.loads(contents[ENV_FILE])
        write_record(record or pdir.parent / "installation.json", scope=str(plan.scope),
                     home=plan.home, user=str(account.get("user")),
                     group=str(account.get("group")))
    return plan


def status(inst: Installation, *, systemctl: SystemctlLike | None = None
           ) -> dict[str, dict[str, str]]:
    """``systemctl show`` properties (STATUS_PROPS) of both units. Raises ServiceError
    (systemctl failed, or a launchd installation: use ``launchctl print``)."""
    if inst.manager is not Manager.SYSTEMD:
        raise ServiceError("status reads systemd; for launchd run "
                           "`launchctl print gui/$UID/dev.tenure.owner` (or system/...)")
    ctl = _controller(inst.scope, systemctl)
    return {unit: ctl.show(unit, STATUS_PROPS) for unit in UNITS}


@dataclass(frozen=True)
class Removal:
    """What :func:`uninstall` did: the files (and plan directory) it removed, and the
    paths it left in place, each with why."""

    removed: tuple[Path, ...]
    left: tuple[tuple[Path, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"removed": [str(p) for p in self.removed],
                "left": [{"path": str(p), "reason": why} for p, why in self.left]}


def uninstall(inst: Installation, *, systemctl: SystemctlLike | None = None) -> Removal:
    """Disable and remove the service files tenure installed, daemon-reload, then remove
    the installation record of this home (system scope) and the plan directory.

    A file at a target path that tenure did not write (:func:`_foreign`) is neither
    disabled nor removed; it is listed in ``Removal.left`` with why, as is a record of
    another home or a plan directory holding files tenure did not write. Raises
    Conflict (the installed plan or record names another home: nothing changed),
    ServiceActive (a unit active/with a job, or a live socket), UnsafePath (a target that
    is a symlink or not a regular file), ServiceError (systemctl failed).
    """
    ctl = _controller(inst.scope, systemctl) if inst.manager is Manager.SYSTEMD else None
    plan = _installed_plan(inst.plan_dir)
    _refuse_other_home(inst, plan)
    _refuse_busy(inst.home, ctl)
    planned = {} if plan is None else {f.name: f.sha256 for f in plan.files}
    names = _installed_names(inst)
    ours: list[Path] = []
    left: list[tuple[Path, str]] = []
    for name, rendered in names.items():
        target = inst.target_dir / name
        if _regular_or_absent(target):
            why = _foreign(target, planned.get(name), rendered)
            if why is None:
                ours.append(target)
            else:
                left.append((target, why))
    if ctl is not None and ours:
        ctl.run("disable", *(t.name for t in ours))
    for t in ours:
        os.unlink(t)
    if ctl is not None:
        ctl.run("daemon-reload")
    removed = [*ours, *_remove_record(inst, left), *_remove_plan_dir(inst, names, left)]
    if inst.scope is Scope.SYSTEM:
        with contextlib.suppress(OSError):   # /etc/tenure, when nothing else is in it
            os.rmdir(inst.plan_root)
    return Removal(tuple(removed), tuple(left))


def _refuse_other_home(inst: Installation, plan: Plan | None) -> None:
    """Raises Conflict, before anything is touched, when the installed ``plan`` or the
    installation record names another home than ``inst``'s: its units and plan would be
    removed and its record kept (a system install made without --home before the system
    default became /var/lib/tenure, uninstalled after). Unreadable ones say nothing here
    (the removal says why it leaves them)."""
    homes = set() if plan is None else {str(plan.home)}
    if inst.scope is Scope.SYSTEM:
        with contextlib.suppress(StateCorrupt, UnsafePath):
            record = read_record(inst.record_path)
            if record is not None:
                homes.add(str(record.get("home")))
    other = sorted(homes - {str(inst.home)})
    if other:
        raise Conflict(f"the installed service is for home {other[0]}, not {inst.home}: "
                       f"nothing was changed; uninstall it with --home {other[0]}",
                       {"installed_home": other[0], "home": str(inst.home)})


def _installed_plan(pdir: Path) -> Plan | None:
    """The plan in ``pdir`` (the one installed, unless prepared again since); None when
    there is none or it is unreadable."""
    try:
        return _parse_plan(pdir)
    except (OSError, StateCorrupt, UnsafePath):
        return None


def _foreign(target: Path, planned: str | None, rendered: bytes | None) -> str | None:
    """Why the regular file ``target`` is not one tenure installed, or None when it is:
    its bytes are the plan's file, what tenure renders for this installation now, or (a
    systemd unit) begin with tenure's header line (tenure's unit for another interpreter
    or an earlier release)."""
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    if data == rendered or _sha256(data) == planned or data.startswith(HEADER_LINE):
        return None
    return ("not written by tenure (neither the installed plan's file nor a file with "
            "tenure's header line): left in place, neither disabled nor removed")


def _remove_record(inst: Installation, left: list[tuple[Path, str]]) -> list[Path]:
    """System scope: remove the installation record when it is this home's; else say in
    ``left`` why it stays."""
    path = inst.record_path
    if inst.scope is not Scope.SYSTEM:
        return []
    try:
        record = read_record(path)
    except (UnsafePath, StateCorrupt) as exc:
        left.append((path, f"not removed: {exc.msg}"))
        return []
    if record is None:
        return []
    if record.get("home") != str(inst.home):
        left.append((path, f"records another home ({record.get('home')}): not removed"))
        return []
    os.unlink(path)
    return [path]


def _remove_plan_dir(inst: Installation, units: Mapping[str, object],
                     left: list[tuple[Path, str]]) -> list[Path]:
    """Remove the plan directory prepare wrote (plan.json first: a half-removed plan is
    no plan; ``units``: the names of the files it may hold beside it); else say in
    ``left`` why it stays."""
    pdir = inst.plan_dir
    try:
        check_plan_files(pdir)
    except FileNotFoundError:
        return []
    except UnsafePath as exc:
        left.append((pdir, f"not removed: {exc.msg}"))
        return []
    names = sorted(os.listdir(pdir), key=lambda n: n != PLAN_FILE)
    extra = set(names) - {PLAN_FILE, ENV_FILE, *units}
    if extra:
        left.append((pdir, f"holds files tenure did not write ({sorted(extra)}): not "
                     "removed"))
        return []
    for name in names:
        os.unlink(pdir / name)
    os.rmdir(pdir)
    return [*(pdir / n for n in names), pdir]


def _regular_or_absent(path: Path) -> bool:
    """True for a regular file, False when absent. Raises UnsafePath otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is a symlink or not a regular file; not removing it",
                         {"path": str(path)})
    return True
