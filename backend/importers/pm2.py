"""PM2 ecosystem files → draft apps (see docs/config.md, "Coming from PM2").

Every entry of ``apps`` (or the file's single app) becomes an app of the ``--stack``
stack. The command is built as PM2 builds it: ``script`` with a space runs through
``bash -c``; otherwise ``interpreter`` (or the one PM2 picks from the script's extension)
with ``node_args`` (or an alias of it), then the script (resolved against ``cwd``) and
``args``. An app without ``name`` is named as PM2 names it, after its script.
``cwd`` is resolved against the ecosystem file's directory, where ``pm2 start`` is
usually run. Times in milliseconds become seconds.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

from ..model import App, Backoff, Readiness, ReadyKind, RestartMode, RunAs, StartLimit, StopSpec
from .identity import account
from .model import Context, Draft, Origin, SourceResult, source_error
from .pm2_load import load_ecosystem
from .policy import (
    MAX_INSTANCES,
    MAX_STOP_WAIT_S,
    quick_failure_limit,
    seconds,
    too_many_starts,
)

__all__ = ["read_pm2"]

T = TypeVar("T")
# PM2's interpreter for a script without one (lib/API/interpreter.json); python is
# python3 here, the name PM2 itself falls back to
_INTERPRETERS = {".sh": "bash", ".py": "python3", ".rb": "ruby", ".php": "php",
                 ".pl": "perl", ".js": "node", ".coffee": "coffee", ".ls": "lsc",
                 ".ts": "bun", ".tsx": "bun"}
_SNIFF = 512   # the bytes PM2 reads of a script to tell a binary (lib/tools/isbinaryfile.js)
# PM2's own splitting of a string of arguments: quoted words lose their quotes
_WORD = re.compile(r"""[^\s"'=]+="[^"]*"|[^\s"'=]+='[^']*'|"([^"]*)"|'([^']*)'|\S+""")
_STIME = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")
_STIME_FACTOR = {"h": 3_600_000, "m": 60_000, "s": 1_000, "": 1}
# the interpreter's flags: PM2's node_args and its aliases, in the order PM2 reads them
# (lib/API/schema.json; lib/tools/Config.js adds the camelCase form of the key)
_SCRIPT_KEYS = ("script", "cmd", "command", "exec")   # aliases, in the order PM2 reads them
_FLAG_KEYS = ("node_args", "interpreter_args", "interpreterArgs", "nodeArgs")
_MAPPED = frozenset({
    "name", "script", "cmd", "command", "exec", "args", "interpreter", "exec_interpreter",
    *_FLAG_KEYS, "cwd", "env", "instances", "exec_mode", "autorestart",
    "max_restarts", "min_uptime", "kill_timeout", "restart_delay",
    "exp_backoff_restart_delay", "stop_exit_codes", "treekill", "port", "uid", "user", "gid"})
_REASONS = {
    ("username",): "PM2's record of who started the app, not a setting (`uid` is who it "
        "runs as)",
    ("out_file", "error_file", "log_file", "output", "error", "log", "merge_logs",
     "combine_logs", "log_date_format", "log_type", "time", "disable_logs", "pid_file"):
        "tenure keeps each app's stdout and stderr in its journal (`tenure logs`); "
        "there are no log or pid files to configure",
    ("watch", "ignore_watch", "watch_options", "watch_delay"):
        "tenure does not restart apps when files change",
    ("max_memory_restart",): "tenure does not restart apps on memory use",
    ("cron_restart",): "tenure has no scheduled restarts",
    ("wait_ready", "listen_timeout"): "PM2's process.send('ready') has no tenure "
        "equivalent: use ready = { kind = \"notify\" } (sd_notify) or a tcp/http probe",
}
# switches that are off when false (or 0, "", null: JavaScript's falsy values, as PM2 tests
# them), which is what tenure does too: reported only when on
_OFF_WHEN_FALSY = frozenset({"watch", "wait_ready", "max_memory_restart", "cron_restart",
                             "merge_logs", "combine_logs", "time", "disable_logs"})
_WATCH_SETTINGS = frozenset({"ignore_watch", "watch_options", "watch_delay"})


def read_pm2(path: str, ctx: Context) -> SourceResult:
    """Draft apps of the ecosystem file ``path``. Raises ConfigInvalid when it cannot be
    read, or holds no list of apps."""
    data = load_ecosystem(path, ctx)
    result = SourceResult()
    apps: Any = data
    if isinstance(data, dict) and ("apps" in data or "pm2" in data):
        apps = data.get("apps", data.get("pm2"))
        for key in sorted(set(data) - {"apps", "pm2"}):
            reason = ("tenure does not deploy code" if key == "deploy"
                      else "no tenure equivalent")
            result.not_mapped(Origin(path, None, key), reason)
    if isinstance(apps, dict):
        apps = [apps]
    if not isinstance(apps, list):
        raise source_error(path, None, "apps", "must be a list of apps")
    base = os.path.dirname(os.path.abspath(path))
    for i, app in enumerate(apps):
        if not isinstance(app, dict):
            result.not_mapped(Origin(path, None, f"apps[{i}]"), "not an object")
            continue
        result.extend(_App(path, i, app, base, ctx.environ.get("PATH", "")).read())
    return result


class _App:
    def __init__(self, path: str, index: int, conf: dict[str, Any], base: str,
                 search_path: str) -> None:
        self.path, self.index, self.conf, self.base = path, index, conf, base
        self.search_path = search_path   # PATH, where PM2 looks for a script not in cwd
        self.result = SourceResult()

    def origin(self, key: str = "") -> Origin:
        where = f"apps[{self.index}]"
        return Origin(self.path, None, f"{where}.{key}" if key else where)

    def get(self, key: str, convert: Callable[[Any], T], default: T) -> T:
        """``key`` converted; the default (and a finding) when absent or unusable."""
        if key not in self.conf or self.conf[key] is None:
            return default
        try:
            return convert(self.conf[key])
        except (TypeError, ValueError) as e:
            self.result.not_mapped(self.origin(key), str(e))
            return default

    def read(self) -> SourceResult:
        script = self._first(*_SCRIPT_KEYS)
        if not isinstance(script, str) or not script.strip():
            self.result.not_mapped(self.origin("script"), "missing or not a string: app "
                                   "not imported")
            return self.result
        if self._has_nul():
            return self.result
        cwd = os.path.normpath(os.path.join(self.base, self.get("cwd", _text, ".")))
        command, python = self._command(script.strip(), cwd)
        instances = self._instances(command)
        uptime = seconds(self.get("min_uptime", _milliseconds, 1000.0))
        restart, backoff, limit = self._restarts(uptime)
        # PM2 does not wait for min_uptime before it calls an app online; only a
        # min_uptime written down is taken as a readiness delay
        ready = Readiness(kind=ReadyKind.DELAY, delay=uptime) \
            if self.conf.get("min_uptime") is not None and uptime > 0 else Readiness()
        app = App(name=self.get("name", _text, "") or _default_name(script), stack="",
                  command=command, env=self._env(python), cwd=cwd, instances=instances,
                  restart=restart, backoff=backoff, start_limit=limit, ready=ready,
                  stop=StopSpec(signal="INT", timeout=self._kill_timeout()),
                  run_as=self._run_as())
        self.result.drafts.append(Draft(app, self.origin()))
        self._other_keys()
        return self.result

    def _has_nul(self) -> bool:
        """Whether a path the command is made of has a NUL character, reported: no
        exec could take it, and it is checked before any path is looked up (open()
        refuses a NUL with ValueError)."""
        script_key = next(k for k in _SCRIPT_KEYS if self.conf.get(k) is not None)
        bad = [k for k in (script_key, "cwd", "interpreter", "exec_interpreter")
               if isinstance(self.conf.get(k), str) and "\0" in self.conf[k]]
        for key in bad:
            self.result.not_mapped(self.origin(key), "has a NUL character: app not "
                                   "imported")
        return bool(bad)

    def _first(self, *keys: str) -> Any:
        return next((self.conf[k] for k in keys if self.conf.get(k) is not None), None)

    # -- command -------------------------------------------------------------------------

    def _command(self, script: str, cwd: str) -> tuple[tuple[str, ...], bool]:
        """The argv and whether it runs under python (PM2 then sets PYTHONUNBUFFERED)."""
        if " " in script:  # PM2 runs a command line through bash and drops `args`
            if "args" in self.conf:
                self.result.not_mapped(self.origin("args"), "PM2 ignores args when "
                                       "script is a whole command line")
            self._unused_flags("script is a whole command line: put the flags into it")
            return ("bash", "-c", script), False
        path = os.path.normpath(os.path.join(cwd, script))
        interpreter = self.get("interpreter", _text, "") or \
            self.get("exec_interpreter", _text, "")
        if not interpreter:
            interpreter, path = self._by_file(script, path)
        args: list[str] = self.get("args", _words, [])
        if interpreter == "none":
            self._unused_flags("the script runs without an interpreter: set interpreter "
                               "to the program the flags are for")
            return (self._program(script, cwd), *args), False
        return (interpreter, *self._flags(), path, *args), "python" in interpreter

    def _by_file(self, script: str, path: str) -> tuple[str, str]:
        """What PM2 runs ``script`` (``path`` in cwd) with when no interpreter is set
        (lib/Common.js resolveInterpreter), and the path it gives it: the interpreter of
        its extension, else node for a file that is not binary and none (run directly)
        for one that is, judged from the file on this machine (in cwd, else on PATH) as
        PM2 judges it. A script found nowhere here runs directly: PM2 would refuse to
        start it."""
        known = _INTERPRETERS.get(os.path.splitext(script)[1])
        if known is not None:
            return known, path
        if not os.path.exists(path) and self.search_path:
            path = shutil.which(script, path=self.search_path) or path
        try:
            with open(path, "rb") as f:
                head = f.read(_SNIFF)
        except OSError:
            return "none", path
        if _binary(head):
            return "none", path
        self.result.note(self.origin("script"), f"{path} is not a binary and its name "
                         "has no extension PM2 knows: PM2 runs it with node, and so does "
                         "the import (interpreter = \"none\" runs it directly)")
        return "node", path

    def _flag_keys(self) -> list[str]:
        """The keys of ``_FLAG_KEYS`` that PM2 takes as set: it reads the first with a
        JavaScript-truthy value, so null, false, 0 and "" count as unset."""
        return [k for k in _FLAG_KEYS if self.conf.get(k) not in (None, "", 0)]

    def _flags(self) -> list[str]:
        """The interpreter's flags, from the key PM2 reads; another one set beside it
        would be lost without a word, so it is reported."""
        keys = self._flag_keys()
        for key in keys[1:]:
            self.result.not_mapped(self.origin(key), f"PM2 uses {keys[0]} instead")
        return self.get(keys[0], _words, []) if keys else []

    def _unused_flags(self, why: str) -> None:
        """Report interpreter flags where PM2 starts no interpreter to pass them to."""
        for key in self._flag_keys():
            self.result.not_mapped(self.origin(key), f"PM2 ignores it when {why}")

    def _program(self, script: str, cwd: str) -> str:
        """A script run directly: a path is resolved against cwd; a bare name is looked
        up in cwd first, then (at run time) in PATH, as PM2 does."""
        path = os.path.normpath(os.path.join(cwd, script))
        if "/" in script or os.path.exists(path):
            return path
        return script

    def _env(self, python: bool) -> dict[str, str]:
        env: dict[str, str] = {}
        raw = self.conf.get("env")
        if raw is not None and not isinstance(raw, dict):
            self.result.not_mapped(self.origin("env"), "must be an object")
        for key, value in sorted((raw if isinstance(raw, dict) else {}).items()):
            if isinstance(value, dict | list) or not key or "=" in key or "\0" in key:
                self.result.not_mapped(self.origin(f"env.{key}"), "not a variable name "
                                       "with a string, number or boolean value")
                continue
            env[key] = _js_string(value)
        port = self.get("port", _port, None)
        if port is not None:
            env["PORT"] = port
        if python:
            env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _instances(self, command: tuple[str, ...]) -> int:
        raw = self.conf.get("instances")
        n = self.get("instances", _count, 1)
        if raw is not None and n < 1:
            self.result.not_mapped(self.origin("instances"), f"{raw!r} depends on the "
                                   "number of CPUs; tenure needs a fixed number: set it")
            return 1
        if n > MAX_INSTANCES:
            self.result.not_mapped(self.origin("instances"), f"tenure runs at most "
                                   f"{MAX_INSTANCES} instances of an app, not {n}")
            n = MAX_INSTANCES
        if n > 1:
            self._cluster_mode(command)
            self.result.note(self.origin("instances"), "PM2 numbers instances in "
                             "NODE_APP_INSTANCE; tenure sets TENURE_INSTANCE (0, 1, ...)")
        return n

    def _cluster_mode(self, command: tuple[str, ...]) -> None:
        mode = str(self.conf.get("exec_mode") or "")
        node = os.path.basename(command[0]) in ("node", "bun") or \
            command[0].endswith(("node", "bun"))
        if mode.startswith("cluster") or (not mode and node):
            self.result.not_mapped(self.origin("exec_mode"), "cluster mode (Node's "
                                   "cluster module shares one listening port between "
                                   "instances) has no tenure equivalent: tenure starts "
                                   "independent processes; give each its own port "
                                   "(TENURE_INSTANCE) or use SO_REUSEPORT")

    # -- who it runs as -------------------------------------------------------------------

    def _run_as(self) -> RunAs:
        """``uid`` (or its alias ``user``) and ``gid``, names or numbers; PM2 looks up
        ``uid`` first and needs it for ``gid``, as tenure needs ``user`` for ``group``."""
        key = "uid" if self.conf.get("uid") is not None else "user"
        if key == "uid" and self.conf.get("user") is not None:
            self.result.not_mapped(self.origin("user"), "PM2 uses uid instead")
        user = self._account(key, "user")
        if user is None and self.conf.get("gid") is not None:
            self.result.not_mapped(self.origin("gid"), "needs uid: PM2 and tenure set a "
                                   "group only for a user")
            return RunAs()
        return RunAs(user=user, group=None if user is None else self._account("gid", "group"))

    def _account(self, key: str, kind: str) -> str | None:
        value = self.conf.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.result.not_mapped(self.origin(key), f"must be a {kind} name or id, not "
                                   f"{value!r}")
            return None
        found = account(value, kind)
        if found.name is None:
            self.result.not_mapped(self.origin(key), found.problem)
        elif found.note:
            self.result.note(self.origin(key), found.note)
        return found.name

    # -- restarts and stopping -----------------------------------------------------------

    def _kill_timeout(self) -> float:
        """``kill_timeout`` in seconds; beyond the longest stop timeout tenure accepts (a
        week) it is capped there, the nearest tenure comes to it."""
        timeout = seconds(self.get("kill_timeout", _milliseconds, 1600.0))
        if timeout <= 0:
            self.result.not_mapped(self.origin("kill_timeout"), "tenure needs a stop "
                                   "timeout > 0; using 1.6 s, PM2's default")
            return 1.6
        if timeout > MAX_STOP_WAIT_S:
            self.result.not_mapped(self.origin("kill_timeout"), f"tenure waits at most "
                                   f"{MAX_STOP_WAIT_S:g} s (a week) for an app to stop, "
                                   f"not {timeout:g} s")
            return MAX_STOP_WAIT_S
        return timeout

    def _restarts(self, uptime: float) -> tuple[RestartMode, Backoff, StartLimit]:
        exp = seconds(self.get("exp_backoff_restart_delay", _milliseconds, 0.0))
        fixed = seconds(self.get("restart_delay", _milliseconds, 0.0))
        if exp > 0:
            if fixed > 0:
                self.result.not_mapped(self.origin("restart_delay"), "PM2 uses "
                                       "exp_backoff_restart_delay instead")
            backoff = Backoff(initial=exp, max=max(15.0, exp), factor=1.5, reset_after=30.0)
        elif fixed > 0:
            backoff = Backoff(initial=fixed, max=fixed, factor=1.0, reset_after=uptime)
        else:
            backoff = Backoff(reset_after=uptime)
        max_restarts = self.get("max_restarts", _count, 16)
        restart = RestartMode.ALWAYS if self.get("autorestart", _flag, True) \
            else RestartMode.NEVER
        if restart is RestartMode.ALWAYS and max_restarts < 1:
            restart = RestartMode.NEVER  # PM2 gives up at the first exit
        if restart is RestartMode.ALWAYS:
            restart = self._stop_exit_codes()
        if restart is RestartMode.NEVER:  # backoff and start limit would never apply
            return restart, Backoff(), StartLimit()
        if cut := too_many_starts(max_restarts, "max_restarts", max_restarts):
            self.result.not_mapped(self.origin("max_restarts"), cut)
        return restart, backoff, quick_failure_limit(max_restarts, uptime, backoff)

    def _stop_exit_codes(self) -> RestartMode:
        """The restart mode of an app PM2 restarts, after ``stop_exit_codes``: exit
        statuses PM2 does not restart after. tenure's nearest is ``on-failure`` when 0 is
        one of them (it does not restart after 0 only), ``always`` otherwise; the other
        statuses, after which tenure does restart, are reported."""
        raw = self.conf.get("stop_exit_codes")
        codes = raw if isinstance(raw, list) else [raw]
        if raw is None:
            return RestartMode.ALWAYS
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            self.result.not_mapped(self.origin("stop_exit_codes"), "must be exit statuses "
                                   f"(whole numbers), not {raw!r}")
            return RestartMode.ALWAYS
        restart = RestartMode.ON_FAILURE if 0 in codes else RestartMode.ALWAYS
        others = [str(c) for c in sorted(set(codes) - {0})]
        if others:
            listed = " or ".join([", ".join(others[:-1]), others[-1]] if others[:-1]
                                 else others)
            why = "only 0 counts as expected" if restart is RestartMode.ON_FAILURE else \
                "it has no exit statuses that stop restarts"
            self.result.not_mapped(self.origin("stop_exit_codes"), f"restart = "
                                   f"\"{restart}\" is written: tenure restarts the app "
                                   f"after exit status {listed} too ({why})")
        return restart

    def _other_keys(self) -> None:
        for key in sorted(self.conf):
            if key == "treekill" and self.get(key, _flag, True) is False:
                self.result.not_mapped(self.origin(key), "tenure always signals the app's "
                                       "whole process group")
            if key in _MAPPED or (key in _OFF_WHEN_FALSY and _falsy(self.conf[key])) or \
                    (key in _WATCH_SETTINGS and _falsy(self.conf.get("watch"))):
                continue  # mapped, or as tenure has it (settings of a watch not made)
            reason = next((r for keys, r in _REASONS.items() if key in keys), None)
            if reason is None and key.startswith("env_"):
                reason = (f"an environment for `pm2 start --env {key[4:]}`: copy the "
                          "variables you deploy with into env")
            self.result.not_mapped(self.origin(key), reason or "no tenure equivalent")


def _default_name(script: str) -> str:
    """PM2's name for an app without one: the script's file name without extension.
    PM2 names the app before it turns a command line into ``bash -c``, so
    ``node bin/report.js --nightly`` is named ``report`` too (assemble makes the name
    valid and unique, with a note)."""
    name = os.path.basename(script)
    dot = name.rfind(".")
    return name[:dot] if dot > 0 else name


def _falsy(value: Any) -> bool:
    """Whether JavaScript takes the JSON value ``value`` as false (``[]`` is true)."""
    return value is None or value is False or value == "" or (
        isinstance(value, int | float) and not value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {value!r}")
    return value


def _words(value: Any) -> list[str]:
    """An array of arguments, or a string split the way PM2 splits it."""
    if isinstance(value, list):
        return [_js_string(v) for v in value]
    if not isinstance(value, str):
        raise ValueError(f"must be an array or a string, not {value!r}")
    words = []
    for m in _WORD.finditer(value):
        word = m.group(0)
        if len(word) >= 2 and word[0] == word[-1] and word[0] in "\"'":
            word = word[1:-1]
        if word.strip():
            words.append(word)
    return words


def _count(value: Any) -> int:
    """A number of instances or restarts: an integer or a numeric string (PM2 parses
    it), "max" meaning as many as CPUs (returned as 0)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {value!r}")
    if value == "max":
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    raise ValueError(f"must be a whole number, not {value!r}")


def _milliseconds(value: Any) -> float:
    """Milliseconds as a number, or a string like ``"1500"``, ``"10s"``, ``"2m"``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = _STIME.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"must be milliseconds or a time like '10s', not {value!r}")
    return float(m.group(1)) * _STIME_FACTOR[m.group(2)]


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise ValueError(f"must be true or false, not {value!r}")


def _port(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value):
        raise ValueError(f"must be a port number, not {value!r}")
    return str(value)


def _js_string(value: Any) -> str:
    """A JSON scalar as JavaScript's String() writes it (PM2 passes env values so)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _binary(head: bytes) -> bool:
    """PM2's test of a file's first bytes (lib/tools/isbinaryfile.js): a NUL, or more
    than 10% bytes that are neither text controls, ASCII nor a well-formed 2- or 3-byte
    UTF-8 sequence (a UTF-8 byte order mark: text)."""
    size = len(head)
    if size == 0 or head.startswith(b"\xef\xbb\xbf"):
        return False
    suspicious, i = 0, 0
    while i < size:
        b = head[i]
        if b == 0:
            return True
        if (b < 7 or b > 14) and (b < 32 or b > 127):
            if 193 < b < 224 and i + 1 < size:
                i += 1
                if 127 < head[i] < 192:
                    i += 1
                    continue
            elif 223 < b < 240 and i + 2 < size:
                i += 1
                if 127 < head[i] < 192 and 127 < head[i + 1] < 192:
                    i += 2
                    continue
            suspicious += 1
            if i > 32 and suspicious * 100 / size > 10:
                return True
        i += 1
    return suspicious * 100 / size > 10
