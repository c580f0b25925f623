"""The service model: what tenure asks of systemd (or launchd), as plain frozen data.

``services(installation)`` is the one place the supervision policy lives; the renderers in
:mod:`units.render` only translate it. The policy, and why (docs/service.md has the long
form):

- ``tenure-owner`` is the parent of every application. Stopping it is a maintenance step:
  it stops the apps itself (SIGTERM → staged shutdown with each app's own stop policy →
  clean receipt). So systemd signals only the owner's main process (``KillMode=process``)
  and never SIGKILLs what is left after the stop timeout (``SendSIGKILL=no``): leftovers
  stay for ``python -m owner reconcile``. ``Delegate=yes`` lets the owner make one cgroup
  per app. It is never restarted automatically (``Restart=no``): a crashed owner leaves a
  ``running`` receipt that must be reconciled first. ``OOMPolicy=continue``: an app killed
  by the kernel OOM killer must not make systemd stop the owner (the default ``stop``).
- ``tenure`` (the guardian) runs backend generations as its own children and is restarted
  whenever it exits (``Restart=always``, 1 s). It is ordered after the owner, but
  neither wants, requires nor binds to it: restarting one never starts or restarts the
  other, so a guardian restart cannot touch apps, an owner maintenance window does not
  bounce the guardian, and a guardian restarted during the window does not start the
  owner (and every stack) again. Both units are enabled, so boot starts both.
  ``KillMode=mixed``: systemd signals only the guardian, which asks its backend for a
  fresh recovery certificate and retires it before it exits; whatever is left in its
  cgroup (only backends, never apps) is SIGKILLed once it is gone.
- System scope splits privileges: the owner runs as root (``User=root``: it starts each
  app as the user its config names and manages cgroups) and admits only root and the
  service account (``--service-account``) on its socket; the guardian and its backends
  run as the service account (``User=``/``Group=``, default ``tenure``). Units carry only
  the instance path (``TENURE_HOME``) in the environment: never secrets.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from protocol.errors import BadRequest

__all__ = [
    "GUARDIAN_LABEL",
    "GUARDIAN_UNIT",
    "OWNER_LABEL",
    "OWNER_UNIT",
    "Installation",
    "Manager",
    "Scope",
    "ServiceSpec",
    "default_target_dir",
    "services",
]

OWNER_UNIT = "tenure-owner.service"
GUARDIAN_UNIT = "tenure.service"
OWNER_LABEL = "dev.tenure.owner"
GUARDIAN_LABEL = "dev.tenure.guardian"

_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
SYSTEM_CONFIG_DIR = Path("/etc/tenure")


class Scope(StrEnum):
    """Which service manager instance runs tenure. Stored in plan.json; never changes."""

    USER = "user"
    SYSTEM = "system"


class Manager(StrEnum):
    """Which init system the files are for. Stored in plan.json; never changes."""

    SYSTEMD = "systemd"
    LAUNCHD = "launchd"


@dataclass(frozen=True)
class ServiceSpec:
    """One supervised service, independent of the init system that renders it.

    ``name`` is the systemd unit name (``tenure-owner.service``), ``label`` the launchd
    label. ``environment`` is an ordered tuple of (KEY, value) pairs so specs stay hashable
    and rendering stays deterministic.
    """

    name: str
    label: str
    description: str
    exec_start: tuple[str, ...]
    working_directory: str
    environment: tuple[tuple[str, str], ...] = ()
    comment: tuple[str, ...] = ()
    type: str = "notify"
    notify_access: str = "main"
    restart: str = "no"
    restart_sec: int | None = None
    timeout_start_sec: int = 60
    timeout_stop_sec: int = 30
    delegate: bool = False
    kill_mode: str = "control-group"
    kill_signal: str = "SIGTERM"
    send_sigkill: bool = True
    oom_policy: str = "continue"
    limit_nofile: int | None = None
    start_limit_interval_sec: int | None = None
    after: tuple[str, ...] = ()
    wants: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    user: str | None = None
    group: str | None = None
    wanted_by: str = "default.target"
    # launchd only
    keep_alive: bool = False
    run_at_load: bool = True
    abandon_process_group: bool = False
    process_type: str = "Standard"
    stdout_path: str = ""
    stderr_path: str = ""

    @property
    def env(self) -> dict[str, str]:
        return dict(self.environment)


def _default_home(scope: Scope) -> Path:
    if scope is Scope.SYSTEM:
        return Path("/var/lib/tenure")
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(xdg) / "tenure"


def _default_unit_dir(scope: Scope) -> Path:
    if scope is Scope.SYSTEM:
        return Path("/etc/systemd/system")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(xdg) / "systemd" / "user"


def _default_plist_dir(scope: Scope) -> Path:
    if scope is Scope.SYSTEM:
        return Path("/Library/LaunchDaemons")
    return Path(os.path.expanduser("~/Library/LaunchAgents"))


def default_target_dir(scope: Scope, manager: Manager) -> Path:
    """The scope's own unit (or plist) directory: where install writes by default."""
    return _default_plist_dir(scope) if manager is Manager.LAUNCHD else _default_unit_dir(scope)


@dataclass(frozen=True)
class Installation:
    """Where and as whom tenure is supervised. Build one with :meth:`for_scope`.

    Raises BadRequest (from ``__post_init__``) for a relative path, a user/group on user
    scope, a missing or malformed service account on system scope.
    """

    scope: Scope
    home: Path
    python: Path
    unit_dir: Path
    plist_dir: Path
    user: str | None = None
    group: str | None = None
    manager: Manager = field(default=Manager.SYSTEMD)
    config_dir: Path | None = None  # where plans (and the record) live; see plan_root

    def __post_init__(self) -> None:
        for name in ("home", "python", "unit_dir", "plist_dir"):
            value = getattr(self, name)
            if not Path(value).is_absolute():
                raise BadRequest(f"installation {name} must be an absolute path: {value}",
                                 {"field": name})
        if self.config_dir is not None and not Path(self.config_dir).is_absolute():
            raise BadRequest(f"installation config_dir must be an absolute path: "
                             f"{self.config_dir}", {"field": "config_dir"})
        if self.scope is Scope.USER and (self.user or self.group):
            raise BadRequest("user scope runs as the invoking user; do not name an account")
        if self.scope is Scope.SYSTEM:
            for name in ("user", "group"):
                value = getattr(self, name)
                if not value or not _ACCOUNT.match(value):
                    raise BadRequest(f"system scope needs a valid service {name}: {value!r}",
                                     {"field": name})

    @classmethod
    def for_scope(cls, scope: Scope | str, *, home: Path | None = None,
                  python: Path | None = None, user: str | None = None,
                  group: str | None = None, unit_dir: Path | None = None,
                  plist_dir: Path | None = None,
                  manager: Manager | str | None = None,
                  config_dir: Path | None = None) -> Installation:
        """Fill defaults: home /var/lib/tenure or $XDG_STATE_HOME/tenure, this interpreter,
        account ``tenure``:``tenure`` on system scope, launchd on macOS. Raises BadRequest."""
        try:
            sc = Scope(scope)
        except ValueError:
            raise BadRequest(f"unknown scope {scope!r}; use user or system") from None
        system = sc is Scope.SYSTEM
        mgr = Manager(manager) if manager else (
            Manager.LAUNCHD if sys.platform == "darwin" else Manager.SYSTEMD)
        return cls(
            scope=sc,
            home=home or _default_home(sc),
            # Not resolved: a venv's python is a symlink whose *path* selects the venv.
            python=python or Path(os.path.abspath(sys.executable)),
            unit_dir=unit_dir or _default_unit_dir(sc),
            plist_dir=plist_dir or _default_plist_dir(sc),
            user=(user or "tenure") if system else user,
            group=(group or user or "tenure") if system else group,
            manager=mgr,
            config_dir=config_dir,
        )

    @property
    def plan_root(self) -> Path:
        """Where plans and the installation record live. System scope: a root-owned
        directory outside the home (``/etc/tenure``), because the home belongs to the
        service account, which must not be able to swap what root installs. User scope:
        ``<home>/runtime``."""
        if self.config_dir is not None:
            return self.config_dir
        return SYSTEM_CONFIG_DIR if self.scope is Scope.SYSTEM else self.home / "runtime"

    @property
    def plan_dir(self) -> Path:
        """The default place for a prepared plan: ``<plan_root>/supervision-plan``."""
        return self.plan_root / "supervision-plan"

    @property
    def record_path(self) -> Path:
        """The installation record install writes in system scope (units.trust)."""
        return self.plan_root / "installation.json"

    @property
    def target_dir(self) -> Path:
        return self.plist_dir if self.manager is Manager.LAUNCHD else self.unit_dir


def services(inst: Installation) -> tuple[ServiceSpec, ServiceSpec]:
    """Return ``(owner, guardian)`` for ``inst``; the policy in this module's docstring."""
    home = str(inst.home)
    base = ServiceSpec(
        name="", label="", description="", exec_start=(),
        working_directory=home,
        environment=(("TENURE_HOME", home),),
        user=inst.user,
        group=inst.group,
        wanted_by="multi-user.target" if inst.scope is Scope.SYSTEM else "default.target",
    )
    return _owner(inst, base), _guardian(inst, base)


def _owner(inst: Installation, base: ServiceSpec) -> ServiceSpec:
    system = inst.scope is Scope.SYSTEM
    account = ("--service-account", str(inst.user)) if system else ()
    return replace(
        base,
        name=OWNER_UNIT,
        label=OWNER_LABEL,
        description="tenure execution owner (parent of every application)",
        comment=(
            "Stopping this unit stops every application: it is a maintenance step.",
            "systemd signals only the owner (KillMode=process) and never SIGKILLs",
            "leftovers (SendSIGKILL=no); see docs/service.md.",
        ),
        # -I: the working directory (the home, which in system scope the service account
        # owns) is not on sys.path and PYTHON* variables are ignored, so nothing the account
        # can write decides what runs as root
        exec_start=(str(inst.python), "-I", "-m", "owner", "--home", str(inst.home), *account),
        # system scope: root, to start each app as its user and manage cgroups; the
        # service account (and root) may use its socket, no app may
        # (no Group=: root's own group; it is "wheel" on macOS)
        user="root" if system else None,
        group=None,
        restart="no",
        timeout_start_sec=60,
        timeout_stop_sec=90,
        delegate=True,
        kill_mode="process",
        send_sigkill=False,
        oom_policy="continue",
        limit_nofile=65536,
        after=("network.target",) if inst.scope is Scope.SYSTEM else (),
        keep_alive=False,
        abandon_process_group=True,
        stdout_path=str(inst.home / "tenure-owner.stdout.log"),
        stderr_path=str(inst.home / "tenure-owner.stderr.log"),
    )


def _guardian(inst: Installation, base: ServiceSpec) -> ServiceSpec:
    return replace(
        base,
        name=GUARDIAN_UNIT,
        label=GUARDIAN_LABEL,
        description="tenure guardian (backend generations, epochs, receipts)",
        comment=(
            "Restarting this unit restarts the backend, never applications: they live",
            "in tenure-owner.service. After= the owner only: no Wants=/Requires=/BindsTo=,",
            "so a restart of this unit never starts a stopped owner (see docs/service.md).",
        ),
        exec_start=(str(inst.python), "-I", "-m", "guardian", "--home", str(inst.home)),
        restart="always",
        restart_sec=1,
        start_limit_interval_sec=0,
        timeout_start_sec=60,
        timeout_stop_sec=30,
        # mixed, not control-group: a backend SIGTERMed with the guardian would close
        # before the guardian could get its last certificate and retire it, and the next
        # guardian's recovery would be blocked whenever an app changed since the last one
        kill_mode="mixed",
        oom_policy="continue",
        # no wants=: Restart=always would start an owner the operator stopped for
        # maintenance (and with it every stack) whenever the guardian is restarted
        after=(OWNER_UNIT,),
        keep_alive=True,
        stdout_path=str(inst.home / "tenure-guardian.stdout.log"),
        stderr_path=str(inst.home / "tenure-guardian.stderr.log"),
    )
