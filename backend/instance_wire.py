"""The wire form of an instance (backend/instance.py): what a checkpoint and backend.db
hold of it, the schema that reads it back, and the consistency check of a decoded one.
Pure functions of an instance's public fields; ``Instance.to_wire``/``from_wire`` call
them."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from protocol.errors import BadRequest
from protocol.identity import boot_id
from protocol.schema import Field, Schema, check_int, is_number

from .explain import decode
from .instance_types import ExitReason, Outcome, State, Timer
from .model import App

if TYPE_CHECKING:
    from .instance import Instance

__all__ = ["WIRE_VERSION", "read", "restore", "this_boot", "to_wire"]

WIRE_VERSION = 1


def _check_enum(enum: type[StrEnum]) -> Callable[[Any], str | None]:
    values = {m.value for m in enum}

    def check(v: Any) -> str | None:
        return None if v in values else f"must be one of {sorted(values)}"
    return check


def _check_starts(v: Any) -> str | None:
    return None if all(is_number(t) for t in v) else "must be a list of finite numbers"


def _check_timers(v: Any) -> str | None:
    names = {t.value for t in Timer}
    if all(isinstance(k, str) and k in names and is_number(t) for k, t in v.items()):
        return None
    return f"must map timer names {sorted(names)} to finite deadlines"


_WIRE = Schema(
    Field("v", int),
    Field("stack", str),
    Field("app", str),
    Field("instance", int, check=check_int(0)),
    Field("state", str, check=_check_enum(State)),
    Field("generation", int, check=check_int(0)),
    # optional: a record from before it existed has none (its first launch was its own)
    Field("base_generation", int, required=False, default=0, check=check_int(0)),
    Field("restarts", int, check=check_int(0)),
    Field("streak", int, check=check_int(0)),
    Field("last_outcome", str, required=False, check=_check_enum(Outcome)),
    Field("pending_outcome", str, required=False, check=_check_enum(Outcome)),
    # optional: a record from before it existed has none
    Field("gave_up_after", str, required=False, check=_check_enum(Outcome)),
    Field("pid", int, required=False, check=check_int(1)),
    Field("start_ticks", int, required=False, check=check_int(0)),
    Field("launched_at", float, required=False),
    Field("starts", list, check=_check_starts),
    Field("health_failures", int, check=check_int(0)),
    Field("timers", dict, check=_check_timers),
)

# not in the schema: each is read (and judged) by restore
_RECORDS = ("last_error", "last_exit", "last_probe", "exits", "boot")

_boot: str | None = None


def this_boot() -> str:
    """This boot's id (read once: it does not change while a process lives)."""
    global _boot
    if _boot is None:
        _boot = boot_id()
    return _boot


def to_wire(inst: Instance) -> dict[str, Any]:
    """A plain msgpack/JSON-able map; timers as absolute deadlines."""
    return {
        "v": WIRE_VERSION, "stack": inst.app.stack, "app": inst.app.name,
        "instance": inst.index, "state": inst.state.value,
        "generation": inst.generation, "base_generation": inst.base_generation,
        "restarts": inst.restarts,
        "exits": {str(r): n for r, n in sorted(inst.exits.items())},
        "streak": inst.streak,
        "last_outcome": None if inst.last_outcome is None else inst.last_outcome.value,
        "pending_outcome": (None if inst.pending_outcome is None
                            else inst.pending_outcome.value),
        "gave_up_after": (None if inst.gave_up_after is None
                          else inst.gave_up_after.value),
        "pid": inst.pid, "start_ticks": inst.start_ticks,
        "launched_at": inst.launched_at, "starts": list(inst.starts),
        "health_failures": inst.health_failures,
        "timers": {name.value: deadline for name, deadline in inst.timers.items()},
        "boot": this_boot(),   # the boot whose CLOCK_MONOTONIC the times above read
        **{name: None if rec is None else rec.to_wire()
           for name, rec in (("last_error", inst.last_error),
                             ("last_exit", inst.last_exit),
                             ("last_probe", inst.last_probe))},
    }


def read(data: Any, app: App) -> dict[str, Any]:
    """The fields of ``data`` (``to_wire`` output) for a fresh instance of ``app`` to take
    its ``instance`` and ``state`` from, then :func:`restore` the rest. Extra keys are
    ignored. Raises BadRequest for a missing or mistyped field, an unknown version, or a
    stack/app that does not match ``app``."""
    d = _WIRE.validate(data, "instance")
    if d["v"] != WIRE_VERSION:
        raise BadRequest(f"instance.v {d['v']} is not {WIRE_VERSION}", {"field": "v"})
    if (d["stack"], d["app"]) != (app.stack, app.name):
        raise BadRequest(f"instance is {d['stack']}/{d['app']}, expected {app.key}",
                         {"field": "app"})
    return {**d, **{name: data.get(name) for name in _RECORDS}}


def restore(inst: Instance, d: dict[str, Any]) -> None:
    """Set the fields of ``inst``, fresh and in its restored state, from :func:`read`'s
    ``d``. Raises BadRequest for a malformed or inconsistent field; on return ``inst``
    keeps the class invariants (timers belong to the state, pid set while up)."""
    inst.generation, inst.restarts = d["generation"], d["restarts"]
    if d["base_generation"] > inst.generation:
        raise BadRequest("instance.base_generation is beyond its generation",
                         {"field": "base_generation"})
    inst.base_generation = d["base_generation"]
    inst.streak, inst.health_failures = d["streak"], d["health_failures"]
    inst.last_outcome = _opt_outcome(d["last_outcome"])
    inst.pending_outcome = _opt_outcome(d["pending_outcome"])
    inst.gave_up_after = _opt_outcome(d["gave_up_after"])
    inst.pid, inst.start_ticks = d["pid"], d["start_ticks"]
    inst.launched_at = d["launched_at"]
    inst.starts = [float(t) for t in d["starts"]]
    inst.timers = {Timer(k): float(v) for k, v in d["timers"].items()}
    # optional: state written before these records existed has none
    inst.last_error = decode("last_error", d["last_error"], inst.generation)
    inst.last_exit = decode("last_exit", d["last_exit"], inst.generation)
    inst.last_probe = decode("last_probe", d["last_probe"], inst.generation)
    inst.exits = _exits(d["exits"])
    boot = d["boot"]   # optional: state written before it has none
    inst.saved_boot = boot if isinstance(boot, str) else None
    _check_consistent(inst)


_TIMER_STATE = {Timer.BACKOFF: State.BACKOFF, Timer.READY_TIMEOUT: State.RUNNING,
                Timer.READY_DELAY: State.RUNNING}


def _exits(v: Any) -> dict[ExitReason, int]:
    """Exit counts as written by ``to_wire``; a record from before they existed reads as
    zero. Raises BadRequest for a malformed map."""
    if v is None:
        return {}
    reasons = {r.value for r in ExitReason}
    if not isinstance(v, dict) or not all(
            k in reasons and isinstance(n, int) and not isinstance(n, bool) and n >= 0
            for k, n in v.items()):
        raise BadRequest(f"instance.exits must map {sorted(reasons)} to counts",
                         {"field": "exits"})
    return {ExitReason(k): n for k, n in v.items()}


def _opt_outcome(v: str | None) -> Outcome | None:
    return None if v is None else Outcome(v)


def _check_consistent(inst: Instance) -> None:
    """Raises BadRequest when the restored fields break a class invariant."""
    def bad(msg: str, field: str) -> BadRequest:
        return BadRequest(f"instance {msg}", {"field": field})
    for name in inst.timers:
        if _TIMER_STATE[name] is not inst.state:
            raise bad(f"timer {name} cannot run in state {inst.state}", "timers")
    if inst.state is State.BACKOFF and Timer.BACKOFF not in inst.timers:
        raise bad("in backoff needs a backoff timer", "timers")
    if inst.state in (State.RUNNING, State.READY) and inst.pid is None:
        raise bad(f"in state {inst.state} needs a pid", "pid")
    if inst.pending_outcome is not None and inst.state is not State.RESTARTING:
        raise bad("pending_outcome is only valid while restarting", "pending_outcome")
    if inst.gave_up_after is not None and inst.state is not State.FAILED:
        raise bad("gave_up_after is only valid once failed", "gave_up_after")
