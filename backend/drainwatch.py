"""Ending a handoff the guardian does not finish: while a generation is held for a
handoff (backend.drainstate: draining, drained or checkpointed), watch the process that
asked for the drain and the stage's deadline. When that process is gone, or the
deadline passes with no word from it, the generation resumes serving as the incumbent —
after it made sure that no candidate can take over from this handoff:

- it asks the owner for its epoch: one newer than ours means a candidate's grant was
  accepted (a fence landed), and the generation stands down for good instead;
- after a checkpoint it also withdraws the checkpoint file (renamed to
  ``<name>.withdrawn``), then asks the owner again. A guardian that is only slow (stopped,
  say) and fences later can then start no candidate from a checkpoint that this
  generation, serving again, made untrue: that handoff fails and, with nothing to restore
  from, ends ``uncertain`` (the operator reconciles) instead of adopting a wrong world.
  When the second answer shows a newer epoch after all, the file is put back.

An owner that does not answer leaves the generation held; it asks again each round.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.errors import TenureError
from protocol.procfs import running, start_ticks

from .drainstate import Event, Stage

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["FENCE_GRACE_S", "WATCH_S", "WITHDRAWN", "Caller", "DrainWatch", "deadline"]

log = logging.getLogger("tenure.backend")

WATCH_S = 0.5          # how often the guardian and the deadline are looked at
OWNER_ASK_S = 5.0      # the owner's answer about its epoch
MIN_DRAIN_S = 1.0      # a drain's timeout counts as at least this for its deadline
FENCE_GRACE_S = 150.0
"""After the checkpoint, how long a living guardian has to fence and retire us, or to
resume us: its fence is one owner call of at most 60 s, and one more proves it."""
WITHDRAWN = ".withdrawn"


@dataclass(frozen=True)
class Caller:
    """The process that asked for the drain (the guardian): pid and start time, so that
    a reused pid does not pass for it. Unknown (None) when it cannot be told."""

    pid: int | None = None
    ticks: int | None = None

    @classmethod
    def of(cls, pid: int | None) -> Caller:
        if not pid or pid <= 0:
            return cls()
        return cls(pid, start_ticks(pid))

    def gone(self, alive: Callable[[int, int], bool] = running) -> bool:
        """Whether it has exited (a zombie has; one already gone when it was asked
        about has too). Unknown pid: never gone."""
        if self.pid is None:
            return False
        return self.ticks is None or not alive(self.pid, self.ticks)


def deadline(stage: Stage, since: float, began: float, timeout: float) -> float | None:
    """When a stage the guardian holds is given up (monotonic time): twice the drain's
    timeout after the drain began (the guardian checkpoints or resumes as soon as the
    drain answered, and its call gives up 5 s after that timeout), FENCE_GRACE_S after
    the checkpoint; None for a stage that is not held."""
    if stage in (Stage.DRAINING, Stage.DRAINED):
        return began + 2 * max(timeout, MIN_DRAIN_S)
    if stage is Stage.CHECKPOINTED:
        return since + FENCE_GRACE_S
    return None


class DrainWatch:
    """Watches one drain of ``gen`` until it is no longer held (then :meth:`run`
    returns). ``clock``, ``sleep`` and ``alive`` are seams for unit tests."""

    def __init__(self, gen: Generation, caller: Caller, timeout: float, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 alive: Callable[[int, int], bool] = running) -> None:
        self.gen = gen
        self.caller = caller
        self.timeout = timeout
        self.clock = clock
        self.sleep = sleep
        self.alive = alive
        self.began = clock()
        self._owner_silent = False

    async def run(self) -> None:
        state = self.gen.drain_state
        while state.held:
            await self.sleep(WATCH_S)
            left = self.left()
            if left is not None and state.held:
                await self.give_up(*left)

    def left(self) -> tuple[Event, str] | None:
        """Whether the guardian left the handoff, and how, in words; None while not."""
        state = self.gen.drain_state
        if self.caller.gone(self.alive):
            return Event.LEFT, (f"the guardian (pid {self.caller.pid}) that asked for the "
                                f"drain is gone (it left this generation {state.stage})")
        due = deadline(state.stage, state.since, self.began, self.timeout)
        if due is not None and self.clock() >= due:
            return Event.EXPIRED, (f"the guardian neither finished nor ended the handoff "
                                   f"in time ({state.stage} for "
                                   f"{self.clock() - state.since:.0f} s)")
        return None

    async def give_up(self, event: Event, why: str) -> None:
        """Resume serving, or stand down when the owner holds a newer epoch; after a
        checkpoint, only once it is withdrawn. Stays held while the owner cannot say."""
        gen, stage = self.gen, self.gen.drain_state.stage
        epoch = await self.owner_epoch()
        if epoch is None or gen.drain_state.stage is not stage:
            return
        if epoch != gen.epoch:
            gen.end_held(Event.FENCED, f"{why}; the owner holds epoch {epoch}")
            return
        if stage is Stage.CHECKPOINTED and not await self.withdraw_checkpoint():
            return
        gen.end_held(event, why)

    async def withdraw_checkpoint(self) -> bool:
        """Rename the checkpoint away, then make sure no fence landed meanwhile (else put
        it back and stand down). Whether the generation may resume now."""
        gen = self.gen
        path = gen.checkpoint_path
        moved = _withdraw(path) if path is not None else None
        if moved is False:
            return False
        epoch = await self.owner_epoch()
        if epoch == gen.epoch and gen.drain_state.stage is Stage.CHECKPOINTED:
            if path is not None:
                log.warning("withdrew checkpoint %s: the handoff it was written for can "
                            "no longer start a candidate from it", path)
            return True
        if moved and path is not None:
            _put_back(path)
        if epoch is not None and epoch != gen.epoch:
            gen.end_held(Event.FENCED, f"the owner holds epoch {epoch}")
        return False

    async def owner_epoch(self) -> int | None:
        """The owner's epoch now; None when it does not answer (logged once a run)."""
        owner = self.gen.owner
        if owner is None:
            return None
        try:
            status = await owner.call("status", timeout=OWNER_ASK_S)
            epoch = status["epoch"]
        except TenureError as exc:
            if not self._owner_silent:
                log.error("held for a handoff the guardian left, and the owner does not "
                          "say its epoch (%s); asking again every %.1f s", exc, WATCH_S)
            self._owner_silent = True
            return None
        self._owner_silent = False
        return int(epoch)


def _withdraw(path: str) -> bool | None:
    """True: renamed away; None: no file (nothing can start from it); False: it could
    not be renamed (logged): the generation must stay held."""
    try:
        os.rename(path, path + WITHDRAWN)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("cannot withdraw checkpoint %s (%s); staying drained", path, exc)
        return False
    return True


def _put_back(path: str) -> None:
    try:
        os.rename(path + WITHDRAWN, path)
    except OSError as exc:
        log.error("cannot put checkpoint %s back (%s)", path, exc)
