"""Confirmed termination: signal, wait, escalate, and report only what was seen.

The algorithm is written against :class:`StopTarget` (what to signal, how to tell whether
anything is left) plus an injectable clock and sleep, so unit tests drive it without
processes or real time; :class:`~owner.procs.ProcessTable` supplies the real target.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from .specs import ExitStatus, StopPolicy

__all__ = ["POLL_INTERVAL_S", "StopOutcome", "StopResult", "StopTarget", "confirm_stop"]

# How often a stop re-checks the group. /proc scans cost ~1-3 ms with a few hundred
# processes; 20 ms keeps a stop's reported latency tight without burning the owner's CPU.
POLL_INTERVAL_S = 0.02


class StopOutcome(StrEnum):
    """Stored and sent on the wire: values never change."""

    STOPPED = "stopped"  # we signalled, and the leader and its whole group are gone
    ALREADY_EXITED = "already_exited"  # nothing was left to signal when asked
    TIMEOUT = "timeout"  # something in the group still ran after SIGKILL + kill_after


@dataclass(frozen=True)
class StopResult:
    outcome: StopOutcome
    escalated: bool
    elapsed: float
    exit: ExitStatus | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "escalated": self.escalated,
            "elapsed": self.elapsed,
            "exit": None if self.exit is None else self.exit.to_wire(),
        }


class StopTarget(Protocol):
    def leader_exit(self) -> ExitStatus | None:
        """The leader's exit status once reaped, else None."""

    def group_alive(self) -> bool:
        """Whether any non-zombie process is still in the group."""

    def send(self, sig: int) -> None:
        """Send ``sig`` to the whole group; a group that is already empty is no error."""


async def _wait_until(done: Callable[[], bool], deadline: float,
                      clock: Callable[[], float],
                      pause: Callable[[float], Awaitable[None]]) -> bool:
    while True:
        if done():
            return True
        now = clock()
        if now >= deadline:
            return False
        await pause(min(POLL_INTERVAL_S, deadline - now))


def _pauses(sleep: Callable[[float], Awaitable[None]],
            leader_gone: Callable[[], asyncio.Future[None] | None] | None
            ) -> Callable[[float], Awaitable[None]]:
    """``sleep``, cut short when the future ``leader_gone()`` gives (None: the leader's
    exit was taken up already) is done: the check that follows the leader's exit runs
    then, not up to POLL_INTERVAL_S later (an app that is its whole group stops in about
    a millisecond). Once it is done, plain ``sleep``."""
    if leader_gone is None:
        return sleep

    async def pause(delay: float) -> None:
        gone = leader_gone()
        if gone is None or gone.done():
            await sleep(delay)
        else:   # no task: a mass stop pauses a thousand times at once
            await asyncio.wait((gone,), timeout=delay)
    return pause


async def confirm_stop(target: StopTarget, policy: StopPolicy, *,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                       leader_gone: Callable[[], asyncio.Future[None] | None] | None = None
                       ) -> StopResult:
    """Stop ``target`` per ``policy``: policy.signal to the group, wait ``timeout``,
    SIGKILL to the group, wait ``kill_after``. The group is checked every
    POLL_INTERVAL_S, and at once when the future ``leader_gone()`` gives (done when the
    leader's exit is taken up) is done.

    Invariant: ``stopped`` and ``already_exited`` are reported only after the leader was
    reaped AND a scan found no living member of the group; anything less is ``timeout``.
    A leader that already exited while its group lives on still gets the group stopped
    (outcome ``stopped``). Raises nothing of its own.
    """
    start = clock()
    pause = _pauses(sleep, leader_gone)

    def done() -> bool:
        # The cheap check first: the /proc scan only runs once the leader is reaped.
        return target.leader_exit() is not None and not target.group_alive()

    if done():
        return StopResult(StopOutcome.ALREADY_EXITED, False, 0.0, target.leader_exit())
    target.send(policy.signal)
    if policy.signal not in (signal.SIGKILL, signal.SIGCONT):
        # A stopped (SIGSTOP'd) process would keep a catchable signal pending until
        # the timeout; wake it so it can act on it, as systemd does.
        target.send(signal.SIGCONT)
    if await _wait_until(done, start + policy.timeout, clock, pause):
        return StopResult(StopOutcome.STOPPED, False, clock() - start, target.leader_exit())
    target.send(signal.SIGKILL)
    ok = await _wait_until(done, clock() + policy.kill_after, clock, pause)
    outcome = StopOutcome.STOPPED if ok else StopOutcome.TIMEOUT
    return StopResult(outcome, True, clock() - start, target.leader_exit())
