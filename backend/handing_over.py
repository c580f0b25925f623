"""The handing-over side of a hot handoff, as the generation that holds control performs
it: drain, checkpoint, resume, retire, and standing down when fenced off (the machine
is backend.drainstate; backend.drainwatch ends a handoff its guardian left). A part of
backend.generation.Generation (it mixes this in), apart for size."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from protocol.digest import inventory_digest
from protocol.errors import OperationInProgress
from protocol.handover import pack_checkpoint, write_checkpoint
from protocol.tasks import background

from .certify import persist
from .drainstate import PUBLIC, Action, DrainState, Stage
from .drainstate import Event as Handoff
from .drainwatch import Caller, DrainWatch

if TYPE_CHECKING:
    from protocol.identity import Identity
    from protocol.server import RpcServer

    from .events import EventLog
    from .generation import Generation
    from .model import Config
    from .supervisor import Supervisor

__all__ = ["HandingOver"]

log = logging.getLogger("tenure.backend")


class HandingOver:
    """What backend.generation.Generation gives these methods."""

    activation: str
    epoch: int
    cursor: int
    config: Config
    sup: Supervisor | None
    server: RpcServer | None
    api: Any
    events: EventLog | None
    owner_identity: Identity | None
    drain_state: DrainState
    checkpoint_path: str | None
    _drain_watch: asyncio.Task[None] | None
    _done: asyncio.Event
    _thawed: asyncio.Event

    @property
    def draining(self) -> bool:
        """Whether a handoff holds the generation (changes are refused)."""
        return PUBLIC[self.drain_state.stage]

    async def drain(self, timeout: float, caller: Caller | None = None) -> dict[str, Any]:
        """Refuse new public requests; let the steps already running end while the
        reconciler still acts (no new step begins); then freeze decisions and wait for
        the owner calls in flight. A drain whose steps do not end in time does not
        freeze: it reports ``drained: false`` and ``resume`` continues where it was.
        The answer names the steps still running and those the drain waited for.
        Raises OperationInProgress when a handoff holds the generation already. Until
        the guardian resumes or retires it, backend.drainwatch watches the guardian: a
        drain it leaves is ended here (then this one answers ``drained: false``)."""
        assert self.sup is not None and self.server is not None and self.api is not None
        sup, loop = self.sup, asyncio.get_running_loop()
        start = loop.time()
        self._feed(Handoff.DRAIN)
        self._handoff_event("draining")
        self.server.begin_drain()
        self.api.pause()
        watch = DrainWatch(cast("Generation", self), caller or Caller(), timeout)
        self._drain_watch = background(watch.run(), "drain watch", log)
        waited_for = self.api.running_steps()
        ok = await self.api.wait_paused(timeout)
        if ok and self.drain_state.stage is Stage.DRAINING:
            self._thawed.clear()
            sup.freeze()
            left = max(0.0, start + timeout - loop.time())
            ok = await sup.wait(lambda: sup.in_flight == 0, left)
        ok = ok and self.drain_state.stage is Stage.DRAINING   # not ended meanwhile
        self._feed(Handoff.ANSWERED)
        self._handoff_event("drained" if ok else "not-drained")
        return {"drained": ok, "in_flight": sup.in_flight, "steps": self.api.running_steps(),
                "calls": sup.in_flight_calls(), "waited_for": waited_for,
                "seconds": round(loop.time() - start, 3)}

    def resume(self) -> dict[str, Any]:
        """Abort path: serve again as if nothing happened; paused operations go on.
        ``resumed: false`` from a generation that retires or stood down."""
        return {"resumed": self._feed(Handoff.RESUME) is Action.RESUME}

    def end_held(self, event: Handoff, why: str) -> None:
        """backend.drainwatch: the guardian left the handoff (``LEFT``, ``EXPIRED``:
        serve again) or a newer epoch holds the owner (``FENCED``: stand down)."""
        self._feed(event, why)

    def fenced_off(self, why: str) -> None:
        """The supervisor learnt that a newer epoch holds the owner."""
        self._feed(Handoff.FENCED, why)

    def _feed(self, event: Handoff, why: str | None = None) -> Action:
        """One event of the handoff machine, and what it asks for. Raises
        OperationInProgress for a request it refuses."""
        stage = self.drain_state.stage
        action = self.drain_state.feed(event, time.monotonic())
        if action is Action.REFUSE:
            raise OperationInProgress(f"cannot {event}: this generation is {stage} (a "
                                      "handoff holds it, or ended it)", {"stage": str(stage)})
        if action is Action.RESUME:
            self._serve_again(why)
        elif action is Action.STAND_DOWN:
            self._stand_down(why)
        elif action is Action.LEAVE:
            self._stand_down(why)
            self._leave()
        elif action is Action.RETIRE:
            self._retire()
        return action

    def _serve_again(self, why: str | None) -> None:
        assert self.sup is not None and self.server is not None
        self._stop_watch()
        self.server.end_drain()
        self.sup.thaw()
        self._thawed.set()
        if self.api is not None:
            self.api.unpause()
        if why is None:
            self._handoff_event("resumed")
        else:
            log.warning("resuming as the incumbent: %s", why)
            self._handoff_event("resumed", by="itself", why=why)

    def _stand_down(self, why: str | None) -> None:
        """A candidate holds the owner: this generation acts never again. The API keeps
        draining (changes get SHUTTING_DOWN; status and the control methods answer) and
        decisions stay frozen until the guardian retires it."""
        assert self.sup is not None
        self._stop_watch()
        log.error("standing down for good: %s", why)
        self.sup.fence(why or "a newer generation holds the owner")
        self._handoff_event("stood-down", why=why)

    def _leave(self) -> None:
        """Fenced while serving: no guardian holds this generation to retire it, and the
        next one needs the API socket. Changes are refused from now on; the process
        exits (saving nothing of the instances: they are the next generation's)."""
        if self.server is not None:
            self.server.begin_drain()
        if self.api is not None:
            self.api.pause()   # requests waiting on a step end (SHUTTING_DOWN)
        self._done.set()

    def _retire(self) -> None:
        self._stop_watch()
        if self.server is not None:
            self.server.begin_drain()
        self._handoff_event("retiring")
        self._done.set()

    def _stop_watch(self) -> None:
        watch, self._drain_watch = self._drain_watch, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()

    def checkpoint(self, path: str) -> dict[str, Any]:
        """Write the handoff checkpoint (0600, atomic). Never logged: it holds env.
        Raises OperationInProgress unless drained (frozen, no step running, no owner call
        in flight): anything still running would change the state after it was written."""
        assert self.sup is not None and self.owner_identity is not None
        steps = self.api.running_steps() if self.api is not None else []
        if not self.sup.frozen or steps or self.sup.in_flight:
            raise OperationInProgress(
                "not drained: a step or an owner call is still running; drain first",
                {"steps": steps, "in_flight": self.sup.in_flight, "frozen": self.sup.frozen})
        self._feed(Handoff.CHECKPOINT)
        self.checkpoint_path = path
        self._handoff_event("checkpointed")
        persist(cast("Generation", self))
        inventory = self.sup.inventory()
        write_checkpoint(path, pack_checkpoint(
            from_activation=self.activation, owner=self.owner_identity.to_wire(),
            epoch=self.epoch, cursor=self.cursor, config_revision=self.config.revision,
            instances=[i.to_wire() for i in self.sup.instances.values()],
            inventory=inventory,
            operations=self.api.open_operation_ids() if self.api else [],
            written_at=time.time(), deferred=sorted(self.sup.deferred)))
        return {"path": path, "inventory_digest": inventory_digest(inventory),
                "launches": len(inventory), "cursor": self.cursor}

    def retire(self) -> None:
        self._feed(Handoff.RETIRE)

    @property
    def stood_down(self) -> bool:
        """Whether it ended fenced off, not retired by its guardian."""
        return self.drain_state.stage is Stage.STOOD_DOWN

    def _handoff_event(self, phase: str, **detail: Any) -> None:
        if self.events is not None:
            self.events.record("handoff", phase=phase, activation=self.activation,
                               epoch=self.epoch, **detail)
