"""Wire shapes the owner accepts and reports: stop policies, launch specs, exit statuses.

Decoders are strict about what they need and forgiving about extras: a missing or
malformed field raises :class:`~protocol.errors.BadRequest` naming the field; an unknown key
is ignored with a debug line. Every ``from_wire`` accepts an arbitrary object and raises
nothing but ``BadRequest`` (fuzzed in tests/unit/owner/test_procs_specs.py).
"""

from __future__ import annotations

import logging
import math
import os
import signal as _signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from protocol.errors import BadRequest

from .limits import Limits
from .runas import RunAs
from .sockets import MAX_SOCKETS, SocketDecl

__all__ = ["ExitStatus", "LaunchSpec", "StopPolicy", "parse_signal"]

log = logging.getLogger(__name__)

# A stop may legitimately wait a long time (databases flushing), but an absurd value is
# almost always a unit mistake (ms for s); a week is far past any sane stop.
MAX_WAIT_S = 7 * 24 * 3600.0

_STOP_KEYS = frozenset({"signal", "timeout", "kill_after"})
_LAUNCH_KEYS = frozenset({"argv", "env", "cwd", "stop", "identity", "limits", "sockets",
                          "fd_store_max"})
MAX_FD_STORE = 1024


def parse_signal(value: object) -> int:
    """``"TERM"``, ``"SIGTERM"`` or ``15`` → 15.

    Raises BadRequest for unknown names, numbers that are not valid signals here, 0, and
    any other type (bool included, although it is an int).
    """
    if isinstance(value, bool):
        raise BadRequest(f"stop.signal must be a signal name or number, not {value!r}")
    if isinstance(value, int):
        if value <= 0 or value not in _signal.valid_signals():
            raise BadRequest(f"stop.signal {value} is not a valid signal number")
        return value
    if isinstance(value, str):
        name = value if value.startswith("SIG") else "SIG" + value
        try:
            return int(_signal.Signals[name])
        except KeyError:
            raise BadRequest(f"stop.signal {value!r} is not a known signal name") from None
    raise BadRequest(f"stop.signal must be a signal name or number, not {type(value).__name__}")


def _seconds(d: Mapping[str, Any], key: str, default: float) -> float:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"stop.{key} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_WAIT_S:
        raise BadRequest(f"stop.{key} must be between 0 and {MAX_WAIT_S:.0f} s, not {value!r}")
    return seconds


def _ignore_extras(d: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    extras = [k for k in d if k not in known]
    if extras:
        log.debug("%s: ignoring unknown keys %r", what, extras)


@dataclass(frozen=True)
class StopPolicy:
    """How to stop an app: ``signal`` to the group, wait ``timeout`` s, then SIGKILL and
    wait ``kill_after`` s more before reporting ``timeout``."""

    signal: int = int(_signal.SIGTERM)
    timeout: float = 10.0
    kill_after: float = 5.0

    @classmethod
    def from_wire(cls, d: object) -> StopPolicy:
        """Parse ``{"signal", "timeout", "kill_after"}``; absent keys take the defaults.

        Raises BadRequest for a non-map, an unknown signal, or a negative, NaN, infinite,
        oversized or non-numeric duration.
        """
        if not isinstance(d, Mapping):
            raise BadRequest(f"stop policy must be a map, not {type(d).__name__}")
        _ignore_extras(d, _STOP_KEYS, "stop policy")
        sig = parse_signal(d["signal"]) if "signal" in d else cls.signal
        return cls(
            signal=sig,
            timeout=_seconds(d, "timeout", cls.timeout),
            kill_after=_seconds(d, "kill_after", cls.kill_after),
        )

    def to_wire(self) -> dict[str, Any]:
        """The policy as a launch records it. A signal Python names goes by its name; a
        real-time one (SIGRTMIN+N has none here) by its number, which parse_signal takes
        back (it raised ValueError: every launch with one answered INTERNAL)."""
        try:
            sig: str | int = _signal.Signals(self.signal).name
        except ValueError:
            sig = self.signal
        return {
            "signal": sig,
            "timeout": self.timeout,
            "kill_after": self.kill_after,
        }


def _no_nul(value: str, what: str) -> str:
    # exec takes C strings: an embedded NUL would be a ValueError deep inside Popen.
    if "\0" in value:
        raise BadRequest(f"{what} must not contain NUL bytes")
    return value


def _parse_argv(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise BadRequest("argv must be a non-empty list of strings")
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise BadRequest(f"argv[{i}] must be a string, not {type(arg).__name__}")
        _no_nul(arg, f"argv[{i}]")
    if not value[0]:
        raise BadRequest("argv[0] must not be empty")
    return tuple(value)


def _parse_env(value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise BadRequest(f"env must be a map of strings, not {type(value).__name__}")
    env: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k or "=" in k:
            raise BadRequest(f"env key {k!r} must be a non-empty string without '='")
        if not isinstance(v, str):
            raise BadRequest(f"env[{k!r}] must be a string, not {type(v).__name__}")
        env[_no_nul(k, "env key")] = _no_nul(v, f"env[{k!r}]")
    return MappingProxyType(env)


def _parse_cwd(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequest("cwd must be a non-empty string or null")
    return _no_nul(value, "cwd")


def _parse_sockets(value: object) -> tuple[SocketDecl, ...]:
    if not isinstance(value, list | tuple) or len(value) > MAX_SOCKETS:
        raise BadRequest(f"sockets must be a list of at most {MAX_SOCKETS} sockets")
    decls = tuple(SocketDecl.from_wire(d) for d in value)
    names = [d.name for d in decls]
    if len(set(names)) != len(names):
        raise BadRequest("sockets: every socket of a launch needs its own name")
    return decls


def _parse_store_max(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value <= MAX_FD_STORE:
        raise BadRequest(f"fd_store_max must be an integer between 0 and {MAX_FD_STORE}")
    return value


@dataclass(frozen=True)
class LaunchSpec:
    """What to run. ``env`` is the WHOLE environment (nothing is inherited from the owner);
    the owner adds ``NOTIFY_SOCKET`` and ``LISTEN_*``, overriding any value given here.
    ``run_as`` and ``limits`` (owner.runas, owner.limits) are the app's identity and
    resource limits; ``sockets`` the listening sockets the owner holds for it and passes
    as fds 3.. (owner.sockets), followed by up to ``fd_store_max`` fds the app stored
    (owner.fdstore; 0: no store)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    stop: StopPolicy = field(default_factory=StopPolicy)
    run_as: RunAs = field(default_factory=RunAs)
    limits: Limits = field(default_factory=Limits)
    sockets: tuple[SocketDecl, ...] = ()
    fd_store_max: int = 0

    @classmethod
    def from_wire(cls, d: object) -> LaunchSpec:
        """Parse ``{"argv", "env"?, "cwd"?, "stop"?, "identity"?, "limits"?, "sockets"?,
        "fd_store_max"?}``.

        Raises BadRequest for a missing/empty argv, non-string arguments or environment
        entries, NUL bytes anywhere, an env key with '=', a bad stop policy, identity,
        limits, socket (or two with one name) or fd store size.
        """
        if not isinstance(d, Mapping):
            raise BadRequest(f"launch spec must be a map, not {type(d).__name__}")
        if "argv" not in d:
            raise BadRequest("launch spec needs argv")
        _ignore_extras(d, _LAUNCH_KEYS, "launch spec")
        stop = d.get("stop")
        return cls(
            argv=_parse_argv(d["argv"]),
            env=_parse_env(d.get("env", {})),
            cwd=_parse_cwd(d.get("cwd")),
            stop=StopPolicy() if stop is None else StopPolicy.from_wire(stop),
            run_as=RunAs() if d.get("identity") is None else RunAs.from_wire(d["identity"]),
            limits=Limits() if d.get("limits") is None else Limits.from_wire(d["limits"]),
            sockets=() if d.get("sockets") is None else _parse_sockets(d["sockets"]),
            fd_store_max=_parse_store_max(d.get("fd_store_max", 0)),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": self.cwd,
            "stop": self.stop.to_wire(),
        }
        # only when set: launch rows of apps without them keep their stored shape
        if not self.run_as.empty:
            out["identity"] = self.run_as.to_wire()
        if self.limits != Limits():
            out["limits"] = self.limits.to_wire()
        if self.sockets:
            out["sockets"] = [d.to_wire() for d in self.sockets]
        if self.fd_store_max:
            out["fd_store_max"] = self.fd_store_max
        return out


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended: exactly one of ``exit_code`` / ``signal`` is set, or neither
    when the status was lost (someone else reaped it)."""

    exit_code: int | None
    signal: int | None
    core_dumped: bool = False

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        """From a ``waitpid`` status word."""
        if os.WIFSIGNALED(status):
            return cls(None, os.WTERMSIG(status), os.WCOREDUMP(status))
        if os.WIFEXITED(status):
            return cls(os.WEXITSTATUS(status), None)
        return cls(None, None)

    @classmethod
    def from_waitid(cls, si_code: int, si_status: int) -> ExitStatus:
        """From ``os.waitid`` fields (CLD_EXITED / CLD_KILLED / CLD_DUMPED)."""
        if si_code == os.CLD_EXITED:
            return cls(si_status, None)
        if si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            return cls(None, si_status, si_code == os.CLD_DUMPED)
        return cls(None, None)

    def to_wire(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "signal": self.signal,
                "core_dumped": self.core_dumped}
