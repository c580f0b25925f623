"""Typed readers for the values of a parsed tenure.toml table.

Every reader takes the table, the key and the table's key path, returns the typed value
(or the default when the key is absent) and raises :class:`Invalid` naming the exact key
path otherwise. ``backend.config`` turns :class:`Invalid` into ``ConfigInvalid`` with the
file and line; nothing here knows about files.
"""

from __future__ import annotations

import ipaddress
import math
import re
import signal
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .config_lines import KeyPath

__all__ = [
    "NAME_RE",
    "Invalid",
    "check_keys",
    "fits_exec",
    "get_argv",
    "get_duration",
    "get_enum",
    "get_host",
    "get_int",
    "get_str",
    "get_table",
    "get_url",
    "normalise_signal",
    "parse_after",
    "parse_cwd",
    "parse_env",
    "shown",
    "table",
]

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")

E = TypeVar("E", bound=StrEnum)


class Invalid(Exception):  # internal: never leaves backend.config
    """The first problem found: ``path`` is the key it concerns."""

    def __init__(self, path: KeyPath, problem: str) -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
             list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def table(value: Any, path: KeyPath) -> dict[str, Any]:
    """``value`` as a table. Raises Invalid if it is anything else."""
    if not isinstance(value, dict):
        raise Invalid(path, f"must be a table, not {_type_name(value)}")
    return value


def get_table(t: Mapping[str, Any], key: str, path: KeyPath) -> dict[str, Any] | None:
    """The sub-table ``key`` or None when absent. Raises Invalid if it is not a table."""
    return table(t[key], (*path, key)) if key in t else None


def check_keys(t: Mapping[str, Any], allowed: Collection[str], path: KeyPath,
               why: str = "") -> None:
    """Raises Invalid naming the first key of ``t`` (document order) not in ``allowed``."""
    for key in t:
        if key not in allowed:
            raise Invalid((*path, key), why or _unknown(key, allowed))


def _unknown(key: str, allowed: Collection[str]) -> str:
    """"unknown key", the likeliest key meant (a typo's) and every key allowed there."""
    import difflib  # only a bad config pays for it
    names = sorted(allowed)
    near = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
    meant = f" (did you mean {near[0]}?)" if near else ""
    return f"unknown key{meant}; allowed: " + ", ".join(names)


def get_int(t: Mapping[str, Any], key: str, path: KeyPath, default: int,
            lo: int, hi: int | None = None) -> int:
    """An integer in ``lo..hi`` (booleans are not integers). Raises Invalid."""
    if key not in t:
        return default
    value = t[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid((*path, key), f"must be an integer, not {_type_name(value)}")
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise Invalid((*path, key), f"must be {bound}, not {shown(value)}")
    return value


_SHOWN_DIGITS = 24


def shown(value: Any) -> str:
    """``value`` for a message (its repr); an integer too long to read is said to be.
    (A hex literal's may be too long even to format: ``repr()`` raises ValueError past
    4300 digits.)"""
    if isinstance(value, int) and abs(value) >= 10 ** _SHOWN_DIGITS:
        return f"{'a negative' if value < 0 else 'an'} integer of more than " \
               f"{_SHOWN_DIGITS} digits"
    return repr(value)


_SIZE = re.compile(r"([0-9]+)\s*([KMGT]?)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def get_size(t: Mapping[str, Any], key: str, path: KeyPath, lo: int, hi: int) -> int | None:
    """Bytes in ``lo..hi``: an integer, or a size like "512M", "64MiB" or "2G" (powers of
    1024); None when absent. Raises Invalid."""
    if key not in t:
        return None
    value = t[key]
    if not isinstance(value, str):
        return get_int(t, key, path, 0, lo, hi)
    try:
        n = parse_size(value)
    except ValueError:
        raise Invalid((*path, key), f"must be bytes (an integer) or a size like "
                                    f"\"512M\" or \"2G\", not {value!r}") from None
    if not lo <= n <= hi:
        raise Invalid((*path, key), f"must be {_size_text(lo)} to {_size_text(hi)}, "
                                    f"not {value!r}" if lo > 1 else "must be at least 1 byte")
    return n


def parse_size(text: str) -> int:
    """Bytes of ``text``: digits with an optional K, M, G or T (KB, MiB, ...: powers of
    1024, any case), as tenure.toml and supervisord's sizes write them. Raises
    ValueError."""
    m = _SIZE.fullmatch(text.strip().upper().removesuffix("B").removesuffix("I"))
    if m is None:
        raise ValueError(f"not a size (bytes, or like \"512M\", \"50MB\" or \"2G\"): "
                         f"{text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def _size_text(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}iB"
    return f"{n} bytes"


def get_duration(t: Mapping[str, Any], key: str, path: KeyPath, default: float,
                 positive: bool = False, minimum: float = 0.0,
                 maximum: float | None = None) -> float:
    """Seconds as a finite float >= ``minimum`` (> 0 if ``positive``) and at most
    ``maximum`` if given; integers are fine. Raises Invalid."""
    if key not in t:
        return default
    value = t[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid((*path, key), f"must be a number, not {_type_name(value)}")
    number, here, said = _seconds(value), (*path, key), shown(value)
    if isinstance(value, float) and not math.isfinite(value):   # inf, -inf, nan
        raise Invalid(here, f"must be a finite number, not {said}")
    if positive and number <= 0:
        raise Invalid(here, f"must be > 0, not {said}")
    if number < minimum:
        raise Invalid(here, f"must be >= {minimum:g}, not {said}")
    if maximum is not None and number > maximum:
        raise Invalid(here, f"must be at most {maximum:g} s, not {said}")
    if math.isinf(number):   # an integer past the largest float, and no maximum
        raise Invalid(here, f"must be a finite number, not {said}")
    return number


def _seconds(value: int | float) -> float:
    """``value`` as a float; an integer past the largest float (``float()`` raises
    OverflowError) as the infinity of its sign, which the range checks refuse."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def get_str(t: Mapping[str, Any], key: str, path: KeyPath, default: str | None,
            nonempty: bool = True) -> str | None:
    """A string without NUL (non-empty unless told). Raises Invalid."""
    if key not in t:
        return default
    return _string(t[key], (*path, key), nonempty)


def _string(value: Any, path: KeyPath, nonempty: bool) -> str:
    if not isinstance(value, str):
        raise Invalid(path, f"must be a string, not {_type_name(value)}")
    if "\0" in value:
        raise Invalid(path, "must not contain a NUL character")
    if nonempty and not value:
        raise Invalid(path, "must not be empty")
    return value


def get_argv(t: Mapping[str, Any], key: str, path: KeyPath) -> tuple[str, ...] | None:
    """A non-empty array of strings whose first element, the program, is not empty or
    blank (a slip: its launch would only fail, "not found in PATH"), or None when absent.
    Raises Invalid."""
    if key not in t:
        return None
    value, here = t[key], (*path, key)
    if not isinstance(value, list):
        raise Invalid(here, f"must be an array of strings, not {_type_name(value)}")
    if not value:
        raise Invalid(here, "must not be empty (the program to run comes first)")
    argv = tuple(_string(v, (*here, i), nonempty=False) for i, v in enumerate(value))
    for i, arg in enumerate(argv):
        _fits_exec((*here, i), arg)
    if not argv[0].strip():
        raise Invalid((*here, 0), "the program name must not be empty or blank")
    return argv


def get_enum(t: Mapping[str, Any], key: str, path: KeyPath, enum: type[E],
             default: E | None) -> E:
    """A member of the StrEnum ``enum`` given by value. Raises Invalid (also when the key
    is absent and there is no default)."""
    here = (*path, key)
    choices = " | ".join(m.value for m in enum)
    if key not in t:
        if default is None:
            raise Invalid(here, f"is required: one of {choices}")
        return default
    value = t[key]
    if not isinstance(value, str):
        raise Invalid(here, f"must be a string ({choices}), not {_type_name(value)}")
    try:
        return enum(value)
    except ValueError:
        raise Invalid(here, f"must be one of {choices}, not {value!r}") from None


def get_url(t: Mapping[str, Any], key: str, path: KeyPath) -> str | None:
    """An ``http://host[:port]/...`` URL. Raises Invalid."""
    url = get_str(t, key, path, None)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "http" or not parts.hostname \
            or any(c.isspace() for c in url):
        raise Invalid((*path, key), f"must be an http:// URL with a host, not {url!r}")
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:   # out of range, or not a number
        port_ok = False
    if not port_ok:
        raise Invalid((*path, key), f"the port of {url!r} must be a number 1..65535")
    return url


def get_host(t: Mapping[str, Any], key: str, path: KeyPath, default: str) -> str:
    """An IP address or a host name. Raises Invalid."""
    host = get_str(t, key, path, default)
    assert host is not None
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not _HOSTNAME_RE.fullmatch(host):
        raise Invalid((*path, key), f"must be an IP address or a host name, not {host!r}")
    return host


def normalise_signal(t: Mapping[str, Any], key: str, path: KeyPath, default: str) -> str:
    """A signal name ("TERM", "SIGTERM", "int"), returned as the canonical name without
    the SIG prefix (aliases like IOT become ABRT). Raises Invalid."""
    name = get_str(t, key, path, default)
    assert name is not None
    upper = name.upper()
    full = upper if upper.startswith("SIG") else "SIG" + upper
    member = signal.Signals.__members__.get(full)
    if member is None or full.startswith("SIG_"):
        raise Invalid((*path, key), f"unknown signal {name!r}")
    return member.name.removeprefix("SIG")


def parse_env(t: Mapping[str, Any], path: KeyPath) -> dict[str, str]:
    """An ``env`` table of strings (apps and jobs). Raises Invalid."""
    env = get_table(t, "env", path) or {}
    here = (*path, "env")
    for key in env:
        if not key or "=" in key or "\0" in key:
            raise Invalid((*here, key), "invalid variable name (empty, or has '=' or NUL)")
        _fits_exec((*here, key), f"{key}={get_str(env, key, here, None, nonempty=False)}")
    return dict(sorted(env.items()))


# Linux refuses an exec whose argument or environment string is longer than this
# (MAX_ARG_STRLEN, 32 pages, with its NUL): every start would fail "Argument list too long"
MAX_EXEC_STRING = 131072


def fits_exec(text: str) -> bool:
    """Whether an exec can take ``text`` (an argument, or an environment entry
    ``KEY=value``): at most MAX_EXEC_STRING bytes with its NUL."""
    return len(text.encode()) + 1 <= MAX_EXEC_STRING


def _fits_exec(path: KeyPath, text: str) -> None:
    """Raises Invalid when ``text`` (an argument, or an environment entry ``KEY=value``)
    is too long for any exec to take."""
    if not fits_exec(text):
        size = len(text.encode()) + 1
        raise Invalid(path, f"is {size} bytes; Linux execs no argument or environment "
                      f"entry over {MAX_EXEC_STRING} bytes (with its NUL), so no start of it "
                      "could succeed")


def parse_cwd(t: Mapping[str, Any], path: KeyPath) -> str | None:
    """An absolute ``cwd`` or None (apps and jobs). Raises Invalid."""
    cwd = get_str(t, "cwd", path, None)
    if cwd is not None and not cwd.startswith("/"):
        raise Invalid((*path, "cwd"), f"must be an absolute path, not {cwd!r}")
    return cwd


def parse_after(t: Mapping[str, Any], path: KeyPath) -> tuple[str, ...]:
    """An ``after`` array of distinct app names, sorted (apps and jobs). Raises
    Invalid."""
    if "after" not in t:
        return ()
    value, here = t["after"], (*path, "after")
    if not isinstance(value, list):
        raise Invalid(here, "must be an array of app names")
    seen: set[str] = set()
    for i, item in enumerate(value):
        if not isinstance(item, str) or not NAME_RE.fullmatch(item):
            raise Invalid((*here, i), f"must be an app name, not {item!r}")
        if item in seen:
            raise Invalid((*here, i), f"{item!r} is listed twice")
        seen.add(item)
    return tuple(sorted(seen))
