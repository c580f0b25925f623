"""``[stacks.<stack>.jobs.<name>]`` tables → :class:`JobTemplate`.

Strict like the rest of tenure.toml (backend.config): unknown keys, wrong types, bad
cron expressions, unknown time zones and ``after`` names that are not apps of the stack
raise :class:`Invalid` naming the key path, which backend.config turns into
``CONFIG_INVALID`` with the file and line. docs/config.md is the reference.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..config_identity import RUN_AS_KEYS, parse_run_as
from ..config_lines import KeyPath
from ..config_values import (
    NAME_RE,
    Invalid,
    check_keys,
    get_argv,
    get_duration,
    get_int,
    get_str,
    get_table,
    parse_after,
    parse_cwd,
    parse_env,
    table,
)
from ..model import plain
from .model import DEFAULT_KEEP, DEFAULT_MAX_PENDING, JobTemplate, Retention, Schedule

if TYPE_CHECKING:
    from ..model import Config

__all__ = ["MAX_CONCURRENT", "MAX_PENDING", "check_cron", "check_time_zone", "job_changes",
           "parse_jobs"]

MAX_CONCURRENT = 64
MAX_PENDING = 1_000_000
MAX_KEEP = 1_000_000
_KEYS = ("command", "env", "cwd", "timeout", "max_concurrent", "max_pending", "retention",
         "schedule", "time_zone", "catch_up", "after", *RUN_AS_KEYS)
_SCHEDULE_ONLY = ("time_zone", "catch_up")


def parse_jobs(stack: str, raw: Mapping[str, Any] | None, apps: Collection[str]
               ) -> dict[str, JobTemplate]:
    """Every job template of ``stack`` (``raw`` is its ``jobs`` table, None if absent);
    ``apps`` are the stack's app names, which ``after`` may name. Raises Invalid."""
    out: dict[str, JobTemplate] = {}
    for name, value in (raw or {}).items():
        here: KeyPath = ("stacks", stack, "jobs", name)
        if not NAME_RE.fullmatch(name):
            raise Invalid(here, f"invalid job name {name!r}: use 1-64 letters, digits, "
                                "'_', '.' or '-', starting with a letter or digit")
        out[name] = _parse_job(stack, name, table(value, here), apps)
    return dict(sorted(out.items()))


def _parse_job(stack: str, name: str, t: Mapping[str, Any], apps: Collection[str]
               ) -> JobTemplate:
    path: KeyPath = ("stacks", stack, "jobs", name)
    check_keys(t, _KEYS, path)
    command = get_argv(t, "command", path)
    if command is None:
        raise Invalid((*path, "command"), "is required: the program and its arguments")
    timeout = get_duration(t, "timeout", path, 0.0)
    return JobTemplate(
        name=name, stack=stack, command=command, env=parse_env(t, path),
        cwd=parse_cwd(t, path), timeout=timeout or None,
        max_concurrent=get_int(t, "max_concurrent", path, 1, 1, MAX_CONCURRENT),
        max_pending=get_int(t, "max_pending", path, DEFAULT_MAX_PENDING, 1, MAX_PENDING),
        run_as=parse_run_as(t, path),
        retention=_parse_retention(get_table(t, "retention", path), (*path, "retention")),
        schedule=_parse_schedule(t, path), after=_parse_after(t, path, apps))


def _parse_retention(t: Mapping[str, Any] | None, path: KeyPath) -> Retention:
    if t is None:
        return Retention()
    check_keys(t, ("keep", "days"), path)
    keep = get_int(t, "keep", path, 0, 1, MAX_KEEP) if "keep" in t else None
    days = get_duration(t, "days", path, 0.0, positive=True) if "days" in t else None
    if keep is None and days is None:
        keep = DEFAULT_KEEP  # an empty table means the defaults, like any other table
    return Retention(keep=keep, days=days)


def _parse_schedule(t: Mapping[str, Any], path: KeyPath) -> Schedule | None:
    cron = get_str(t, "schedule", path, None)
    if cron is None:
        for key in _SCHEDULE_ONLY:
            if key in t:
                raise Invalid((*path, key), "only applies with a schedule")
        return None
    problem = check_cron(cron)
    if problem:
        raise Invalid((*path, "schedule"), problem)
    zone = get_str(t, "time_zone", path, "UTC")
    assert zone is not None
    problem = check_time_zone(zone)
    if problem:
        raise Invalid((*path, "time_zone"), problem)
    catch_up = t.get("catch_up", False)
    if not isinstance(catch_up, bool):
        raise Invalid((*path, "catch_up"), "must be a boolean (true or false)")
    return Schedule(cron=" ".join(cron.split()), time_zone=zone, catch_up=catch_up)


def check_cron(expr: str) -> str | None:
    """Why ``expr`` is not a 5-field cron expression (minute hour day month weekday),
    or None when it is one."""
    from cronsim import CronSim, CronSimError  # only configs with schedules need it
    fields = expr.split()
    if len(fields) != 5:
        return (f"must be a 5-field cron expression (minute hour day-of-month month "
                f"day-of-week), not {expr!r}")
    try:
        from datetime import UTC, datetime
        CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return f"is not a valid cron expression ({exc}): {expr!r}"
    return None


def check_time_zone(zone: str) -> str | None:
    """Why ``zone`` is not an IANA time zone name known to this system, or None."""
    import zoneinfo
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {zone!r} (an IANA name such as 'Europe/Riga' or 'UTC')"
    return None


def _parse_after(t: Mapping[str, Any], path: KeyPath, apps: Collection[str]
                 ) -> tuple[str, ...]:
    after = parse_after(t, path)
    for i, item in enumerate(t.get("after") or ()):
        if item not in apps:
            raise Invalid((*path, "after", i), f"unknown app {item!r} in stack {path[1]!r}")
    return after


def job_changes(old: Config, new: Config) -> list[dict[str, str]]:
    """The job templates a config change adds, changes or removes, sorted. (Applying it
    touches no record: admitted records keep what they were admitted with.)"""
    before = {j.key: plain(j) for j in old.jobs()}
    after = {j.key: plain(j) for j in new.jobs()}
    out = [{"action": "add", "job": k} for k in after if k not in before]
    out += [{"action": "change", "job": k} for k in after if k in before
            and after[k] != before[k]]
    out += [{"action": "remove", "job": k} for k in before if k not in after]
    return sorted(out, key=lambda c: (c["job"], c["action"]))
