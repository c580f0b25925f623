"""The configuration model: stacks of apps, as validated from tenure.toml.

Pure frozen data. ``backend.config`` builds it from TOML (with precise errors) and
computes the config revision; the reconciler, plans and the CLI read it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import replace

if TYPE_CHECKING:
    from .jobs.model import JobTemplate

__all__ = [
    "DEFINITION",
    "MAX_STOP_WAIT_S",
    "App",
    "Backoff",
    "Config",
    "Health",
    "HealthKind",
    "Limits",
    "MetricsSettings",
    "Readiness",
    "ReadyKind",
    "RestartMode",
    "RunAs",
    "Settings",
    "SocketSpec",
    "Stack",
    "StartLimit",
    "StopSpec",
    "canonical_digest",
    "plain",
]


class RestartMode(StrEnum):
    ALWAYS = "always"
    ON_FAILURE = "on-failure"
    NEVER = "never"


class ReadyKind(StrEnum):
    NONE = "none"      # ready as soon as it runs
    NOTIFY = "notify"  # READY=1 on NOTIFY_SOCKET (sd_notify, systemd-notify --ready)
    TCP = "tcp"        # a process of the app listens on the port
    HTTP = "http"      # GET url answers 2xx/3xx
    EXEC = "exec"      # command exits 0
    DELAY = "delay"    # after a fixed delay


class HealthKind(StrEnum):
    HTTP = "http"
    TCP = "tcp"
    EXEC = "exec"



_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_LEAVES: set[type] = {str, int, float, bool, bytes, type(None)}


def plain(obj: Any) -> Any:
    """This model's data as plain values, without copying what is immutable already
    (the model is frozen and its leaves immutable): structs become dicts of their fields,
    recursively through tuples, lists and dicts, whose types are kept. A deep copy was
    most of the time of parsing a config, which every plan, apply and operation does."""
    cls = type(obj)
    if cls in _LEAVES:
        return obj
    names = _FIELD_NAMES.get(cls)
    if names is not None:
        return {n: plain(getattr(obj, n)) for n in names}
    if cls is tuple or cls is list:
        return cls(plain(v) for v in obj)
    if cls is dict:
        return {plain(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, Struct):
        _FIELD_NAMES[cls] = obj.__struct_fields__
        return plain(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):   # a named tuple
        return cls(*[plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return cls(plain(v) for v in obj)
    if isinstance(obj, dict):
        return cls((plain(k), plain(v)) for k, v in obj.items())
    _LEAVES.add(cls)   # an enum member or another immutable value: as it is
    return obj


class Backoff(Struct, frozen=True):
    """The first restart after a stable run is immediate; restart n >= 2 of a streak of
    consecutive failures waits min(initial * factor**(n-2), max). The streak resets after
    the app stayed up ``reset_after`` seconds."""

    initial: float = 0.5
    max: float = 30.0
    factor: float = 2.0
    reset_after: float = 30.0

    def delay(self, n: int) -> float:
        """The wait before restart ``n`` (>= 1) of a streak. Never overflows: a streak
        can be as long as the app keeps failing (0.5 * 2.0**1024 is past a float)."""
        if n <= 1 or self.initial == 0.0:
            return 0.0
        try:
            return min(self.initial * self.factor ** (n - 2), self.max)
        except OverflowError:
            return self.max


class StartLimit(Struct, frozen=True):
    """More than ``burst`` starts within ``interval`` seconds: give up (start-limit-hit)."""

    burst: int = 5
    interval: float = 60.0


class Readiness(Struct, frozen=True):
    kind: ReadyKind = ReadyKind.NONE
    port: int | None = None          # tcp: port of instance 0
    port_step: int = 0               # tcp: instance i listens on port + i * port_step
    host: str = "127.0.0.1"          # tcp: address for the fallback connect probe
    url: str | None = None           # http
    command: tuple[str, ...] = ()    # exec
    delay: float = 0.0               # delay
    timeout: float = 30.0            # give up waiting after this long (start failed)
    interval: float = 0.1            # probe period for tcp/http/exec


class Health(Struct, frozen=True):
    kind: HealthKind
    port: int | None = None
    port_step: int = 0
    host: str = "127.0.0.1"
    url: str | None = None
    command: tuple[str, ...] = ()
    interval: float = 10.0
    timeout: float = 5.0
    failures: int = 3                # consecutive failures before a restart
    grace: float = 0.0               # no checks during the first seconds after ready


MAX_STOP_WAIT_S = 7 * 24 * 3600.0
"""The longest stop timeout or kill_after a config may set: the owner refuses a launch
with more (a unit mistake, ms for s, far more often than a real need)."""


UNENDING_STOP_SIGNALS = ("STOP", "CONT")
"""Stop signals that never end a process: SIGSTOP cannot be caught, SIGCONT only resumes
(every stop would wait out its timeout, then SIGKILL)."""


class StopSpec(Struct, frozen=True):
    signal: str = "TERM"
    timeout: float = 10.0
    kill_after: float = 5.0

    def to_wire(self) -> dict[str, Any]:
        return {"signal": self.signal, "timeout": self.timeout, "kill_after": self.kill_after}


class RunAs(Struct, frozen=True):
    """Who the app runs as (names, resolved when planned and again when launched);
    None/empty: as the owner."""

    user: str | None = None
    group: str | None = None
    supplementary_groups: tuple[str, ...] = ()
    umask: int | None = None

    def to_wire(self) -> dict[str, Any]:
        """The owner's ``identity`` launch parameter (only the keys that are set)."""
        out: dict[str, Any] = {k: v for k, v in plain(self).items()
                               if v is not None and v != ()}
        if self.supplementary_groups:
            out["supplementary_groups"] = list(self.supplementary_groups)
        return out


class Limits(Struct, frozen=True):
    """rlimits (``nofile``, ``nproc``, ``core``; -1 is "infinity") and cgroup limits
    (``memory_max`` bytes, ``cpu_quota`` CPUs, ``pids_max``); None: not set."""

    nofile: int | None = None
    nproc: int | None = None
    core: int | None = None
    memory_max: int | None = None
    cpu_quota: float | None = None
    pids_max: int | None = None

    CGROUP = ("memory_max", "cpu_quota", "pids_max")

    def to_wire(self) -> dict[str, Any]:
        """The owner's ``limits`` launch parameter (only the keys that are set)."""
        return {k: "infinity" if v == -1 else v for k, v in plain(self).items()
                if v is not None}


class SocketSpec(Struct, frozen=True):
    """A listening socket the owner holds for an app (``[...apps.A.sockets.NAME]``).
    ``listen`` is the canonical address (protocol.listen); ``mode``, ``owner`` and
    ``group`` only for unix sockets."""

    name: str
    listen: str
    backlog: int = 4096
    mode: int | None = None
    owner: str | None = None
    group: str | None = None

    def settings(self) -> tuple[int, int | None, str | None, str | None]:
        """What the owner can change on the socket it holds, in place: backlog, mode,
        owner, group."""
        return self.backlog, self.mode, self.owner, self.group

    def to_wire(self) -> dict[str, Any]:
        """One entry of the owner's ``sockets`` launch parameter."""
        out: dict[str, Any] = {"name": self.name, "listen": self.listen,
                               "backlog": self.backlog}
        for key, wire in (("mode", "mode"), ("owner", "user"), ("group", "group")):
            if getattr(self, key) is not None:
                out[wire] = getattr(self, key)
        return out


DEFINITION = ("command", "env", "cwd", "stop", "ready", "run_as", "limits", "sockets",
              "fd_store_max")
"""The fields of an App that shape its process (:meth:`App.definition`): a change of
one restarts it. The rest, but ``instances``, is policy, which takes effect at once."""


class App(Struct, frozen=True):
    name: str
    stack: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    instances: int = 1
    restart: RestartMode = RestartMode.ON_FAILURE
    backoff: Backoff = field(default_factory=Backoff)
    start_limit: StartLimit = field(default_factory=StartLimit)
    ready: Readiness = field(default_factory=Readiness)
    health: Health | None = None
    stop: StopSpec = field(default_factory=StopSpec)
    after: tuple[str, ...] = ()
    run_as: RunAs = field(default_factory=RunAs)
    limits: Limits = field(default_factory=Limits)
    sockets: tuple[SocketSpec, ...] = ()
    fd_store_max: int = 0
    log_retention: int | None = None   # bytes of output the journal keeps; None: default

    @property
    def key(self) -> str:
        return f"{self.stack}/{self.name}"

    def definition_digest(self) -> str:
        """Digest of everything that shapes a running process; a change means restart.
        (Instance count, restart policy and health alone do not need one, nor a held
        socket's settings: :meth:`socket_settings`.)"""
        return canonical_digest(self.definition())

    def definition(self) -> dict[str, Any]:
        """What :meth:`definition_digest` digests, by config key."""
        shape: dict[str, Any] = {"command": list(self.command), "env": dict(self.env),
                                 "cwd": self.cwd, "stop": plain(self.stop),
                                 "ready": plain(self.ready)}
        # only when set, so the digest of an app without them is what it always was
        if self.run_as != RunAs():
            shape["run_as"] = plain(self.run_as)
        if self.limits != Limits():
            shape["limits"] = plain(self.limits)
        if self.sockets:   # which sockets: a backlog, mode or owner changes in place
            shape["sockets"] = [{"name": s.name, "listen": s.listen} for s in self.sockets]
        if self.fd_store_max:
            shape["fd_store_max"] = self.fd_store_max
        return shape

    def on_definition_of(self, other: App) -> App:
        """This app's policy and count with ``other``'s definition (:data:`DEFINITION`):
        what an instance still running a process of ``other`` follows until its restart
        gives it this app. Its definition digest is ``other``'s."""
        return replace(self, **{k: getattr(other, k) for k in DEFINITION})

    def socket_settings(self) -> dict[str, tuple[Any, ...]]:
        """Per socket name, what the owner can change on the socket it holds (backlog,
        mode, owner, group) without a new socket, so without a restart."""
        return {s.name: s.settings() for s in self.sockets}


class Stack(Struct, frozen=True):
    name: str
    apps: Mapping[str, App]
    jobs: Mapping[str, JobTemplate] = field(default_factory=dict)


class Settings(Struct, frozen=True):
    viewer_group: str | None = None


class MetricsSettings(Struct, frozen=True):
    listen: str | None = None        # "HOST:PORT" (backend.config_metrics); None: off


class RetentionSettings(Struct, frozen=True):
    """How many finished records are kept (backend.config_retention)."""

    operations: int = 1_000
    plans: int = 200
    launches: int = 10_000
    activations: int = 1_000
    removed_app_logs_days: int = 7


class Config(Struct, frozen=True):
    stacks: Mapping[str, Stack]
    settings: Settings = field(default_factory=Settings)
    revision: str = ""               # sha256 of the canonical form
    source: str = ""                 # the file it came from
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    def apps(self) -> list[App]:
        return [a for s in self.stacks.values() for a in s.apps.values()]

    def app(self, stack: str, name: str) -> App | None:
        s = self.stacks.get(stack)
        return s.apps.get(name) if s else None

    def job(self, stack: str, name: str) -> JobTemplate | None:
        s = self.stacks.get(stack)
        return s.jobs.get(name) if s else None

    def jobs(self) -> list[JobTemplate]:
        return [j for s in self.stacks.values() for j in s.jobs.values()]


def canonical_digest(obj: Any) -> str:
    """sha256 hex of canonical JSON (sorted keys, no whitespace, enums as values)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(data.encode()).hexdigest()
