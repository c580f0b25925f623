"""The request shapes of the owner's RPC methods (owner.service checks each request
against its method's before the handler runs), with the checks of their fields that
protocol.schema does not provide: lists of apps and sources, journal budgets, notes and
socket keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.schema import Field, Schema, check_int, check_key, check_name, check_str_map

from . import stoporder
from .journalforget import APPS_PAGE, MAX_APPS, MAX_SOURCES
from .journalretention import MAX_RETENTION, MIN_RETENTION
from .notes import MAX_NOTE
from .sockets import MAX_SOCKETS

__all__ = [
    "LOGS_PAGE_BYTES",
    "LOGS_PAGE_BYTES_MAX",
    "MAX_BUDGETS",
    "SOCKET_KEY_MAX",
    "S_ACK",
    "S_APPS",
    "S_FDSTORE",
    "S_FENCE",
    "S_FORGET",
    "S_FORGET_APPS",
    "S_INTENT",
    "S_INVENTORY",
    "S_KEY",
    "S_LAUNCH",
    "S_LOGS",
    "S_METRICS",
    "S_NOTE",
    "S_OBS",
    "S_PIN",
    "S_PRUNE",
    "S_RETENTION",
    "S_SIGNAL",
    "S_SOCKET",
    "S_SOCKET_UPDATE",
    "S_STOP",
    "S_STOP_ORDER",
]

MAX_BUDGETS = 10_000   # apps named in one logs.retention call

LOGS_PAGE_BYTES = 1 << 20
"""Default byte budget of one logs.read answer; at most LOGS_PAGE_BYTES_MAX, which with
one 16 KiB line over it stays well inside the 4 MiB frame."""
LOGS_PAGE_BYTES_MAX = 3 << 20

_name = check_name(128)
_uint = check_int(0, 2**62)
S_PIN = Schema(Field("public_key", str))
S_FENCE = Schema(Field("grant", dict))
S_LAUNCH = Schema(
    Field("launch_key", str, check=check_key(200)),
    Field("stack", str, check=_name), Field("app", str, check=_name),
    Field("instance", int, check=_uint), Field("generation", int, check=_uint),
    Field("argv", list), Field("env", dict, required=False, default={}, check=check_str_map),
    Field("cwd", str, required=False), Field("stop", dict, required=False, default={}),
    Field("intent_revision", int, required=False, check=_uint),
    Field("identity", dict, required=False), Field("limits", dict, required=False),
    Field("sockets", list, required=False), Field("fd_store_max", int, required=False),
)
S_KEY = Schema(Field("launch_key", str, check=check_key(200)))
S_STOP = Schema(Field("launch_key", str, check=check_key(200)),
                Field("policy", dict, required=False))
S_SIGNAL = Schema(Field("launch_key", str, check=check_key(200)),
                  Field("signal", (str, int)), Field("group", bool, required=False, default=True))
S_INTENT = Schema(Field("stack", str, check=_name), Field("intent", str),
                  Field("expected_revision", int, check=_uint))
S_STOP_ORDER = Schema(Field("stacks", dict, check=stoporder.check_order))
S_LOGS = Schema(Field("after", int, required=False, default=0, check=_uint),
                Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)),
                Field("max_bytes", int, required=False, default=LOGS_PAGE_BYTES,
                      check=check_int(1024, LOGS_PAGE_BYTES_MAX)),
                Field("tail", int, required=False, check=_uint),
                Field("stack", str, required=False, check=_name),
                Field("app", str, required=False, check=_name),
                Field("instance", int, required=False, check=_uint),
                Field("stream", str, required=False))


def _note_text(v: Any) -> str | None:
    if not v or len(v) > MAX_NOTE or "\0" in v:
        return f"must be 1 to {MAX_NOTE} characters without NUL"
    return None


def _per_app(what: str, third: str | None, v: Any, check: Callable[[Any], bool] = bool,
             rule: str = "") -> str | None:
    """A list of ``{stack, app, <third>}`` (``{stack, app}`` without ``third``) with
    names and ``check(<third>)``: None, or what is wrong with the first item that is
    not."""
    keys = ("stack", "app") if third is None else ("stack", "app", third)
    for item in v:
        if not isinstance(item, dict) or set(item) != set(keys):
            return f"each {what} must be {{{', '.join(keys)}}}"
        for key in ("stack", "app"):
            if not isinstance(item[key], str) or _name(item[key]) is not None:
                return f"each {what}'s {key} must be a name (1-128 printable, no '/')"
        if third is None:
            continue
        n = item[third]
        if isinstance(n, bool) or not isinstance(n, int) or not check(n):
            return f"each {what}'s {third} must be {rule}"
    return None


def _sources(v: Any) -> str | None:
    if not 1 <= len(v) <= MAX_SOURCES:
        return f"must list 1 to {MAX_SOURCES} sources"
    return _per_app("source", "instance", v, lambda n: _uint(n) is None,
                    "an integer >= 0")


def _budgets(v: Any) -> str | None:
    if len(v) > MAX_BUDGETS:
        return f"must name at most {MAX_BUDGETS} apps"
    return _per_app("budget", "bytes", v, lambda n: MIN_RETENTION <= n <= MAX_RETENTION,
                    f"{MIN_RETENTION} to {MAX_RETENTION}")


def _apps(v: Any) -> str | None:
    if not 1 <= len(v) <= MAX_APPS:
        return f"must name 1 to {MAX_APPS} apps"
    return _per_app("app", None, v)


S_FORGET = Schema(Field("sources", list, check=_sources))
S_FORGET_APPS = Schema(Field("apps", list, check=_apps))
S_APPS = Schema(Field("after_stack", str, required=False, check=_name),
                Field("after_app", str, required=False, check=_name),
                Field("limit", int, required=False, default=APPS_PAGE,
                      check=lambda v: None if 1 <= v <= APPS_PAGE
                      else f"must be 1 to {APPS_PAGE}"))
S_RETENTION = Schema(Field("budgets", list, check=_budgets),
                     Field("keep", bool, required=False, default=False))
S_PRUNE = Schema(Field("keep", int, check=check_int(100, 10_000_000)),
                 Field("protect", list, required=False, default=[],
                       check=lambda v: None if len(v) <= 100_000 and all(
                           isinstance(k, str) for k in v) else "a list of launch keys"))
S_NOTE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                Field("instance", int, check=_uint), Field("generation", int, check=_uint),
                Field("text", str, check=_note_text))
S_OBS = Schema(Field("after", int, required=False, default=0, check=_uint),
               Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)))
S_ACK = Schema(Field("cursor", int, check=_uint))
S_INVENTORY = Schema(Field("stack", str, required=False, check=_name))
S_METRICS = Schema(Field("launch_keys", list, required=False,
                         check=lambda v: None if all(isinstance(k, str) for k in v)
                         else "must be a list of launch keys"),
                   Field("usage_only", bool, required=False, default=False))
SOCKET_KEY_MAX = 700
"""Characters of the longest socket key a launch can make (owner.sockets.socket_key:
stack and app of 128, a name of 255, an address): sockets.close takes every one."""


def _socket_key(v: str) -> str | None:
    if not 1 <= len(v) <= SOCKET_KEY_MAX or not v.isprintable():
        return f"must be 1 to {SOCKET_KEY_MAX} printable characters (a key sockets names)"
    return None


S_SOCKET = Schema(Field("key", str, check=_socket_key))
S_SOCKET_UPDATE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                         Field("sockets", list, check=lambda v: None if 1 <= len(v) <=
                               MAX_SOCKETS else f"must list 1 to {MAX_SOCKETS} sockets"))
S_FDSTORE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                   Field("instance", int, required=False, check=_uint))
