"""Following the owner while a generation serves: its observations read and applied,
the subscription made again after the connection broke, a gap in them repaired from its
inventory, and its status asked once a heartbeat (the owner link: protocol.link). A part
of backend.generation.Generation (it mixes this in), apart for size."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from protocol.errors import NotFound, OwnerChanged, TenureError
from protocol.link import STALE_AFTER, Link, LinkEvent, LinkState

from .adopt import missed_exits
from .jobs.resume import audit
from .tasks import spawn

if TYPE_CHECKING:
    from protocol.aclient import AsyncClient

    from .drainstate import DrainState
    from .supervisor import Supervisor

__all__ = ["HEARTBEAT", "Observing"]

log = logging.getLogger("tenure.backend")

HEARTBEAT = 1.0
"""Seconds between the owner's status asks (and the log budget loop's ticks)."""


class Observing:
    """What backend.generation.Generation gives these methods."""

    epoch: int
    owner: AsyncClient | None
    sup: Supervisor | None
    api: Any
    link: Link
    cursor: int
    drain_state: DrainState
    log_dropped: dict[tuple[str, str], int] | None
    owner_uncertain: frozenset[str]
    log_write_error: dict[str, Any] | None
    _subscribed_at: int
    _repairs: set[asyncio.Future[Any]]
    _thawed: asyncio.Event

    def _apply_observations(self, batch: dict[str, Any]) -> None:
        assert self.sup is not None
        self.link.handle(LinkEvent.SEEN, time.time())
        for e in batch["events"]:
            self._observe(e)
        self.cursor = max(self.cursor, batch["cursor"])
        if batch.get("gap"):
            log.warning("observation gap after cursor %s: repairing from the inventory",
                        self.cursor)
            spawn(self._repairs, self._repair_gap(), log, "observation gap repair")

    async def _repair_gap(self) -> None:
        """Events were lost: every instance whose launch the owner no longer runs gets
        the exit it would have heard, exactly as if the event had come (restart policy,
        readiness and operations follow from it); every running job record whose launch
        ended is settled from the owner's record at once."""
        assert self.owner is not None and self.sup is not None
        try:
            live = {r["launch_key"] for r in
                    (await self.owner.call("inventory"))["launches"]}
            for missed in missed_exits(self.sup, live):
                ended = await self._ended(missed)
                self.sup.on_observation({"kind": "exit", "launch_key": missed, **ended})
            if self.api is not None:   # jobs: their records settle from the owner's rows
                await audit(self.api.jobs, "was lost in an observation gap")
        except TenureError as exc:   # the next gap or reconnect repairs again
            log.error("could not repair the observation gap: %s", exc)

    async def _ended(self, launch_key: str) -> dict[str, Any]:
        """How a launch ended, from the owner's record (unknown: neither code nor signal),
        and when (``at``, as an observation says it: the exit event is told then)."""
        row = (await self._launch_row(launch_key)) or {}
        ex = row.get("exit") or {}
        return {"exit_code": ex.get("exit_code"), "signal": ex.get("signal"),
                "at": row.get("ended_at")}

    async def _launch_row(self, launch_key: str) -> dict[str, Any] | None:
        """The owner's record of a launch that had a process; None when it has none."""
        assert self.owner is not None
        try:
            return dict(await self.owner.call("inspect", {"launch_key": launch_key}))
        except NotFound:
            return None

    def _observe(self, e: dict[str, Any]) -> None:
        assert self.sup is not None
        self.sup.on_observation(e)
        if self.api is not None:
            self.api.jobs.on_observation(e)

    async def _read_observations(self) -> None:
        assert self.owner is not None and self.sup is not None
        while True:
            await self._thawed.wait()
            ev = await self.owner.next_event(1.0)
            if self.owner.losses != self._subscribed_at:
                # the connection our subscription lived on is gone, even if another
                # call has connected again since: nothing is pushed until we subscribe
                self.link.handle(LinkEvent.BROKE, time.time(), "the connection broke")
                await self._reconnect_owner()
                continue
            if ev is None or ev.stream != "observations" or ev.cursor <= self.cursor:
                continue
            self.link.handle(LinkEvent.SEEN, time.time())
            # Frozen meanwhile: hold the event until resumed. Dropping it was safe only
            # for a handoff that completes (the next generation reads after the
            # checkpoint's cursor); after an aborted drain nobody would read it again.
            await self._thawed.wait()
            self._observe({**ev.e, "cursor": ev.cursor})
            self.cursor = max(self.cursor, ev.cursor)

    async def _reconnect_owner(self) -> None:
        """The owner connection broke: resubscribe after our cursor (same instance only:
        the client refuses another owner with OWNER_CHANGED)."""
        assert self.owner is not None
        losses = self.owner.losses
        try:
            batch = await self.owner.call("observations.subscribe",
                                          {"after": self.cursor, "limit": 10_000})
            self._subscribed_at = losses   # lost meanwhile: the reader subscribes again
            self._apply_observations(batch)
        except OwnerChanged as exc:
            self.link.handle(LinkEvent.CHANGED, time.time(), exc.msg)
            log.error("another owner instance answers: %s", exc)
            await asyncio.sleep(1.0)
        except TenureError as exc:
            self.link.handle(LinkEvent.FAILED, time.time(), exc.msg)
            log.error("owner unreachable: %s", exc)
            await asyncio.sleep(1.0)

    async def _heartbeat_loop(self) -> None:
        """The owner's status once a second: the age of our view says how current it is
        even when nothing happens, and ``log_dropped`` (lines the owner's journal dropped
        per app: its queue was full, or a write failed) and ``log_write_error`` (while its
        writes fail) are kept for status and inspect without a call of their own."""
        assert self.owner is not None
        while True:
            await asyncio.sleep(HEARTBEAT)
            if self.link.state is not LinkState.CONNECTED:
                continue
            try:
                # until the view would go stale anyway (it was seen a heartbeat ago): a
                # timed-out call drops the connection and every call on it (each then
                # tried again), and an owner busy stopping thousands of apps could
                # answer in 3 s, not in 2
                self._owner_status(await self.owner.call(
                    "status", timeout=STALE_AFTER - HEARTBEAT))
                self.link.handle(LinkEvent.SEEN, time.time())
            except OwnerChanged as exc:
                self.link.handle(LinkEvent.CHANGED, time.time(), exc.msg)
            except TenureError as exc:
                self.link.exchange_failed(time.time(), exc.msg)

    def _owner_status(self, status: dict[str, Any]) -> None:
        """Keep what the owner's status says. A newer epoch fences this generation,
        unless a handoff holds it: then the guardian fenced for its candidate and
        retires it next (backend.drainwatch ends a handoff the guardian left)."""
        epoch = status.get("epoch")
        if self.sup is not None and isinstance(epoch, int) and epoch > self.epoch and \
                not self.drain_state.held:
            self.sup.fence(f"the owner holds epoch {epoch}, this generation {self.epoch}")
        dropped = status.get("log_dropped")
        self.log_dropped = None if not isinstance(dropped, dict) else {
            (k.partition("/")[0], k.partition("/")[2]): n for k, n in dropped.items()}
        failing = status.get("log_write_error")
        self.log_write_error = failing if isinstance(failing, dict) else None
        uncertain = status.get("uncertain")
        self.owner_uncertain = frozenset(k for k in uncertain if isinstance(k, str)) \
            if isinstance(uncertain, list) else frozenset()
