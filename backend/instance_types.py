"""The vocabulary of an instance's state machine (backend/instance.py): its states,
outcomes and timers, the events fed to it and the actions it returns. Plain values,
no behaviour."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from msgspec import Struct

from .explain import LastError, LastProbe

__all__ = [
    "EVENT_TYPES",
    "EXIT_REASON",
    "PUBLIC_STATE",
    "TIMER_EVENTS",
    "Action",
    "Adopt",
    "BackoffElapsed",
    "CancelTimer",
    "Event",
    "ExitReason",
    "Exited",
    "HealthFailed",
    "HealthOk",
    "Launch",
    "LaunchFailed",
    "Launched",
    "Outcome",
    "OwnerStopped",
    "Probed",
    "PublicState",
    "Ready",
    "ReadyTimeout",
    "Report",
    "Start",
    "StartHealth",
    "StartReadiness",
    "StartTimer",
    "State",
    "Stop",
    "StopHealth",
    "StopReadiness",
    "StopRequested",
    "Stopped",
    "Timer",
]


class State(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    READY = "ready"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    BACKOFF = "backoff"
    FAILED = "failed"
    EXITED = "exited"


class PublicState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    BACKOFF = "backoff"
    FAILED = "failed"


PUBLIC_STATE: dict[State, PublicState] = {
    State.STOPPED: PublicState.STOPPED,
    State.STARTING: PublicState.STARTING,
    State.RUNNING: PublicState.RUNNING,
    State.READY: PublicState.READY,
    State.STOPPING: PublicState.STOPPING,
    State.RESTARTING: PublicState.STOPPING,
    State.BACKOFF: PublicState.BACKOFF,
    State.FAILED: PublicState.FAILED,
    State.EXITED: PublicState.STOPPED,
}


class Outcome(StrEnum):
    """How a run ended. ``launch-failed``: the owner could not start the process."""

    SUCCESS = "success"
    EXIT_CODE = "exit-code"
    SIGNAL = "signal"
    TIMEOUT = "timeout"
    START_LIMIT_HIT = "start-limit-hit"
    HEALTH = "health"
    STOPPED = "stopped"
    LAUNCH_FAILED = "launch-failed"


class ExitReason(StrEnum):
    """Why a process ended, as ``tenure_app_exits_total`` counts it: tenure stopped it
    (``requested``), or it ended unasked with exit 0, another code, or a signal."""

    REQUESTED = "requested"
    SUCCESS = "success"
    FAILURE = "failure"
    SIGNAL = "signal"


EXIT_REASON = {Outcome.SUCCESS: ExitReason.SUCCESS, Outcome.EXIT_CODE: ExitReason.FAILURE,
               Outcome.SIGNAL: ExitReason.SIGNAL}


class Timer(StrEnum):
    BACKOFF = "backoff"
    READY_TIMEOUT = "ready-timeout"
    READY_DELAY = "ready-delay"


# ---- events -------------------------------------------------------------------------


class Start(Struct, frozen=True):
    """The instance is wanted up."""


class StopRequested(Struct, frozen=True):
    """The instance is wanted down."""


class Launched(Struct, frozen=True):
    pid: int
    start_ticks: int


class LaunchFailed(Struct, frozen=True):
    code: str
    error: LastError | None = None  # why, for ``last_error``


class Exited(Struct, frozen=True):
    exit_code: int | None
    signal: int | None
    core_dumped: bool = False
    pid: int | None = None   # the owner's word: an exit can overtake the launch's answer
    left_running: int = 0    # processes of the run that outlived it (tenure stops them)
    at: float | None = None  # when the owner saw it end (wall clock); None: unknown


class OwnerStopped(Struct, frozen=True):
    """The process ended by a stop the owner made on its own, not at this backend's
    request: the owner is shutting down (SIGTERM, ``systemctl stop``, its home lost).
    Nothing failed, and the instance is still wanted up."""

    exit_code: int | None
    signal: int | None
    core_dumped: bool = False
    pid: int | None = None
    left_running: int = 0
    at: float | None = None


class Probed(Struct, frozen=True):
    """A readiness or health probe of the current launch failed (what was probed and
    what came back); the verdicts themselves are ``Ready``/``HealthFailed``."""

    note: LastProbe


class Ready(Struct, frozen=True):
    pass


class ReadyTimeout(Struct, frozen=True):
    pass


class HealthFailed(Struct, frozen=True):
    pass


class HealthOk(Struct, frozen=True):
    pass


class BackoffElapsed(Struct, frozen=True):
    pass


class Stopped(Struct, frozen=True):
    """The owner confirmed that the process and its group are gone; ``exit``: how the
    process ended when the stop saw it end (the owner's ``{exit_code, signal,
    core_dumped}``), else None."""

    exit: dict[str, Any] | None = None


class Adopt(Struct, frozen=True):
    """A running process found in a checkpoint or the owner's inventory; never relaunched.
    ``generation`` is required so the next launch key is fresh."""

    pid: int
    start_ticks: int
    ready: bool
    generation: int
    restarts: int = 0
    age: float | None = None   # seconds the process has run (None: unknown, from now)


Event = (Start | StopRequested | Launched | LaunchFailed | Exited | OwnerStopped | Ready
         | ReadyTimeout | HealthFailed | HealthOk | BackoffElapsed | Stopped | Adopt | Probed)
EVENT_TYPES: tuple[type[Event], ...] = (
    Start, StopRequested, Launched, LaunchFailed, Exited, OwnerStopped, Ready,
    ReadyTimeout, HealthFailed, HealthOk, BackoffElapsed, Stopped, Adopt, Probed)

TIMER_EVENTS: dict[Timer, Event] = {
    Timer.BACKOFF: BackoffElapsed(),
    Timer.READY_TIMEOUT: ReadyTimeout(),
    Timer.READY_DELAY: Ready(),
}

# ---- actions ------------------------------------------------------------------------


class Launch(Struct, frozen=True):
    generation: int
    launch_key: str


class Stop(Struct, frozen=True):
    generation: int
    launch_key: str


class StartTimer(Struct, frozen=True):
    name: Timer
    delay: float


class CancelTimer(Struct, frozen=True):
    name: Timer


class StartReadiness(Struct, frozen=True):
    pass


class StopReadiness(Struct, frozen=True):
    pass


class StartHealth(Struct, frozen=True):
    pass


class StopHealth(Struct, frozen=True):
    pass


class Report(Struct, frozen=True):
    outcome: Outcome


Action = (Launch | Stop | StartTimer | CancelTimer | StartReadiness | StopReadiness
          | StartHealth | StopHealth | Report)
