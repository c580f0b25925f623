"""Starts wanted once an instance is down: the second half of a ``tenure restart``, and a
``tenure start`` asked while a stop still runs (the machine refuses a Start while
stopping: fed then, it would be lost).

Invariants, kept for every instance key:

- at most one pending start; asking again while one is pending gets the same one (two
  concurrent restarts of an instance restart it once);
- the latest operator intent wins: a stop wanted after it withdraws it
  (the reconciler withdraws it on every ``StopRequested``: StartWaits.stop_fed);
- bounded: not down within its deadline, it is withdrawn, so nothing armed survives to
  start the app at some later, surprising moment;
- the Start is fed one loop turn after the instance went down (StartWaits.start_if_down),
  so whoever waits for it to be down sees it so.

Each pending start is a future: True once the instance was started, False when
withdrawn. With a journal (backend.db's ``starts_after_stop``) each one is also
recorded before the stop it follows is sent (:meth:`StartsAfterStop.record`) and
forgotten when taken or withdrawn: a generation that dies or closes meanwhile leaves it
to the next one, which starts the instance once it is down (backend.adopt). Each record
names the generation that made it; a generation forgets only its own, so one fenced off
(which forgets all of its own) never erases a newer generation's. It also says what the
start waits for (:class:`WaitKind`) and until when (:class:`Wait`), so that the next
generation resumes a start held for its ``after`` apps as such, for the time left.
Construct inside the running loop; no clock of its own (deadlines use the loop's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from protocol.errors import StaleEpoch

from . import instance as im
from .model import StopSpec

__all__ = ["DOWN", "STOP_SLACK", "Journal", "StartsAfterStop", "Wait", "WaitKind",
           "after_stop_bound"]

log = logging.getLogger("tenure.backend")

DOWN = (im.State.STOPPED, im.State.EXITED, im.State.FAILED)
STOP_SLACK = 10.0   # seconds past its stop policy for the owner to confirm a stop


def after_stop_bound(stop: StopSpec, timeout: float) -> float:
    """How long a start waits for its instance to be down: the whole stop policy
    (signal, ``timeout``, SIGKILL, ``kill_after``) and STOP_SLACK, however short the
    request's ``timeout`` (a restart still starts an app that is slow to stop), or that
    ``timeout`` when longer. A stop that outlasts it is stuck (the owner could not end
    the process group, or cannot be reached): the start is withdrawn, not left to fire
    whenever the stop ends."""
    return max(timeout, stop.timeout + stop.kill_after + STOP_SLACK)


class WaitKind(StrEnum):
    """What a pending start waits for. Stored in backend.db (start_waits.kind): values
    never change."""

    AFTER_STOP = "after-stop"   # its instance to be down (a restart, a start while stopping)
    ORDER = "order"             # its ``after`` apps to be ready (backend.start_order)


@dataclass(frozen=True)
class Wait:
    """What a pending start waits for, and until when. ``deadline`` is wall-clock time
    (time.time()), not the loop's monotonic clock: it is read back by another process (the
    next generation) that may start after a reboot, and the wall clock is the one both can
    compare; whoever reads it bounds what is left by the wait it began with, should the
    clock have been stepped."""

    kind: WaitKind
    deadline: float

    def to_row(self) -> tuple[str, float]:
        return (self.kind.value, self.deadline)

    @classmethod
    def from_row(cls, key: str, row: tuple[str, float] | None) -> Wait | None:
        """The wait a journal row says; None for none, or a kind this build does not
        know (then the start is taken over as one after a stop, as before kinds were
        recorded)."""
        if row is None:
            return None
        try:
            return cls(WaitKind(row[0]), row[1])
        except ValueError:
            log.debug("%s: its wanted start waits for %r, unknown here; taken over as a "
                      "start after a stop", key, row[0])
            return None


class Journal(Protocol):
    """Where pending starts are kept across generations (backend.store.BackendStore)."""

    def want_start(self, key: str, activation: str,
                   wait: tuple[str, float] | None = None) -> None:
        """Raises StaleEpoch when a newer generation claimed the journal."""

    def drop_start(self, key: str, activation: str | None) -> None: ...


class StartsAfterStop:
    """The pending starts, by instance key, each with the timer of its deadline."""

    def __init__(self, on_stale: Callable[[str], None] = lambda why: None) -> None:
        self._pending: dict[str, tuple[asyncio.Future[bool], asyncio.TimerHandle]] = {}
        self.journal: Journal | None = None
        self.activation = ""   # the generation whose records these are
        self.on_stale = on_stale   # a newer generation claimed the journal (Supervisor.fence)

    def record(self, key: str, wait: Wait) -> None:
        """Make the start of ``key``, and what it ``wait``s for, durable before the stop
        it follows is sent. Raises what the journal raises: then nothing may be done.
        StaleEpoch (a newer generation claimed the journal) is told to ``on_stale``
        first: that generation owns the app now, and this one must stop acting on it."""
        if self.journal is None:
            return
        try:
            self.journal.want_start(key, self.activation, wait.to_row())
        except StaleEpoch as exc:
            self.on_stale(exc.msg)
            raise

    def _forget(self, key: str) -> None:
        if self.journal is None:
            return
        try:
            self.journal.drop_start(key, self.activation)
        except Exception as exc:  # the next generation would start it again: say so
            log.error("%s: the ended start could not be forgotten in backend.db (%s); "
                      "a generation that takes over may start it", key, exc)

    def __contains__(self, key: str) -> bool:
        return key in self._pending

    def get(self, key: str) -> asyncio.Future[bool] | None:
        held = self._pending.get(key)
        return None if held is None else held[0]

    def arm(self, key: str, within: float, expire: Callable[[], None] | None = None
            ) -> asyncio.Future[bool]:
        """The pending start of ``key``: the one already armed, or a new one that
        ``expire`` ends unless taken within ``within`` seconds (default: withdrawn)."""
        held = self._pending.get(key)
        if held is not None:
            return held[0]
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        expiry = loop.call_later(within, expire or (lambda: self.withdraw(
            key, f"not down within {within:g} s", logging.WARNING)))
        self._pending[key] = (fut, expiry)
        return fut

    def waiting(self) -> list[str]:
        """The instance keys with a pending start."""
        return list(self._pending)

    def take(self, key: str, start: Callable[[], None]) -> None:
        """Run ``start`` (what takes the instance up: nothing when another start did
        already) for the pending start of ``key``, then resolve it True; nothing pending:
        nothing done. Whatever ``start`` raises resolves it False and propagates."""
        held = self._pending.pop(key, None)
        if held is None:
            return
        fut, expiry = held
        expiry.cancel()
        try:
            start()
        except BaseException:
            _resolve(fut, False)   # still recorded: not done, whoever continues may
            raise
        self._forget(key)
        _resolve(fut, True)

    def withdraw(self, key: str, why: str, level: int = logging.INFO, *,
                 durable: bool = True) -> None:
        """Withdraw the pending start of ``key`` (none: nothing done); ``durable``: in
        the journal too (not when only this generation stops acting on it)."""
        held = self._pending.pop(key, None)
        if held is None:
            return
        fut, expiry = held
        expiry.cancel()
        log.log(level, "%s: the start wanted once it is down is withdrawn: %s", key, why)
        if durable:
            self._forget(key)
        _resolve(fut, False)

    def clear(self, why: str, *, durable: bool) -> None:
        """Withdraw every pending start; ``durable``: their records too (fenced off:
        what this generation recorded was never done by the owner, and a newer one
        holds it), else they stay for the next generation (closing)."""
        for key in list(self._pending):
            self.withdraw(key, why, durable=durable)


def _resolve(fut: asyncio.Future[bool], started: bool) -> None:
    if not fut.done():   # a waiter's cancellation may have cancelled it
        fut.set_result(started)
