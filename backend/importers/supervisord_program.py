"""One supervisord ``[program:x]`` → draft apps.

Values are expanded as supervisord expands them: ``%(here)s`` (the directory of the file
that holds the value), ``%(program_name)s``, ``%(group_name)s``, ``%(host_node_name)s``,
``%(ENV_X)s`` (the environment, then ``[supervisord] environment``, then, for ``command``
and ``directory``, the program's own ``environment``), and per process
``%(process_num)d`` and ``%(numprocs)d``. ``command`` is split into words like supervisord
splits it (shell-like quoting, no shell).

``numprocs`` processes that differ only in their name become one app with
``instances = numprocs``; processes whose command, environment or directory uses
``%(process_num)`` become one app each, named by ``process_name``. Either way at most 64
processes (tenure's most instances of an app) are imported, and more are reported.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import TypeVar

from msgspec import Struct, field

from ..config import LOG_RETENTION_MAX, LOG_RETENTION_MIN
from ..config_values import parse_size
from ..model import App, Backoff, Readiness, ReadyKind, RestartMode, RunAs, StartLimit, StopSpec
from .identity import account
from .ini import IniDocument, IniSection
from .model import Draft, Origin, SourceResult
from .policy import MAX_INSTANCES, MAX_STOP_WAIT_S, quick_failure_limit, too_many_starts
from .supervisord_values import (
    AutoRestart,
    auto_restart,
    boolean,
    exit_codes,
    expand,
    expand_pairs,
    integer,
    octal,
    signal_name,
)

__all__ = ["DaemonDefaults", "ExpansionScope", "Group", "read_environment", "read_program"]

T = TypeVar("T")
_REFERENCE = re.compile(r"%\(([^)]*)\)")
_RESTART = {AutoRestart.TRUE: RestartMode.ALWAYS, AutoRestart.FALSE: RestartMode.NEVER,
            AutoRestart.UNEXPECTED: RestartMode.ON_FAILURE}
_PER_PROCESS = ("command", "environment", "directory", "process_name")
_CHECKED = ("priority", "autorestart", "startsecs", "startretries", "stopsignal",
            "stopwaitsecs", "numprocs", "numprocs_start", "user", "umask")
_LOG_REASON = ("tenure keeps each app's stdout and stderr in its journal "
               "(`tenure logs`); there are no log files to configure")
# what supervisord keeps of a stream: maxbytes x (backups + 1), by default 50 MB x 11
_LOG_SIZES = tuple(f"{s}_logfile_{k}" for s in ("stdout", "stderr")
                   for k in ("maxbytes", "backups"))
_HOME_NOTE = ("tenure sets HOME, USER and LOGNAME to this user's (supervisord leaves its "
              "own); a value in `environment` still wins")


class DaemonDefaults(Struct, frozen=True):
    """What every program inherits from the supervisord daemon, where the program does
    not set its own: the user it dropped to (``[supervisord] user``), and, when it
    daemonized, the directory it changed into and the umask it set."""

    user: str | None = None
    cwd: str | None = None
    umask: int | None = None


class ExpansionScope(Struct):
    """The names every program can expand: the importing environment (supervisord uses
    its own at start), the host name and ``[supervisord] environment``; and the daemon's
    settings every program inherits."""

    environ: dict[str, str]
    hostname: str
    daemon_env: dict[str, str] = field(default_factory=dict)
    daemon: DaemonDefaults = field(default_factory=DaemonDefaults)

    def names(self, here: str) -> dict[str, str | int]:
        names: dict[str, str | int] = {"here": here, "host_node_name": self.hostname}
        names.update({f"ENV_{k}": v for k, v in self.environ.items()})
        names.update({f"ENV_{k}": v for k, v in self.daemon_env.items()})
        return names

    def from_host(self, raw: str, own_env: Mapping[str, str]) -> list[str]:
        """The names ``raw`` refers to whose value comes from the importing host."""
        return sorted({n for n in _REFERENCE.findall(raw) if n == "host_node_name" or (
            n.startswith("ENV_") and n[4:] not in self.daemon_env and n[4:] not in own_env)})


class Group(Struct, frozen=True):
    name: str
    origin: Origin


class _Settings(Struct, frozen=True):
    priority: int = 999
    autorestart: AutoRestart = AutoRestart.UNEXPECTED
    startsecs: int = 1
    startretries: int = 3
    stopsignal: str = "TERM"
    stopwaitsecs: int = 10
    numprocs: int = 1
    numprocs_start: int = 0
    run_as: RunAs = field(default_factory=RunAs)
    log_retention: int | None = None


class _Process(Struct, frozen=True):
    name: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None

    def same_definition(self, other: _Process) -> bool:
        return (self.command, self.env, self.cwd) == (other.command, other.env, other.cwd)


def read_environment(raw: str, names: Mapping[str, str | int], origin: Origin,
                     result: SourceResult) -> dict[str, str] | None:
    """The variables of an ``environment`` value. A variable whose value uses a name that
    cannot be expanded is left out and reported, the others are kept; when the value as a
    whole cannot be expanded or split, none is (None), and the report says so."""
    try:
        pairs, left_out = expand_pairs(raw, names)
    except ValueError as e:
        result.not_mapped(origin, f"{e}; none of its variables is imported")
        return None
    for key, problem in left_out.items():
        result.not_mapped(origin, f"{key} is not imported: {problem}")
    return pairs


def read_program(doc: IniDocument, section: IniSection, group: Group | None,
                 scope: ExpansionScope) -> SourceResult:
    """Draft apps and findings for ``section`` (a ``[program:x]``). Never raises: what
    cannot be read is reported."""
    return _Program(doc, section, group, scope).read()


class _Program:
    def __init__(self, doc: IniDocument, section: IniSection, group: Group | None,
                 scope: ExpansionScope) -> None:
        self.doc, self.section, self.group, self.scope = doc, section, group, scope
        self.name = section.name.split(":", 1)[1].strip()
        self.result = SourceResult()

    def read(self) -> SourceResult:
        if not self.name or any(c in self.name for c in " :/"):
            self.result.not_mapped(self._header(), "not a valid supervisord program name")
            return self.result
        settings = self._settings()
        processes = self._processes(settings)
        if processes:
            self._drafts(settings, processes)
            self._group_signals()
        self._other_keys()
        return self.result

    # -- values --------------------------------------------------------------------------

    def _header(self) -> Origin:
        return Origin(self.section.file, self.section.line, f"[{self.section.name}]")

    def _origin(self, key: str) -> Origin:
        value = self.doc.get(self.section.name, key)
        where = self.section if value is None else value
        return Origin(where.file, where.line, f"[{self.section.name}] {key}")

    def _names(self, key: str, extra: Mapping[str, str | int] | None = None,
               env: Mapping[str, str] | None = None) -> dict[str, str | int]:
        value = self.doc.get(self.section.name, key)
        here = os.path.dirname(os.path.abspath(value.file if value else self.section.file))
        names = self.scope.names(here)
        names["program_name"] = self.name
        names["group_name"] = self.group.name if self.group else self.name
        names.update(extra or {})
        names.update({f"ENV_{k}": v for k, v in (env or {}).items()})
        return names

    def _expand(self, key: str, names: Mapping[str, str | int],
                own_env: Mapping[str, str] | None = None) -> str | None:
        """The expanded value of ``key``, or None when absent. Raises ValueError."""
        value = self.doc.get(self.section.name, key)
        if value is None:
            return None
        expanded = expand(value.value, names)
        self._note_from_host(key, value.value, names, own_env or {})
        return expanded

    def _note_from_host(self, key: str, raw: str, names: Mapping[str, str | int],
                        own_env: Mapping[str, str]) -> None:
        """A note for each name in ``raw`` whose value came from the importing machine.
        Only once expanded: a name that could not be expanded was not (it is reported)."""
        for name in self.scope.from_host(raw, own_env):
            if name in names:
                self.result.note(self._origin(key), f"%({name})s was expanded when "
                                 "importing, from this machine (supervisord expands it "
                                 "when it starts)")

    def _get(self, key: str, convert: Callable[[str], T], default: T,
             valid: Callable[[T], bool] = lambda _: True, rule: str = "") -> T:
        """``key`` expanded and converted; the default (and a finding) when it fails."""
        try:
            raw = self._expand(key, self._names(key))
            if raw is None:
                return default
            value = convert(raw)
        except ValueError as e:
            self.result.not_mapped(self._origin(key), f"{e}; the default applies")
            return default
        if not valid(value):
            self.result.not_mapped(self._origin(key), f"{rule}, not {raw!r}; the "
                                   "default applies")
            return default
        return value

    def _settings(self) -> _Settings:
        d = _Settings()
        return _Settings(
            priority=self._get("priority", integer, d.priority),
            autorestart=self._get("autorestart", auto_restart, d.autorestart),
            startsecs=self._get("startsecs", integer, d.startsecs, lambda v: v >= 0,
                                "must be >= 0"),
            startretries=self._get("startretries", integer, d.startretries,
                                   lambda v: v >= 0, "must be >= 0"),
            stopsignal=self._get("stopsignal", signal_name, d.stopsignal),
            stopwaitsecs=self._stop_wait(d.stopwaitsecs),
            numprocs=self._get("numprocs", integer, d.numprocs, lambda v: v >= 1,
                               "must be >= 1"),
            numprocs_start=self._get("numprocs_start", integer, d.numprocs_start,
                                     lambda v: v >= 0, "must be >= 0"),
            run_as=RunAs(user=self._user(), umask=self._umask()),
            log_retention=self._log_retention())

    def _stop_wait(self, default: int) -> int:
        """``stopwaitsecs``, capped at the longest stop timeout tenure accepts (a week),
        like ``numprocs`` at the most instances: the cap is the nearest tenure comes to a
        program that is given that long to stop, where the default (10 s) would kill it
        far sooner than supervisord did."""
        wait = self._get("stopwaitsecs", integer, default, lambda v: v > 0,
                         "tenure needs a stop timeout > 0")
        if wait > MAX_STOP_WAIT_S:
            self.result.not_mapped(self._origin("stopwaitsecs"), f"tenure waits at most "
                                   f"{MAX_STOP_WAIT_S:g} s (a week) for an app to stop, "
                                   f"not {wait}")
            return int(MAX_STOP_WAIT_S)
        return wait

    def _log_retention(self) -> int | None:
        """``log_retention`` when the program sizes its log files: what supervisord
        would keep on disk, each kept stream's maxbytes x (backups + 1). None (tenure's
        default) when it sets none of those, or makes a stream unlimited."""
        if not any(self._get(key, str.strip, "") for key in _LOG_SIZES):
            return None
        streams = ["stdout"] if self._get("redirect_stderr", boolean, False) \
            else ["stdout", "stderr"]
        total = 0
        for s in streams:
            if self._get(f"{s}_logfile", str.strip, "AUTO").upper() == "NONE":
                continue   # supervisord keeps nothing of it
            size = self._get(f"{s}_logfile_maxbytes", parse_size, 50 << 20, lambda v: v >= 0,
                             "must be >= 0")
            backups = self._get(f"{s}_logfile_backups", integer, 10, lambda v: v >= 0,
                                "must be >= 0")
            if size == 0:
                self.result.not_mapped(self._origin(f"{s}_logfile_maxbytes"),
                                       "0 (no limit) has no tenure equivalent: the app keeps "
                                       "the journal's default (64 MiB); set log_retention")
                return None
            total += size * (backups + 1)
        low, high = LOG_RETENTION_MIN, LOG_RETENTION_MAX
        if total and not low <= total <= high:
            self.result.not_mapped(self._origin(_LOG_SIZES[0]), f"the log files hold "
                                   f"{total} bytes; log_retention is 1 MiB to 1 TiB")
        return min(max(total, low), high) if total else None

    def _user(self) -> str | None:
        """``user``, a name or a uid. supervisord, like tenure, gives the program the
        user's primary group and the groups the user is a member of. Without one, the
        program runs as ``[supervisord] user``: supervisord dropped to it before starting
        anything."""
        raw = self._get("user", str.strip, "")
        if not raw:
            return self.scope.daemon.user
        found = account(raw, "user")
        if found.name is None:
            self.result.not_mapped(self._origin("user"), found.problem)
            return self.scope.daemon.user
        daemon = self.scope.daemon.user
        if daemon is not None and daemon not in (found.name, "root"):
            self.result.note(self._origin("user"), (
                f"supervisord ran as {daemon!r} ([supervisord] user) and could not switch "
                f"to {found.name!r}, so it never started this program; tenure runs it as "
                f"{found.name!r}"))
        for note in (found.note, _HOME_NOTE):
            if note:
                self.result.note(self._origin("user"), note)
        return found.name

    def _umask(self) -> int | None:
        """``umask``; without one, the umask the daemon set when it daemonized."""
        return self._get("umask", octal, self.scope.daemon.umask)

    # -- processes -----------------------------------------------------------------------

    def _processes(self, s: _Settings) -> list[_Process]:
        """One entry per process, for the first ``MAX_INSTANCES + 1`` of them: what is
        imported, and enough to tell whether they differ (a numprocs of ten million took
        minutes and 300 MB before it was cut to 64); [] (with the reason reported) when
        the command is missing or cannot be expanded or split."""
        if self.doc.get(self.section.name, "command") is None:
            self.result.not_mapped(self._header(), "has no command: not imported")
            return []
        out = []
        for num in range(s.numprocs_start,
                         s.numprocs_start + min(s.numprocs, MAX_INSTANCES + 1)):
            process = self._process({"process_num": num, "numprocs": s.numprocs})
            if process is None:
                return []
            out.append(process)
        return out

    def _process(self, per: Mapping[str, str | int]) -> _Process | None:
        env = self._environment(per)
        try:
            argv = shlex.split(self._expand("command", self._names("command", per, env),
                                            env) or "")
        except ValueError as e:
            self.result.not_mapped(self._origin("command"), f"{e}: program not imported")
            return None
        if not argv or not argv[0]:
            self.result.not_mapped(self._origin("command"), "empty: program not imported")
            return None
        name = self._process_name(per)
        return _Process(name, tuple(argv), tuple(sorted(env.items())),
                        self._directory(per, env))

    def _environment(self, per: Mapping[str, str | int]) -> dict[str, str]:
        value = self.doc.get(self.section.name, "environment")
        if value is None:
            return {}
        names = self._names("environment", per)
        env = read_environment(value.value, names, self._origin("environment"),
                               self.result)
        if env is None:
            return {}
        self._note_from_host("environment", value.value, names, {})
        return env

    def _directory(self, per: Mapping[str, str | int], env: dict[str, str]) -> str | None:
        """``directory``; without one, the directory the daemon changed into when it
        daemonized (the program inherited it)."""
        if self.doc.get(self.section.name, "directory") is None:
            return self.scope.daemon.cwd
        try:
            cwd = self._expand("directory", self._names("directory", per, env), env)
        except ValueError as e:
            self.result.not_mapped(self._origin("directory"), f"{e}; not imported")
            return None
        if cwd is not None and not cwd.startswith("/"):
            self.result.not_mapped(self._origin("directory"), "tenure needs an absolute "
                                   f"path, not {cwd!r}")
            return None
        return cwd

    def _process_name(self, per: Mapping[str, str | int]) -> str:
        try:
            return self._expand("process_name", self._names("process_name", per)) \
                or self.name
        except ValueError as e:
            self.result.not_mapped(self._origin("process_name"), str(e))
            return f"{self.name}_{per['process_num']}"

    # -- drafts and the remaining keys ---------------------------------------------------

    def _drafts(self, s: _Settings, processes: list[_Process]) -> None:
        self._start_retries(s)
        first = processes[0]
        if all(p.same_definition(first) for p in processes):
            name = self.name if s.numprocs > 1 else first.name
            self._add(s, first, name, s.numprocs)
        else:
            if s.numprocs > MAX_INSTANCES:  # as many apps as one app has instances
                self.result.not_mapped(self._origin("numprocs"), f"tenure runs at most "
                                       f"{MAX_INSTANCES} processes of a program, not "
                                       f"{s.numprocs}: the first {MAX_INSTANCES} "
                                       f"(process_num {s.numprocs_start} to "
                                       f"{s.numprocs_start + MAX_INSTANCES - 1}) are "
                                       "imported")
            for process in processes[:MAX_INSTANCES]:
                self._add(s, process, process.name, 1)

    def _start_retries(self, s: _Settings) -> None:
        """supervisord retries a start that ends within ``startsecs`` whatever
        ``autorestart`` says (BACKOFF, then FATAL after ``startretries``); under
        restart = "never" a run that ends is not started again, however soon."""
        if s.autorestart is AutoRestart.FALSE and s.startsecs > 0 and s.startretries > 0:
            self.result.not_mapped(self._origin("startretries"), (
                f"supervisord starts a program again when it ends within startsecs "
                f"({s.startsecs} s), up to {s.startretries} times, even with "
                "autorestart=false; under restart = \"never\" tenure does not"))

    def _add(self, s: _Settings, process: _Process, name: str, instances: int) -> None:
        if instances > MAX_INSTANCES:
            self.result.not_mapped(self._origin("numprocs"), f"tenure runs at most "
                                   f"{MAX_INSTANCES} instances of an app, not {instances}")
            instances = MAX_INSTANCES
        restart = _RESTART[s.autorestart]
        backoff = Backoff(reset_after=float(s.startsecs))
        limit = quick_failure_limit(s.startretries + 1, s.startsecs, backoff)
        if restart is RestartMode.NEVER:  # backoff and start limit would never apply
            backoff, limit = Backoff(), StartLimit()
        elif cut := too_many_starts(s.startretries + 1, "startretries", s.startretries):
            self.result.not_mapped(self._origin("startretries"), cut)
        app = App(
            name=name, stack=self.group.name if self.group else "",
            command=process.command, env={**self.scope.daemon_env, **dict(process.env)},
            cwd=process.cwd, instances=instances, restart=restart, backoff=backoff,
            start_limit=limit,
            ready=(Readiness(kind=ReadyKind.DELAY, delay=float(s.startsecs))
                   if s.startsecs > 0 else Readiness()),
            stop=StopSpec(signal=s.stopsignal, timeout=float(s.stopwaitsecs)),
            run_as=s.run_as, log_retention=s.log_retention)
        self.result.drafts.append(Draft(app, self._header(), s.priority))

    def _group_signals(self) -> None:
        """A note when supervisord signalled only the main process, which it does by
        default: stopsignal goes to the process group only with ``stopasgroup`` (which
        implies ``killasgroup``), SIGKILL only with either. tenure signals the whole
        group. A key set to false is reported with the other keys."""
        if self.doc.get(self.section.name, "stopasgroup") is not None:
            return
        kill = self.doc.get(self.section.name, "killasgroup")
        if kill is None:
            self.result.note(self._header(), (
                "stopasgroup and killasgroup are not set, so supervisord sent stopsignal "
                "and SIGKILL to the program's main process only; tenure signals the "
                "app's whole process group, the processes it started too"))
        elif self._quiet(lambda: boolean(expand(kill.value, self._names("killasgroup")))):
            self.result.note(self._header(), (
                "stopasgroup is not set, so supervisord sent stopsignal to the program's "
                "main process only (killasgroup: SIGKILL to the group); tenure signals "
                "the app's whole process group, the processes it started too"))

    @staticmethod
    def _quiet(read: Callable[[], bool]) -> bool:
        """``read()``, False when it raises ValueError (reported elsewhere)."""
        try:
            return read()
        except ValueError:
            return False

    def _other_keys(self) -> None:
        """Report every key that was not carried over."""
        for key in self.doc.keys(self.section.name):
            problem = self._unmapped(key)
            if problem:
                self.result.not_mapped(self._origin(key), problem)

    def _unmapped(self, key: str) -> str:
        """Why ``key`` is not carried over, or "" when it is (or was reported already)."""
        if key in _PER_PROCESS or key in _CHECKED:
            return ""
        if key == "autostart":
            return "" if self._get(key, boolean, True) else \
                "tenure starts every app of a stack; stop this one after `tenure up` " \
                "or give it a stack of its own"
        if key in ("stopasgroup", "killasgroup"):
            return "" if self._get(key, boolean, True) else \
                "tenure always signals the app's whole process group"
        if key == "exitcodes":
            codes = self._get(key, exit_codes, [0])
            expected = self._get("autorestart", auto_restart, AutoRestart.UNEXPECTED)
            return "" if set(codes) == {0} or expected is not AutoRestart.UNEXPECTED else \
                "restart = on-failure treats only exit status 0 as expected"
        if key in _LOG_SIZES:
            return ""   # log_retention
        if key == "redirect_stderr" or key.startswith(("stdout_", "stderr_")):
            return _LOG_REASON
        return "no tenure equivalent"


