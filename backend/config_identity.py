"""The identity and limits keys of an app in tenure.toml: ``user``, ``group``,
``supplementary_groups``, ``umask`` (:data:`RUN_AS_KEYS`, which job templates take too)
and the ``limits`` table (docs/config.md).

Only their shape is checked here; whether the names exist and whether the owner can
enforce them depends on the host and is checked when a plan is made
(:mod:`backend.enforce`), so a config saved earlier always parses again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .config_lines import KeyPath
from .config_values import Invalid, check_keys, get_int, get_size, get_str, get_table, shown
from .model import Limits, RunAs

__all__ = ["IDENTITY_KEYS", "RUN_AS_KEYS", "parse_limits", "parse_run_as"]

RUN_AS_KEYS = ("user", "group", "supplementary_groups", "umask")  # apps and job templates
IDENTITY_KEYS = (*RUN_AS_KEYS, "limits")
LIMIT_KEYS = ("nofile", "nproc", "core", "memory_max", "cpu_quota", "pids_max")
MAX_GROUPS = 64
MAX_CPUS = 4096.0
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,255}")  # no ':', '/', space, leading '-'
_UMASK = re.compile(r"0?[0-7]{3}")
_MAX_INT = 2**62


def _account(t: Mapping[str, Any], key: str, path: KeyPath) -> str | None:
    name = get_str(t, key, path, None)
    if name is not None and not _NAME.fullmatch(name):
        raise Invalid((*path, key), f"invalid {key.replace('_', ' ')} name {name!r}")
    return name


def _groups(t: Mapping[str, Any], path: KeyPath) -> tuple[str, ...]:
    if "supplementary_groups" not in t:
        return ()
    value, here = t["supplementary_groups"], (*path, "supplementary_groups")
    if not isinstance(value, list) or len(value) > MAX_GROUPS:
        raise Invalid(here, f"must be an array of at most {MAX_GROUPS} group names")
    seen: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _NAME.fullmatch(item):
            raise Invalid((*here, i), f"must be a group name, not {item!r}")
        if item in seen:
            raise Invalid((*here, i), f"{item!r} is listed twice")
        seen.append(item)
    return tuple(seen)


def _umask(t: Mapping[str, Any], path: KeyPath) -> int | None:
    if "umask" not in t:
        return None
    value, here = t["umask"], (*path, "umask")
    if isinstance(value, str) and _UMASK.fullmatch(value):
        return int(value, 8)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777:
        return value
    raise Invalid(here, f"must be an octal string like \"0027\" or an integer like 0o027 "
                        f"(0 to 0o777), not {shown(value)}")


def parse_run_as(t: Mapping[str, Any], path: KeyPath) -> RunAs:
    """The identity keys of the app or job template at ``path``. Raises Invalid (a bad
    name, a group without a user, a umask out of range)."""
    user = _account(t, "user", path)
    group = _account(t, "group", path)
    groups = _groups(t, path)
    if user is None and (group is not None or groups):
        key = "group" if group is not None else "supplementary_groups"
        raise Invalid((*path, key), "needs user: the group of which user?")
    return RunAs(user=user, group=group, supplementary_groups=groups, umask=_umask(t, path))


def _rlimit(t: Mapping[str, Any], key: str, path: KeyPath) -> int | None:
    if key not in t:
        return None
    if t[key] == "infinity":
        return -1
    if isinstance(t[key], str):
        raise Invalid((*path, key), f"must be an integer >= 0 or \"infinity\", not {t[key]!r}")
    return get_int(t, key, path, 0, 0, _MAX_INT)


def _cpus(t: Mapping[str, Any], path: KeyPath) -> float | None:
    if "cpu_quota" not in t:
        return None
    value = t["cpu_quota"]
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0.01 <= value <= MAX_CPUS:
        raise Invalid((*path, "cpu_quota"), f"must be a number of CPUs between 0.01 and "
                                            f"{MAX_CPUS:.0f}, not {shown(value)}")
    return float(value)


def parse_limits(t: Mapping[str, Any], path: KeyPath) -> Limits:
    """The app's ``limits`` table. Raises Invalid."""
    lt = get_table(t, "limits", path)
    if lt is None:
        return Limits()
    here = (*path, "limits")
    check_keys(lt, LIMIT_KEYS, here)
    return Limits(nofile=_rlimit(lt, "nofile", here), nproc=_rlimit(lt, "nproc", here),
                  core=_rlimit(lt, "core", here),
                  memory_max=get_size(lt, "memory_max", here, 1, _MAX_INT),
                  cpu_quota=_cpus(lt, here), pids_max=get_int(lt, "pids_max", here, 0, 1,
                                                              _MAX_INT) or None)
