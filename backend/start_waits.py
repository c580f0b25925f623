"""The reconciler's starts that wait (backend.supervisor), and the intents they answer to.

A start fed to an instance whose app names ``after`` apps waits for them along start
order (backend.start_order); a start wanted once its instance is down (``tenure
restart``, a start asked while a stop runs) waits for that. Both are pending starts in
one backend.after_stop.StartsAfterStop: the latest intent wins (a stop withdraws one),
they are kept in backend.db across generations, and each is taken one loop turn after
what it waits for is over. This module also counts the starts and stops fed to each
instance, by which a waiter learns that a later intent overrode its own
(:meth:`StartWaits.stopped_since`, :meth:`StartWaits.started_since`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import instance as im
from .after_stop import DOWN, Journal, StartsAfterStop, Wait, WaitKind
from .owner_mutations import fenced_off
from .start_order import ORDER_WAIT, once_ready, waits_for

if TYPE_CHECKING:
    from .supervisor import Supervisor

__all__ = ["StartWaits"]

log = logging.getLogger("tenure.backend")


class StartWaits:
    """The pending starts of ``sup``'s instances and the intents fed to them. Construct
    inside the running loop."""

    def __init__(self, sup: Supervisor, start: Callable[[str, im.Instance], None]) -> None:
        """``start(key, inst)`` feeds ``Start`` to instance ``key`` as it stands, held no
        longer (the reconciler's own apply)."""
        self._sup = sup
        self._start = start
        # starts wanted once an instance is down; a newer generation's claim fences us
        self._after_stop = StartsAfterStop(on_stale=lambda why: sup.fence(why))
        self._stops_fed: dict[str, int] = {}     # instance key -> stops fed (stopped_since)
        self._starts_fed: dict[str, int] = {}    # instance key -> starts wanted (started_since)

    def __contains__(self, key: str) -> bool:
        """Whether the start of ``key`` is pending."""
        return key in self._after_stop

    def waiting(self) -> list[str]:
        """The instance keys with a pending start."""
        return self._after_stop.waiting()

    def pending_start(self, key: str) -> asyncio.Future[bool] | None:
        """The start of ``key`` wanted once it is down, while one is pending."""
        return self._after_stop.get(key)

    def keep_starts_in(self, journal: Journal, activation: str) -> None:
        """Record every start wanted once down in ``journal`` (backend.db) from now on,
        as generation ``activation``'s."""
        self._after_stop.journal = journal
        self._after_stop.activation = activation

    def clear(self, why: str, *, durable: bool) -> None:
        """Withdraw every pending start (backend.after_stop.StartsAfterStop.clear)."""
        self._after_stop.clear(why, durable=durable)

    def forget(self, key: str) -> None:
        """Instance ``key`` is removed: its pending start is withdrawn, its intents
        forgotten."""
        self._after_stop.withdraw(key, "the instance is removed")
        self._stops_fed.pop(key, None)
        self._starts_fed.pop(key, None)

    # -- intents ----------------------------------------------------------------------

    def start_fed(self, key: str) -> None:
        """A start of ``key`` was fed (or wanted once it is down)."""
        self._starts_fed[key] = self._starts_fed.get(key, 0) + 1

    def stop_fed(self, key: str) -> None:
        """A stop of ``key`` was fed: the latest intent wins, its pending start is
        withdrawn."""
        self._after_stop.withdraw(key, "a stop was asked after it")
        self._stops_fed[key] = self._stops_fed.get(key, 0) + 1

    def stopped_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """A check, for a waiter that wants ``keys`` up: which of them a stop was asked
        of since this call (the latest intent wins: the wait for them is over)."""
        fed = {k: self._stops_fed.get(k, 0) for k in keys}
        return lambda: [k for k in keys if self._stops_fed.get(k, 0) != fed[k]]

    def started_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """A check, for a command that wants ``keys`` down: which of them a start (or a
        restart) was asked of since this call (the latest intent wins)."""
        fed = {k: self._starts_fed.get(k, 0) for k in keys}
        return lambda: [k for k in keys if self._starts_fed.get(k, 0) != fed[k]]

    # -- start order ------------------------------------------------------------------

    def held_for_order(self, key: str, inst: im.Instance) -> bool:
        """Whether the start of ``key`` waits (backend.start_order): each start of an
        instance with ``after`` apps is looked at one loop turn later, once every start
        fed in this turn (its dependencies' too) has been. A start that cannot be
        recorded in backend.db is not held: it goes now, unordered, rather than lost;
        raises ShuttingDown, nothing done, when that write found a newer generation's
        claim (this one is fenced then)."""
        if inst.state not in DOWN or not inst.app.after:
            return False
        if key not in self._after_stop:
            try:
                self._hold_for_order(key, time.time() + ORDER_WAIT)
            except Exception as exc:
                if self._sup.fenced:   # a newer generation claimed backend.db: it starts it
                    raise fenced_off(key) from None
                log.error("%s: its start could not be recorded to wait for %s (%s); "
                          "starting it now", key, ", ".join(inst.app.after), exc)
                return False
        asyncio.get_running_loop().call_soon(self._start_now, key)
        return True

    def _hold_for_order(self, key: str, deadline: float) -> None:
        """Record and arm the start of ``key`` as waiting for its ``after`` apps until
        ``deadline`` (wall clock, saved with it: a generation that takes it over waits
        only for what is left), ORDER_WAIT at most. Raises what recording it raises:
        then nothing is armed."""
        within = min(max(deadline - time.time(), 0.0), ORDER_WAIT)
        self._after_stop.record(key, Wait(WaitKind.ORDER, deadline))
        self._after_stop.arm(key, within, lambda: self._expire(key, ORDER_WAIT))

    def resume_order_wait(self, key: str, deadline: float) -> None:
        """Take over the start of ``key`` a previous generation held for its ``after``
        apps: it waits for them as it did there, until ``deadline`` (not ORDER_WAIT
        afresh), and starts once none is on its way up, or then all the same. One
        already pending is left as it is. Raises ShuttingDown fenced off, and what
        recording it raises (then nothing is armed)."""
        if key in self._after_stop:
            return
        if self._sup.fenced:
            raise fenced_off(key)
        self._hold_for_order(key, deadline)
        asyncio.get_running_loop().call_soon(self._start_now, key)

    def why(self, key: str) -> str | None:
        """What the pending start of stopped instance ``key`` waits for: ``starts once
        o/db/0 is ready``; None when nothing (it is about to be taken)."""
        return once_ready(waits_for(self._sup.instances, self._after_stop.waiting(), key))

    def recheck_order(self, changed: im.Instance) -> None:
        """Look again at the waiting starts of instances that start after ``changed``'s
        app."""
        app = changed.app
        for key in self._after_stop.waiting():
            waiting = self._sup.instances.get(key)
            if waiting is not None and waiting.app.stack == app.stack \
                    and app.name in waiting.app.after:
                asyncio.get_running_loop().call_soon(self._start_now, key)

    def _expire(self, key: str, within: float) -> None:
        """A pending start's time is up: an instance still not down is left as it is
        (withdrawn); one that is down but whose ``after`` apps are still coming up
        starts all the same (ordering, not a requirement)."""
        sup = self._sup
        inst = sup.instances.get(key)
        if sup.frozen:   # kept for after the thaw, or for the next generation (journal)
            return
        if inst is None or inst.state not in DOWN or sup.fenced:
            self._after_stop.withdraw(key, f"not down within {within:g} s", logging.WARNING)
            return
        log.warning("%s: %s not ready after %g s; starting it all the same", key,
                    ", ".join(waits_for(sup.instances, self._after_stop.waiting(), key)),
                    within)
        self._after_stop.take(key, lambda: self._start(key, inst))

    # -- starts after a stop ----------------------------------------------------------

    def start_when_down(self, key: str, within: float, *, stop: bool = False
                        ) -> asyncio.Future[bool]:
        """Feed ``Start`` to ``key`` once it is down (soon if it is), after feeding it
        ``StopRequested`` first with ``stop``. The future says True once it was started,
        False when withdrawn: by a ``StopRequested`` fed after this (a later stop wins),
        when the instance is forgotten, or when it is not down within ``within``
        seconds. One per instance: asked again while one is pending, the same future
        (backend.after_stop). The start is recorded in backend.db before the stop is
        fed; raises what that write raises, and then nothing was done."""
        pending = self._after_stop.get(key)
        if pending is not None:
            return pending
        if self._sup.fenced:
            raise fenced_off(key)
        self._after_stop.record(key, Wait(WaitKind.AFTER_STOP, time.time() + within))
        self.start_fed(key)
        if stop:
            self._sup.feed(key, im.StopRequested())
        started = self._after_stop.arm(key, within, lambda: self._expire(key, within))
        self.start_if_down(key)
        return started

    def start_if_down(self, key: str) -> None:
        """Take the pending start of ``key`` one loop turn later if it is down now."""
        inst = self._sup.instances.get(key)
        if key in self._after_stop and inst is not None and inst.state in DOWN:
            # One turn later: every waiter woken by this change sees the instance down
            # first (a `tenure stop` waiting for it answers `stopped`).
            asyncio.get_running_loop().call_soon(self._start_now, key)

    def _start_now(self, key: str) -> None:
        sup = self._sup
        inst = sup.instances.get(key)
        if key not in self._after_stop or inst is None or sup.fenced:
            return   # withdrawn meanwhile, or taken by an earlier turn
        if inst.state not in DOWN:   # up again meanwhile: another start took it up
            self._after_stop.take(key, lambda: None)
        elif sup.frozen or waits_for(sup.instances, self._after_stop.waiting(), key):
            return   # kept: looked at again when a dependency changes (or after a thaw)
        else:
            self._after_stop.take(key, lambda: self._start(key, inst))
