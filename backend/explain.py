"""Why an instance is where it is: its last launch error, last exit and last failed probe,
and the one short line (``reason``) that ``tenure status`` shows for them.

Each record names the ``generation`` (launch) it belongs to, so the line never explains
the present with an older run. The records are kept in the instance's wire form
(checkpoints, backend.db): :func:`decode` is strict (a present record must be complete
and well-typed, else ``BadRequest`` naming the field), and an absent one is None, so
state written before these records existed still loads.

Wording: short, lower case, no Python reprs; what was tried, then what came back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from protocol.errors import BadRequest, TenureError, TransportError
from protocol.schema import is_count
from protocol.signame import signal_name

if TYPE_CHECKING:
    from .instance import Instance

__all__ = ["Check", "ErrorSource", "LastError", "LastExit", "LastProbe", "decode",
           "last_run", "launch_error", "limit_hit", "reason", "signal_name",
           "stop_unconfirmed", "unanswered", "waiting_ready"]

MAX_TEXT = 1000


class ErrorSource(StrEnum):
    """Where a ``last_error`` text comes from (stable wire values)."""

    OWNER = "owner"      # the owner's own explanation (spawnErrors 1): step and errno
    MESSAGE = "message"  # the owner's error message: a refusal, or an owner that predates
                         # spawnErrors 1 and does not explain spawn failures
    BACKEND = "backend"  # the launch was never answered (owner away, transport lost),
                         # or its key had been used before (see spent_key)


class Check(StrEnum):
    READINESS = "readiness"
    HEALTH = "health"


class LastError(Struct, frozen=True):
    """A launch that did not start a process."""

    text: str                 # "spawn failed: /x/y: No such file or directory"
    code: str                 # the protocol error code, e.g. LAUNCH_FAILED
    errno: str | None         # "ENOENT", when the owner said
    source: ErrorSource
    generation: int

    def to_wire(self) -> dict[str, Any]:
        return {"text": self.text, "code": self.code, "errno": self.errno,
                "source": str(self.source), "generation": self.generation}


class LastExit(Struct, frozen=True):
    """How a run ended by itself (stops tenure asked for are not recorded here)."""

    exit_code: int | None
    signal: int | None
    core_dumped: bool
    generation: int

    @property
    def text(self) -> str:
        if self.signal:
            core = " (core dumped)" if self.core_dumped else ""
            return f"killed by {signal_name(self.signal)}{core}"
        if self.exit_code is not None:
            return f"exited {self.exit_code}"
        return "exited, status unknown (reaped by someone else)"

    def to_wire(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "signal": self.signal,
                "core_dumped": self.core_dumped, "generation": self.generation}

    def view(self) -> dict[str, Any]:
        """The API form: the signal by name and the text."""
        return {**self.to_wire(), "text": self.text,
                "signal": None if not self.signal else signal_name(self.signal)}


class LastProbe(Struct, frozen=True):
    """A readiness or health probe that failed: what was probed, what came back."""

    check: Check
    probe: str                # "tcp 127.0.0.1:8765", "GET http://…/health", "exec ./chk"
    result: str               # "connection refused", "status 500", "exit 1: db down"
    generation: int

    @property
    def text(self) -> str:
        return f"{self.check}: {self.probe}: {self.result}"

    def to_wire(self) -> dict[str, Any]:
        return {"check": str(self.check), "probe": self.probe, "result": self.result,
                "generation": self.generation}

    def view(self) -> dict[str, Any]:
        return {**self.to_wire(), "text": self.text}


def launch_error(exc: TenureError, generation: int) -> LastError:
    """The record of a refused launch: the owner's ``data.spawn.text`` when it explains
    (spawnErrors 1), else its message."""
    spawn = exc.data.get("spawn")
    if isinstance(spawn, Mapping) and isinstance(spawn.get("text"), str) and spawn["text"]:
        name = spawn.get("errno_name")
        return LastError(_line(spawn["text"]), exc.code_str,
                         name if isinstance(name, str) else None, ErrorSource.OWNER,
                         generation)
    return LastError(_line(f"launch refused: {exc.msg or exc.code_str}"), exc.code_str,
                     None, ErrorSource.MESSAGE, generation)


def unanswered(code: str, generation: int) -> LastError:
    """The record of a launch the owner never answered."""
    return LastError(f"launch not answered by the owner ({code})", code, None,
                     ErrorSource.BACKEND, generation)


def not_done(exc: TenureError, generation: int) -> LastError:
    """The record of a launch still not done after its retries: never answered (the
    owner away, the outcome unknown: ``exc`` is a TransportError) or answered with an
    error the retries did not cure (e.g. STORAGE_FAILED: the owner could not record it
    and started nothing), in the owner's words; or one that was never sent (the
    backend's own write before it failed: ``data.not_sent``)."""
    if isinstance(exc, TransportError):
        return unanswered(exc.code_str, generation)
    if exc.data.get("not_sent") is True:   # it failed in the backend, before the owner
        return LastError(_line(f"launch not sent: {exc.msg or exc.code_str}"),
                         exc.code_str, None, ErrorSource.BACKEND, generation)
    return LastError(_line(f"launch failed in the owner: {exc.msg or exc.code_str}"),
                     exc.code_str, None, ErrorSource.MESSAGE, generation)


def stop_unconfirmed(exc: TenureError) -> str:
    """Why a stop is being asked again: not sent (the backend's own write before it
    failed: ``data.not_sent``), or sent and not confirmed."""
    said = exc.msg or exc.code_str
    if exc.data.get("not_sent") is True:
        return _line(f"stop not sent: {said}; trying again each second")
    return _line(f"stop not confirmed by the owner: {said}; trying again each second")


def spent_key(launch_key: str, state: str, generation: int) -> LastError:
    """The record of a launch key the owner had already used for a launch that ended:
    this backend's generations are behind the owner's (its state is older)."""
    return LastError(f"launch key {launch_key} was used before (that launch is {state}); "
                     "starting a new generation", "CONFLICT", None, ErrorSource.BACKEND,
                     generation)


def _line(text: str) -> str:
    return " ".join(text.split())[:MAX_TEXT] or "-"


# ---- reason -------------------------------------------------------------------------


def reason(inst: Instance) -> str | None:
    """One short line on why ``inst`` is not simply up, or None when there is nothing to
    say: a readiness probe failing while it starts, a health check failing while it
    runs, or why its last run ended (launch error, exit, failed probe) while it waits to
    restart, has given up or has exited; given up at its start limit, that limit
    after it (`exited 3; start limit hit (5 starts within 60s)`: `failed` alone did not
    say the restarts were over)."""
    said = last_run(inst)
    limit = limit_hit(inst)
    if limit is None:
        return said
    return limit if said in (None, "start limit hit") else f"{said}; {limit}"


def limit_hit(inst: Instance) -> str | None:
    """``start limit hit (5 starts within 60s)`` for an instance that gave up at its
    start limit, else None."""
    from .instance import Outcome, State  # the instance module imports this one
    if inst.state is not State.FAILED or inst.last_outcome is not Outcome.START_LIMIT_HIT:
        return None
    limit = inst.app.start_limit
    return f"start limit hit ({limit.burst} starts within {limit.interval:g}s)"


def waiting_ready(inst: Instance) -> str | None:
    """``waiting for readiness: exec ./check (ready timeout in 278s)`` for a running
    instance whose readiness has said nothing yet (a probe under way that hangs, a
    READY=1 not sent yet: status showed nothing at all), else None."""
    from .instance_types import Timer
    deadline = inst.timers.get(Timer.READY_TIMEOUT)
    if deadline is None:
        return None
    from .probes import describe
    ready = inst.app.ready
    what = describe(ready, inst.index) or \
        ("READY=1 on NOTIFY_SOCKET" if str(ready.kind) == "notify" else str(ready.kind))
    left = max(0.0, deadline - time.monotonic())   # the instance's timers: monotonic
    return f"waiting for readiness: {what} (ready timeout in {left:.0f}s)"


def last_run(inst: Instance) -> str | None:
    """:func:`reason` without the start limit: how the last run ended, or what fails."""
    from .instance import Outcome, State  # the instance module imports this one

    g = inst.generation
    err = inst.last_error if inst.last_error and inst.last_error.generation == g else None
    ext = inst.last_exit if inst.last_exit and inst.last_exit.generation == g else None
    prb = inst.last_probe if inst.last_probe and inst.last_probe.generation == g else None
    state = inst.state
    if state is State.RUNNING:
        return prb.text if prb is not None and prb.check is Check.READINESS else \
            waiting_ready(inst)
    if state is State.READY:
        return prb.text if (prb is not None and prb.check is Check.HEALTH
                            and inst.health_failures) else None
    if state in (State.STOPPED, State.STOPPING, State.STARTING):
        return None
    if err is not None:
        return err.text
    if ext is not None:
        return ext.text
    why = inst.pending_outcome or inst.last_outcome
    if why is Outcome.START_LIMIT_HIT and inst.gave_up_after is not None:
        why = inst.gave_up_after   # the limit's line says it; say what ended the runs
    if why is Outcome.TIMEOUT:   # the wait ran out, whatever the last probe that ended
        # said (the one under way when it did may have hung): both, the wait first
        late = f"not ready within {inst.app.ready.timeout:g}s"
        return late if prb is None or prb.check is not Check.READINESS else \
            f"{late} (last probe: {prb.probe}: {prb.result})"
    if prb is not None:
        return prb.text
    return {Outcome.HEALTH: "health check failed",
            Outcome.START_LIMIT_HIT: "start limit hit"}.get(why) if why else None


# ---- strict decoding ----------------------------------------------------------------


def _text(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_TEXT


def _one_of(enum: type[StrEnum]) -> Callable[[Any], bool]:
    """A value of ``enum``: a string first (a list or a map is no set member at all)."""
    values = frozenset(e.value for e in enum)
    return lambda v: isinstance(v, str) and v in values


def _opt_int(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                   and lo <= v <= hi)


_FIELDS: Mapping[str, Mapping[str, Callable[[Any], bool]]] = {
    "last_error": {"text": _text, "code": _text, "generation": is_count,
                   "errno": lambda v: v is None or _text(v),
                   "source": _one_of(ErrorSource)},
    "last_exit": {"exit_code": _opt_int(0, 255), "signal": _opt_int(1, 128),
                  "core_dumped": lambda v: isinstance(v, bool), "generation": is_count},
    "last_probe": {"check": _one_of(Check), "probe": _text,
                   "result": _text, "generation": is_count},
}
_BUILD: Mapping[str, Callable[[dict[str, Any]], Any]] = {
    "last_error": lambda d: LastError(d["text"], d["code"], d["errno"],
                                      ErrorSource(d["source"]), d["generation"]),
    "last_exit": lambda d: LastExit(d["exit_code"], d["signal"], d["core_dumped"],
                                    d["generation"]),
    "last_probe": lambda d: LastProbe(Check(d["check"]), d["probe"], d["result"],
                                      d["generation"]),
}


def decode(name: str, value: Any, generation: int) -> Any:
    """Record ``name`` (``last_error``, ``last_exit``, ``last_probe``) from its wire form,
    or None for None. Raises BadRequest (``data.field`` = name) for a non-map, a missing
    or malformed key, or a generation after the instance's own ``generation``. Unknown
    keys are ignored."""
    if value is None:
        return None
    fields = _FIELDS[name]
    if not isinstance(value, dict):
        raise BadRequest(f"instance.{name} must be a map or null", {"field": name})
    for key, ok in fields.items():
        if key not in value or not ok(value[key]):
            raise BadRequest(f"instance.{name}.{key} is missing or malformed",
                             {"field": name})
    if value["generation"] > generation:
        raise BadRequest(f"instance.{name} is of generation {value['generation']}, after "
                         f"the instance's {generation}", {"field": name})
    if name == "last_exit" and value["signal"] is not None and value["exit_code"] is not None:
        raise BadRequest("instance.last_exit has both an exit code and a signal",
                         {"field": name})
    return _BUILD[name]({k: value[k] for k in fields})

