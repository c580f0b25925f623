"""Adopting what the owner runs, as a generation starts: subscribe to the owner's
observations, adopt its launches (from the handoff checkpoint, or from its inventory and
backend.db), record the exits missed meanwhile, start again what was lost, and close
the held sockets the applied config no longer names. A part of
backend.generation.Generation (it mixes this in), apart for size; the decisions are
backend.adopt's."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from protocol.errors import BadRequest, IdentityMismatch
from protocol.handover import read_checkpoint

from .adopt import (
    Adoption,
    adopt_checkpoint,
    adopt_inventory,
    defer_backoffs,
    owner_replaced,
    record_lost_exits,
    record_unsaved_exits,
    relaunch_lost,
    resume_wanted_starts,
)
from .configrestore import adopting_config
from .supervisor import now

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from protocol.aclient import AsyncClient
    from protocol.identity import Identity
    from protocol.layout import Layout

    from .events import EventLog
    from .model import Config
    from .store import BackendStore, RecoveryStore
    from .supervisor import Supervisor

__all__ = ["Adopting", "handoff_int"]

log = logging.getLogger("tenure.backend")


class Adopting:
    """What backend.generation.Generation gives these methods."""

    layout: Layout
    activation: str
    epoch: int
    handoff: dict[str, Any]
    owner: AsyncClient | None
    owner_identity: Identity | None
    store: BackendStore | None
    recovery: RecoveryStore | None
    sup: Supervisor | None
    config: Config
    config_lost: bool
    adoption: Adoption
    events: EventLog | None
    _subscribed_at: int
    # backend.observing.Observing's, and the generation's own
    _apply_observations: Callable[[dict[str, Any]], None]
    _launch_row: Callable[[str], Coroutine[Any, Any, dict[str, Any] | None]]
    _queue_waits: Callable[[], bool]

    async def sweep_at_start(self) -> None:
        """Close the held sockets and fd stores the applied config no longer names: a
        predecessor may have died between stopping an app and closing them. Not while
        no config is applied (none yet, or backend.db was set aside): the empty config
        of such a generation names none, and every socket and fd store of an app not
        running went with it (a store is what an app keeps across its restarts; a
        socket, the connections queued for its next start)."""
        assert self.store is not None and self.sup is not None
        if self.store.config() is None:
            log.info("sockets: no config is applied: the held sockets and fd stores stay")
            return
        await self.sup.sweep_sockets(self.config)

    async def _adopt(self) -> None:
        assert self.owner is not None and self.sup is not None and self.store is not None
        checkpoint_path = self.handoff.get("checkpoint")
        checkpoint = read_checkpoint(checkpoint_path) if checkpoint_path else None
        losses = self.owner.losses
        backlog = await self.owner.call("observations.subscribe", {
            "after": handoff_int(checkpoint, "cursor") if checkpoint else
            handoff_int(self.handoff, "cursor", 0), "limit": 10_000})
        self._subscribed_at = losses
        # after the fence nothing but this generation launches, so the inventory can only
        # lose launches from here on (their exits come as observations): it serves the
        # relaunch below as well, and the intents are asked for beside it
        answers = await asyncio.gather(self.owner.call("inventory"),
                                       self.owner.call("stack.intents"))
        inv, intents = answers[0]["launches"], answers[1]["intents"]
        if self.config_lost and inv:
            self._adopt_by_given_config()
        if checkpoint is not None:
            if checkpoint.get("owner") != self.owner_identity.to_wire():  # type: ignore[union-attr]
                raise IdentityMismatch("the checkpoint names another owner")
            self.adoption = adopt_checkpoint(self.sup, self.config, checkpoint, inv, now())
        else:
            self.adoption = adopt_inventory(self.sup, self.config, self.store.instances(), inv,
                                            now())
        # before anything this generation does (or hears of) with what it adopted
        assert self.events is not None
        self.events.record("handoff", phase="adopted", activation=self.activation,
                           epoch=self.epoch, mode=self.handoff.get("mode"),
                           adopted=len(self.adoption.adopted),
                           missing=len(self.adoption.missing))
        # the exits of launches made after an instance was last saved, before the one
        # adopted (the previous generation died within a save's interval of them)
        await record_unsaved_exits(self.sup, self.adoption.unsaved, self._launch_row)
        # the launches adopted as the inventory was read: only these can be lost (the
        # replay below may launch an instance again, after the inventory was read)
        known = {k: i.launch_key for k, i in self.sup.instances.items()}
        self._apply_observations(backlog)
        stopped = {s for s, v in intents.items() if v.get("intent") == "stopped"}
        live = {r["launch_key"] for r in inv}
        await record_lost_exits(self.sup, live, self._launch_row, known)
        # a config queued before this generation began (`tenure up --config` on a home
        # whose daemons were down) decides what starts: the applied one's instances
        # wait for it (_spool_loop), rather than start and be replaced at once. Not in
        # a hot handoff (a checkpoint): the incumbent ran them and would go on so (a
        # backoff stopped here lost its deadline and streak; a config it had taken may
        # wait long, for an operation that holds its stacks)
        defer = checkpoint is None and self._queue_waits()
        lost = relaunch_lost(self.sup, live, stopped, known, defer=defer)
        for key, (app, index) in self.sup.keys_of(self.config).items():
            if key not in self.sup.instances:  # restored instances keep their own state
                up = app.stack not in stopped
                self.sup.ensure(app, index, None if defer and up else up)
        if defer:
            defer_backoffs(self.sup, stopped)
        if lost:
            self._log_lost(lost, "starting them again" if not self.sup.deferred else
                           "they start once the config queued for the backend is decided")
        resume_wanted_starts(self.sup, self.store, stopped)

    def _adopt_by_given_config(self) -> None:
        """Apps run and backend.db holds no applied config (set aside): the config given
        to `tenure backend recover --config` is the one to adopt them by, kept as the
        applied one (backend.configrestore). Raises Uncertain, ConfigInvalid."""
        assert self.store is not None and self.recovery is not None
        self.config, text = adopting_config(self.recovery.read()["body"],
                                            self.layout.queued_config)
        with self.store.tx() as db:
            self.store.set_config(db, text, self.config.source, self.config.revision)
        log.warning("backend.db held no applied config while apps run: adopting them by "
                    "%s (revision %s), as given", self.config.source,
                    self.config.revision[:12])

    def _log_lost(self, lost: list[str], then: str) -> None:
        """Say why instances are started again: the owner they ran under stopped (the
        last certificate names another owner instance: `tenure down`, an owner restart,
        a reboot; it stopped them itself, or they ended with the machine), or they ended
        while no backend watched (a crash, a kill: worth a warning)."""
        assert self.recovery is not None and self.owner_identity is not None
        if owner_replaced(self.recovery.read()["body"], self.owner_identity.instance):
            log.info("%d instances ran under the owner that stopped before this one "
                     "(tenure down, an owner restart or a reboot); %s: %s",
                     len(lost), then, lost[:10])
        else:
            log.warning("%d instances lost their process while no backend watched; "
                        "%s: %s", len(lost), then, lost[:10])


def handoff_int(d: dict[str, Any] | None, key: str, default: int | None = None) -> int:
    """The integer ``key`` of a handoff record or checkpoint. Raises BadRequest when it
    is missing (without ``default``) or not an integer."""
    v = (d or {}).get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"handoff record field {key} must be an integer")
    return v
