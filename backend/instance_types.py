"""The vocabulary of an instance's state machine (backend/instance.py): its states,
outcomes and timers, the events fed to it and the actions it returns. Plain values,
no behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

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


@dataclass(frozen=True)
class Start:
    """The instance is wanted up."""


@dataclass(frozen=True)
class StopRequested:
    """The instance is wanted down."""


@dataclass(frozen=True)
class Launched:
    pid: int
    start_ticks: int


@dataclass(frozen=True)
class LaunchFailed:
    code: str
    error: LastError | None = None  # why, for ``last_error``


@dataclass(frozen=True)
class Exited:
    exit_code: int | None
    signal: int | None
    core_dumped: bool = False


@dataclass(frozen=True)
class Probed:
    """A readiness or health probe of the current launch failed (what was probed and
    what came back); the verdicts themselves are ``Ready``/``HealthFailed``."""

    note: LastProbe


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class ReadyTimeout:
    pass


@dataclass(frozen=True)
class HealthFailed:
    pass


@dataclass(frozen=True)
class HealthOk:
    pass


@dataclass(frozen=True)
class BackoffElapsed:
    pass


@dataclass(frozen=True)
class Stopped:
    """The owner confirmed that the process and its group are gone."""


@dataclass(frozen=True)
class Adopt:
    """A running process found in a checkpoint or the owner's inventory; never relaunched.
    ``generation`` is required so the next launch key is fresh."""

    pid: int
    start_ticks: int
    ready: bool
    generation: int
    restarts: int = 0


Event = (Start | StopRequested | Launched | LaunchFailed | Exited | Ready | ReadyTimeout
         | HealthFailed | HealthOk | BackoffElapsed | Stopped | Adopt | Probed)
EVENT_TYPES: tuple[type[Event], ...] = (
    Start, StopRequested, Launched, LaunchFailed, Exited, Ready, ReadyTimeout,
    HealthFailed, HealthOk, BackoffElapsed, Stopped, Adopt, Probed)

TIMER_EVENTS: dict[Timer, Event] = {
    Timer.BACKOFF: BackoffElapsed(),
    Timer.READY_TIMEOUT: ReadyTimeout(),
    Timer.READY_DELAY: Ready(),
}

# ---- actions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    generation: int
    launch_key: str


@dataclass(frozen=True)
class Stop:
    generation: int
    launch_key: str


@dataclass(frozen=True)
class StartTimer:
    name: Timer
    delay: float


@dataclass(frozen=True)
class CancelTimer:
    name: Timer


@dataclass(frozen=True)
class StartReadiness:
    pass


@dataclass(frozen=True)
class StopReadiness:
    pass


@dataclass(frozen=True)
class StartHealth:
    pass


@dataclass(frozen=True)
class StopHealth:
    pass


@dataclass(frozen=True)
class Report:
    outcome: Outcome


Action = (Launch | Stop | StartTimer | CancelTimer | StartReadiness | StopReadiness
          | StartHealth | StopHealth | Report)
