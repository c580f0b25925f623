"""tenure.toml → the frozen model of :mod:`backend.model`.

The parser is strict: unknown keys, wrong types, out-of-range numbers, keys that do not
apply to a readiness or health kind, unknown ``after`` references and dependency cycles are
all errors. The FIRST problem found is raised as ``ConfigInvalid`` (code CONFIG_INVALID)
naming the file, the dotted key path and the line, with ``data = {file, key, line,
problem}``. The order of checks is fixed, so the same text always gives the same error.

The revision is the ``canonical_digest`` of :func:`canonical_form`: every field with its
default filled in, numbers normalised, names sorted. Formatting, comments and key order
therefore never change it; any semantic change does. The file path is not part of it.
docs/config.md is the reference for every key.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from typing import Any

from msgspec.structs import replace

from protocol.errors import ConfigInvalid

from .config_identity import IDENTITY_KEYS, parse_limits, parse_run_as
from .config_lines import (
    KeyPath,
    find_line,
    format_key,
    long_integer_location,
    syntax_error_location,
)
from .config_metrics import parse_metrics
from .config_retention import parse_retention
from .config_sockets import SOCKET_KEYS, check_addresses, check_probes, parse_sockets
from .config_values import (
    NAME_RE,
    Invalid,
    check_keys,
    get_argv,
    get_duration,
    get_enum,
    get_host,
    get_int,
    get_size,
    get_str,
    get_table,
    get_url,
    normalise_signal,
    parse_after,
    parse_cwd,
    parse_env,
    table,
)
from .configfile import file_error, read_config_text
from .jobs.config import parse_jobs
from .jobs.model import DEFAULT_MAX_PENDING, JobTemplate
from .model import (
    MAX_STOP_WAIT_S,
    UNENDING_STOP_SIGNALS,
    App,
    Backoff,
    Config,
    Health,
    HealthKind,
    Limits,
    MetricsSettings,
    Readiness,
    ReadyKind,
    RestartMode,
    RetentionSettings,
    RunAs,
    Settings,
    Stack,
    StartLimit,
    StopSpec,
    canonical_digest,
    plain,
)

__all__ = ["CONFIG_FORMAT", "MAX_COUNT", "MAX_INSTANCES", "canonical_form",
           "check_declares_something", "check_new",
           "config_error", "load_config", "order_apps", "parse_config", "parse_recent",
           "parsed_before"]

CONFIG_FORMAT = 1
"""Version of the canonical form; part of the revision."""
MAX_INSTANCES = 64
# a start limit's burst and a health check's failures, at most: as a job's max_pending
# and keep, far beyond any use, and a number every wire and store carries (inspect sends
# them as msgpack, which has no integer past 64 bits)
MAX_COUNT = 1_000_000
# an app's log_retention: the owner's bounds (owner.journalretention)
LOG_RETENTION_MIN, LOG_RETENTION_MAX = 1 << 20, 1 << 40
LOG_RETENTION_DEFAULT = 64 << 20   # what the owner's journal keeps unless told (owner.journal)

_APP_KEYS = ("command", "env", "cwd", "instances", "restart", "after", "backoff",
             "start_limit", "ready", "health", "stop", "log_retention", *IDENTITY_KEYS,
             *SOCKET_KEYS)
_PROBE_KEYS = {"tcp": ("port", "port_step", "host"), "http": ("url",), "exec": ("command",)}
_READY_KEYS: dict[ReadyKind, tuple[str, ...]] = {
    ReadyKind.NONE: (),
    ReadyKind.NOTIFY: ("timeout",),
    ReadyKind.DELAY: ("delay",),
    ReadyKind.TCP: (*_PROBE_KEYS["tcp"], "timeout", "interval"),
    ReadyKind.HTTP: (*_PROBE_KEYS["http"], "timeout", "interval"),
    ReadyKind.EXEC: (*_PROBE_KEYS["exec"], "timeout", "interval"),
}
_HEALTH_COMMON = ("interval", "timeout", "failures", "grace")


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and parse the tenure.toml at ``path``; ``Config.source`` is the path.

    Raises ConfigInvalid when the file cannot be read, is too large, is not UTF-8 or is
    not a valid configuration.
    """
    return parse_config(read_config_text(path), os.fspath(path))


TOO_DEEP = "arrays or tables nested too deeply to read"
TOO_LONG = (f"an integer of more than {sys.get_int_max_str_digits()} digits, too long to "
            "read (and far beyond what any key takes)")


def parse_config(text: str, source: str) -> Config:
    """Parse the TOML ``text`` (from ``source``, used in messages and ``Config.source``).

    Raises ConfigInvalid for the first syntax or semantic problem, with its key and line.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problem, line, key = syntax_error_location(str(e), text)
        raise file_error(source, key, line, problem) from None
    except ValueError:   # an integer of more digits than Python converts (the others
        at, key = long_integer_location(text)   # are TOMLDecodeError, a ValueError too)
        raise file_error(source, key, at, TOO_LONG) from None
    except RecursionError:
        raise file_error(source, "", None, TOO_DEEP) from None
    try:
        stacks, settings, metrics = _parse_document(doc)
        retention = parse_retention(get_table(doc, "retention", ()) or {})
    except Invalid as e:
        raise file_error(source, format_key(e.path), find_line(text, e.path), e.problem) from None
    except RecursionError:
        raise file_error(source, "", None, TOO_DEEP) from None
    config = Config(stacks=stacks, settings=settings, source=source, metrics=metrics,
                    retention=retention)
    return replace(config, revision=canonical_digest(canonical_form(config)))


def check_declares_something(config: Config) -> None:
    """Raises ConfigInvalid when ``config`` declares no app and no job: as a plan it
    would stop every application (an empty file, or `--config <(generate)` whose
    generator failed), which `tenure down` or `tenure stack stop` say plainly."""
    if any(stack.apps or stack.jobs for stack in config.stacks.values()):
        return
    raise file_error(config.source, "", None,
                     "declares no app and no job: applied, it would stop every application "
                     "(is it the file you meant, or did what generates it fail?); to stop "
                     "them all, `tenure down`, or `tenure stack stop STACK` for each stack")


def check_new(config: Config, text: str) -> None:
    """The checks a config must pass to be planned that a config already applied is not
    held to: each generation parses the applied config as it starts, and one of a
    release that added a check must still adopt what an older release applied (it
    says so in its log: :func:`backend.generation`). Raises ConfigInvalid with the key
    and line of the first app that fails one."""
    for app in config.apps():
        try:
            check_probes(app, ("stacks", app.stack, "apps", app.name))
        except Invalid as e:
            raise config_error(text, config.source, e.path, e.problem) from None


RECENT = 2   # parses a backend keeps (parse_recent)
_recent: dict[tuple[str, str], Config] = {}


def parse_recent(text: str, source: str) -> Config:
    """``parse_config(text, source)``, answered from the newest parses of this process
    when it parsed this very text from this source before: parsing depends on nothing
    else, and the config is frozen. A plan, its apply and the apply's operation each
    parse the same text (~13 ms for 200 apps), and a hot upgrade's standby parses the
    applied config while the incumbent is drained so that its generation does not
    parse it inside the pause (a config applied meanwhile is another text: parsed
    again). Raises ConfigInvalid (nothing is kept then)."""
    key = (text, source)
    config = _recent.pop(key, None)
    if config is None:
        config = parse_config(text, source)
    _recent[key] = config            # the newest last
    while len(_recent) > RECENT:
        del _recent[next(iter(_recent))]
    return config


def parsed_before(text: str, source: str) -> bool:
    """Whether :func:`parse_recent` holds the config of this text and source."""
    return (text, source) in _recent


def canonical_form(config: Config) -> dict[str, Any]:
    """The JSON-able form the revision is computed from: every field of every app with
    defaults filled in, names sorted; the source path is left out. Never raises."""
    return {
        "format": CONFIG_FORMAT,
        "settings": plain(config.settings),
        # only when set: configs without it keep their revision
        **({"metrics": plain(config.metrics)} if config.metrics.listen else {}),
        **({"retention": _retention_form(config.retention)}
           if config.retention != RetentionSettings() else {}),
        "stacks": {
            s.name: {"apps": {a.name: _app_form(a) for a in s.apps.values()},
                     # only when there are jobs: configs without any keep their revision
                     **({"jobs": {j.name: _job_form(j) for j in s.jobs.values()}}
                        if s.jobs else {})}
            for s in config.stacks.values()
        },
    }


def _retention_form(r: RetentionSettings) -> dict[str, Any]:
    """``[retention]`` as the revision sees it: a key added after the table existed
    appears only when set otherwise than its default, so that a config that does not
    set it keeps the revision an earlier release computed."""
    form = plain(r)
    if r.removed_app_logs_days == RetentionSettings().removed_app_logs_days:
        del form["removed_app_logs_days"]
    return dict(form)


def _not_default(value: int | None, default: int) -> int | None:
    """None for a value spelled out as the default: it changes nothing, so neither the
    revision nor a plan may say it does."""
    return None if value == default else value


def _app_form(app: App) -> dict[str, Any]:
    form: dict[str, Any] = plain(replace(app, env={}))
    form["env"] = dict(sorted(app.env.items()))
    form["after"] = sorted(app.after)
    # identity and limits only when set: the revision of a config without them stays
    # what it was before they existed (certificates and checkpoints carry revisions)
    for key, default in (("run_as", RunAs()), ("limits", Limits()), ("sockets", ()),
                         ("fd_store_max", 0), ("log_retention", None)):
        if getattr(app, key) == default:
            del form[key]
    return form


def _job_form(job: JobTemplate) -> dict[str, Any]:
    form: dict[str, Any] = plain(replace(job, env={}))
    form["env"] = dict(sorted(job.env.items()))
    form["after"] = sorted(job.after)
    # keys added later only when set: a config without them keeps its revision
    for key, default in (("run_as", RunAs()), ("max_pending", DEFAULT_MAX_PENDING)):
        if getattr(job, key) == default:
            del form[key]
    return form


def order_apps(stack: Stack) -> list[list[str]]:
    """Start order of ``stack`` as levels: level 0 has no ``after``; an app is in level
    n + 1 when the latest of its ``after`` apps is in level n. Names are sorted within a
    level. Raises ConfigInvalid if ``after`` names an unknown app or forms a cycle (never
    for a stack built by :func:`parse_config`)."""
    unknown = sorted(d for a in stack.apps.values() for d in a.after if d not in stack.apps)
    cycle = [] if unknown else _find_cycle(stack.apps)
    if unknown or cycle:
        problem = (f"unknown app {unknown[0]!r} in 'after'" if unknown
                   else "dependency cycle: " + " -> ".join(cycle))
        raise file_error("", format_key(("stacks", stack.name)), None, problem)
    level: dict[str, int] = {}
    pending = sorted(stack.apps)
    while pending:
        for name in [n for n in pending if all(d in level for d in stack.apps[n].after)]:
            level[name] = 1 + max((level[d] for d in stack.apps[name].after), default=-1)
        pending = [n for n in pending if n not in level]
    layers: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for name in sorted(level):
        layers[level[name]].append(name)
    return layers


def config_error(text: str, source: str, path: KeyPath, problem: str) -> ConfigInvalid:
    """CONFIG_INVALID for ``problem`` at key ``path`` of ``text`` (from ``source``), with
    the line, for checks made after parsing (backend.enforce). Never raises."""
    return file_error(source, format_key(path), find_line(text, path), problem)


def _parse_document(doc: Mapping[str, Any],
                    ) -> tuple[dict[str, Stack], Settings, MetricsSettings]:
    """Raises Invalid."""
    check_keys(doc, ("settings", "metrics", "retention", "stacks"), ())
    settings = _parse_settings(get_table(doc, "settings", ()) or {})
    metrics = parse_metrics(get_table(doc, "metrics", ()) or {})
    raw = get_table(doc, "stacks", ()) or {}
    stacks: dict[str, Stack] = {}
    for name in raw:
        _check_name(name, ("stacks", name), "stack")
        stacks[name] = _parse_stack(name, table(raw[name], ("stacks", name)))
    check_addresses([a for s in stacks.values() for a in s.apps.values()], metrics.listen)
    return dict(sorted(stacks.items())), settings, metrics


def _check_name(name: str, path: KeyPath, what: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise Invalid(path, f"invalid {what} name {name!r}: use 1-64 letters, digits, "
                            "'_', '.' or '-', starting with a letter or digit")


def _parse_settings(t: Mapping[str, Any]) -> Settings:
    path: KeyPath = ("settings",)
    check_keys(t, ("viewer_group",), path)
    group = get_str(t, "viewer_group", path, None)
    if group is not None and (group.startswith("-") or any(c in group for c in ": \t\n")):
        raise Invalid((*path, "viewer_group"), f"invalid group name {group!r}")
    return Settings(viewer_group=group)


def _parse_stack(name: str, t: Mapping[str, Any]) -> Stack:
    path: KeyPath = ("stacks", name)
    check_keys(t, ("apps", "jobs"), path)
    raw = get_table(t, "apps", path)
    raw_jobs = get_table(t, "jobs", path)
    if not raw and not raw_jobs:
        raise Invalid((*path, "apps"), "a stack needs at least one app or job")
    apps: dict[str, App] = {}
    for app_name, value in (raw or {}).items():
        here = (*path, "apps", app_name)
        _check_name(app_name, here, "app")
        apps[app_name] = _parse_app(name, app_name, table(value, here))
    _check_after(name, apps)
    return Stack(name=name, apps=dict(sorted(apps.items())),
                 jobs=parse_jobs(name, raw_jobs, apps))


def _parse_app(stack: str, name: str, t: Mapping[str, Any]) -> App:
    path: KeyPath = ("stacks", stack, "apps", name)
    check_keys(t, _APP_KEYS, path)
    command = get_argv(t, "command", path)
    if command is None:
        raise Invalid((*path, "command"), "is required: the program and its arguments")
    instances = get_int(t, "instances", path, 1, 1, MAX_INSTANCES)
    ready = _parse_ready(get_table(t, "ready", path), (*path, "ready"), instances)
    health_t = get_table(t, "health", path)
    health = None if health_t is None else _parse_health(health_t, (*path, "health"),
                                                         instances)
    app = App(
        name=name, stack=stack, command=command,
        env=parse_env(t, path), cwd=parse_cwd(t, path), instances=instances,
        restart=get_enum(t, "restart", path, RestartMode, RestartMode.ON_FAILURE),
        backoff=_parse_backoff(get_table(t, "backoff", path) or {}, (*path, "backoff")),
        start_limit=_parse_start_limit(get_table(t, "start_limit", path) or {},
                                       (*path, "start_limit")),
        ready=ready, health=health,
        stop=_parse_stop(get_table(t, "stop", path) or {}, (*path, "stop")),
        after=parse_after(t, path),
        run_as=parse_run_as(t, path), limits=parse_limits(t, path),
        **parse_sockets(t, path),
        log_retention=_not_default(get_size(t, "log_retention", path, LOG_RETENTION_MIN,
                                            LOG_RETENTION_MAX), LOG_RETENTION_DEFAULT),
    )
    return app


def _check_after(stack: str, apps: Mapping[str, App]) -> None:
    """Every ``after`` names an app of the stack and there is no cycle. Raises Invalid."""
    for name in apps:
        for dep in apps[name].after:
            if dep not in apps:
                raise Invalid(("stacks", stack, "apps", name, "after"),
                              f"unknown app {dep!r} in stack {stack!r}")
    cycle = _find_cycle(apps)
    if cycle:
        raise Invalid(("stacks", stack, "apps", cycle[0], "after"),
                      "dependency cycle: " + " -> ".join(cycle))


def _find_cycle(apps: Mapping[str, App]) -> list[str]:
    """A cycle of ``after`` edges as ``[a, ..., a]``, or ``[]``. Deterministic; iterative,
    so a long chain cannot exhaust the stack. Never raises."""
    left = set(apps)
    changed = True
    while changed:  # peel off every app whose after apps are all placed
        placed = {n for n in left if not any(d in left for d in apps[n].after)}
        left -= placed
        changed = bool(placed)
    if not left:
        return []
    # every app left has an after app that is left too: walking them must repeat
    trail = [min(left)]
    while True:
        nxt = min(d for d in apps[trail[-1]].after if d in left)
        if nxt in trail:
            return [*trail[trail.index(nxt):], nxt]
        trail.append(nxt)


def _parse_backoff(t: Mapping[str, Any], path: KeyPath) -> Backoff:
    check_keys(t, ("initial", "max", "factor", "reset_after"), path)
    d = Backoff()
    initial = get_duration(t, "initial", path, d.initial)
    maximum = get_duration(t, "max", path, d.max)
    if maximum < initial:
        key = "max" if "max" in t else "initial"
        raise Invalid((*path, key), f"max ({maximum:g}) must be >= initial ({initial:g})")
    return Backoff(initial=initial, max=maximum,
                   factor=get_duration(t, "factor", path, d.factor, minimum=1.0),
                   reset_after=get_duration(t, "reset_after", path, d.reset_after))


def _parse_start_limit(t: Mapping[str, Any], path: KeyPath) -> StartLimit:
    check_keys(t, ("burst", "interval"), path)
    d = StartLimit()
    return StartLimit(burst=get_int(t, "burst", path, d.burst, 1, MAX_COUNT),
                      interval=get_duration(t, "interval", path, d.interval, positive=True))


def _parse_stop(t: Mapping[str, Any], path: KeyPath) -> StopSpec:
    check_keys(t, ("signal", "timeout", "kill_after"), path)
    d = StopSpec()
    sig = normalise_signal(t, "signal", path, d.signal)
    if sig in UNENDING_STOP_SIGNALS:
        raise Invalid((*path, "signal"), f"SIG{sig} never ends a process: every stop would "
                      "wait out its timeout, then SIGKILL")
    return StopSpec(signal=sig,
                    timeout=get_duration(t, "timeout", path, d.timeout, positive=True,
                                         maximum=MAX_STOP_WAIT_S),
                    kill_after=get_duration(t, "kill_after", path, d.kill_after,
                                            positive=True, maximum=MAX_STOP_WAIT_S))


def _parse_ready(t: Mapping[str, Any] | None, path: KeyPath, instances: int) -> Readiness:
    if t is None:
        return Readiness()
    check_keys(t, ("kind", "delay", "timeout", "interval", *_PROBE_KEYS["tcp"],
                   *_PROBE_KEYS["http"], *_PROBE_KEYS["exec"]), path)
    kind = get_enum(t, "kind", path, ReadyKind, ReadyKind.NONE)
    check_keys(t, ("kind", *_READY_KEYS[kind]), path,
               f"does not apply to ready kind {kind.value!r}")
    d = Readiness()
    port, step, host, url, command = _parse_probe(t, path, kind.value, instances)
    delay = get_duration(t, "delay", path, d.delay)
    if kind is ReadyKind.DELAY and delay <= 0:
        raise Invalid((*path, "delay"), "ready kind 'delay' needs delay > 0")
    return Readiness(kind=kind, port=port, port_step=step, host=host, url=url,
                     command=command, delay=delay,
                     timeout=get_duration(t, "timeout", path, d.timeout, positive=True),
                     interval=get_duration(t, "interval", path, d.interval, positive=True))


def _parse_health(t: Mapping[str, Any], path: KeyPath, instances: int) -> Health:
    check_keys(t, ("kind", *_HEALTH_COMMON, *_PROBE_KEYS["tcp"], *_PROBE_KEYS["http"],
                   *_PROBE_KEYS["exec"]), path)
    kind = get_enum(t, "kind", path, HealthKind, None)
    check_keys(t, ("kind", *_HEALTH_COMMON, *_PROBE_KEYS[kind.value]), path,
               f"does not apply to health kind {kind.value!r}")
    d = Health(kind=kind)
    port, step, host, url, command = _parse_probe(t, path, kind.value, instances)
    return Health(kind=kind, port=port, port_step=step, host=host, url=url,
                  command=command,
                  interval=get_duration(t, "interval", path, d.interval, positive=True),
                  timeout=get_duration(t, "timeout", path, d.timeout, positive=True),
                  failures=get_int(t, "failures", path, d.failures, 1, MAX_COUNT),
                  grace=get_duration(t, "grace", path, d.grace))


_Probe = tuple[int | None, int, str, str | None, tuple[str, ...]]


def _parse_probe(t: Mapping[str, Any], path: KeyPath, kind: str, instances: int) -> _Probe:
    """The kind-specific keys shared by readiness and health: (port, port_step, host, url,
    command). Raises Invalid when the kind's required key is missing or ports collide."""
    port = get_int(t, "port", path, 0, 1, 65535) or None
    step = get_int(t, "port_step", path, 0, 0, 65535)
    host = get_host(t, "host", path, "127.0.0.1")
    url = get_url(t, "url", path)
    command = get_argv(t, "command", path) or ()
    if kind == "tcp":
        if port is None:
            raise Invalid((*path, "port"), "kind 'tcp' needs a port")
        if instances > 1 and step < 1:
            raise Invalid((*path, "port_step"), f"{instances} instances cannot listen on "
                          "one port: set port_step >= 1")
        last = port + (instances - 1) * step
        if last > 65535:
            raise Invalid((*path, "port_step"), f"instance {instances - 1} would use port "
                          f"{last} (> 65535)")
    if kind == "http" and url is None:
        raise Invalid((*path, "url"), "kind 'http' needs a url (http://...)")
    if kind == "exec" and not command:
        raise Invalid((*path, "command"), "kind 'exec' needs a command")
    return port, step, host, url, command
