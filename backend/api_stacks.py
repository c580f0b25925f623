"""The backend API's durable stack commands: ``stack.stop`` (reviewed by digest) and
``stack.start``. A part of backend.api.Api (it mixes this in), apart for size.

The latest command wins. Each command writes the stack's intent in the owner and then
feeds its stops or starts, under one lock per stack: two commands land in the order they
arrived, and none reads an intent that another is still writing. A start finds the
instances a stop is still stopping and starts them once they are down
(backend.after_stop). A command waiting for its instances ends its wait as soon as a
later command moved the intent past the revision it wrote, and says which
(``superseded``): the later command has the instances now.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from protocol.errors import BadRequest, NotFound, StalePlan
from protocol.server import Call
from protocol.window import refuse_in_window

from . import instance as im
from .after_stop import DOWN
from .api_instances import UP
from .model import canonical_digest
from .stop_records import STOP_TIMEOUT
from .tasks import spawn

if TYPE_CHECKING:
    from .generation import Generation
    from .steps import StepGate
    from .supervisor import Supervisor

__all__ = ["Intent", "StackCommands"]

log = logging.getLogger("tenure.backend")

START_TIMEOUT = 300.0   # seconds a `stack start` waits for its instances


class Intent(StrEnum):
    """A stack's durable intent, as the owner stores and sends it (owner.store.Intent:
    the values never change)."""

    RUNNING = "running"
    STOPPED = "stopped"


# the command that writes each intent (what a superseded command's answer names), and
# the states its instances are waited for
SET_BY: dict[Intent, str] = {Intent.RUNNING: "stack start", Intent.STOPPED: "stack stop"}
WAITS_FOR: dict[Intent, tuple[im.State, ...]] = {Intent.RUNNING: UP, Intent.STOPPED: DOWN}
assert set(SET_BY) == set(WAITS_FOR) == set(Intent)

NO_INTENT: dict[str, Any] = {"intent": str(Intent.RUNNING), "revision": 0}


def loop_time() -> float:
    return asyncio.get_running_loop().time()


class StackCommands:
    """What backend.api.Api gives these methods."""

    gen: Generation
    sup: Supervisor
    gate: StepGate
    intents: dict[str, Any]
    _stack_locks: dict[str, asyncio.Lock]
    _owner: Callable[[], Any]
    _require_owner: Callable[[str], None]
    _cycles: set[asyncio.Future[Any]]
    _finishing: dict[str, asyncio.Future[Any]]   # stack -> its stack stop's finisher
    _start_each: Callable[[list[str], str, float], dict[str, asyncio.Future[bool]]]
    _stop_first: Callable[..., list[list[str]]]
    _stop_rest: Callable[..., Any]
    _settle: Callable[..., Any]

    def stopped_stacks(self) -> set[str]:
        return {s for s, v in self.intents.items() if v.get("intent") == Intent.STOPPED}

    def _stack_review(self, stack: str) -> tuple[list[dict[str, Any]], str]:
        if stack not in self.gen.config.stacks and not any(
                k.startswith(stack + "/") for k in self.sup.instances):
            raise NotFound(f"no stack {stack!r}", {"stack": stack})
        rows = [r for r in self.sup.inventory() if r["stack"] == stack]
        revision = self.intents.get(stack, NO_INTENT)["revision"]
        digest = canonical_digest({"stack": stack, "launches": [r["launch_key"] for r in rows],
                                   "intent_revision": revision})[:16]
        return rows, digest

    def _stack_lock(self, stack: str) -> asyncio.Lock:
        """Held while a command writes ``stack``'s intent and feeds what it implies."""
        return self._stack_locks.setdefault(stack, asyncio.Lock())

    async def stack_stop(self, call: Call) -> Any:
        """Dry run: what would stop, and the digest of that review. With the digest:
        set the owner's durable intent first, then stop exactly those instances. Raises
        NotFound, BadRequest (no digest), StalePlan (the digest is not the current one,
        checked again once no other stack command runs), and what the intent write
        raises (Conflict, StaleEpoch)."""
        p, stack = call.params, call.params["stack"]
        rows, digest = self._stack_review(stack)
        if p["dry_run"]:
            return {"stack": stack, "will_stop": rows, "digest": digest}
        if p["digest"] is None:
            raise BadRequest("give --digest from a --dry-run review (or --dry-run first)")
        refuse_in_window(self.gen.layout.home, f"stack stop {stack}")
        self._require_owner(f"stack stop {stack}")   # a stopped owner: named, nothing done
        deadline = asyncio.get_running_loop().time() + p["timeout"]
        async with self._stack_lock(stack):
            digest = self._stack_review(stack)[1]   # a start may have run meanwhile
            if p["digest"] != digest:
                raise StalePlan("the stack changed since the review; run --dry-run again",
                                {"digest": digest})
            with self.gate.step(f"stack stop {stack}"):
                revision = await self._set_intent(stack, Intent.STOPPED)
                keys = [k for k in self.sup.instances if k.split("/")[0] == stack]
                levels = self._stop_first(keys)
        # the rest in order, outside the lock: a later command takes over from here
        await self._stop_rest(levels, deadline, f"stack stop {stack}",
                              superseded=self._moved_on(stack, revision))
        return {"stack": stack, "intent": str(Intent.STOPPED), **await self._stack_settle(
            stack, Intent.STOPPED, revision, keys, max(0.0, deadline - loop_time()), {})}

    def resume_stack_stops(self) -> None:
        """A new generation stops what still runs of a stack whose intent is stopped
        (a stack stop cut by a handoff or a crash before it asked every instance), in
        order, in the background."""
        for stack in sorted(self.stopped_stacks()):
            keys = [k for k, i in self.sup.instances.items() if k.split("/")[0] == stack
                    and (i.state not in DOWN or self.sup.leaving(k))]
            running = self._finishing.get(stack)
            if not keys or (running is not None and not running.done()):
                continue   # one finisher a stack: a drain and its abort, twice over
            log.warning("stack %s is stopped but %d of its instances still run: stopping "
                        "them, in the reverse of their start order", stack, len(keys))
            revision = int(self.intents[stack]["revision"])   # the intent seen stopped
            self._finishing[stack] = spawn(
                self._cycles, self._finish_stack_stop(stack, keys, revision), log,
                f"stack stop {stack}")

    async def _finish_stack_stop(self, stack: str, keys: list[str], revision: int) -> None:
        """Stop ``keys`` in order unless a later command moved the intent past
        ``revision`` (a `stack start` answered meanwhile has the stack), or a drain
        began (whoever serves next finishes it)."""
        moved_on = self._moved_on(stack, revision)
        async with self._stack_lock(stack):   # a command writing the intent ends first
            if moved_on() or self.gate.paused:
                return
            with self.gate.step(f"stack stop {stack}"):
                levels = self._stop_first(keys)
        await self._stop_rest(levels, loop_time() + STOP_TIMEOUT, f"stack stop {stack}",
                              superseded=moved_on)

    def _moved_on(self, stack: str, revision: int) -> Callable[[], bool]:
        """Whether a later command moved ``stack``'s intent past ``revision``."""
        return lambda: bool(self.intents.get(stack, NO_INTENT)["revision"] != revision)

    async def stack_start(self, call: Call) -> Any:
        """Set the intent back to running, then start every instance of the stack in
        the applied config (one still stopping once it is down). Raises NotFound, and
        what the intent write raises (Conflict, StaleEpoch)."""
        stack = call.params["stack"]
        # a stack removed from the config while stopped may be started: that clears it
        if stack not in self.gen.config.stacks and stack not in self.stopped_stacks():
            raise NotFound(f"no stack {stack!r} in the applied config", {"stack": stack})
        refuse_in_window(self.gen.layout.home, f"stack start {stack}")
        self._require_owner(f"stack start {stack}")   # its states would be the past
        async with self._stack_lock(stack):
            with self.gate.step(f"stack start {stack}"):
                revision = await self._set_intent(stack, Intent.RUNNING)
                keys = self._stack_instances(stack)
                deferred = self._start_each(keys, "stack start", START_TIMEOUT)
        return {"stack": stack, "intent": str(Intent.RUNNING), **await self._stack_settle(
            stack, Intent.RUNNING, revision, keys, START_TIMEOUT, deferred)}

    def _stack_instances(self, stack: str) -> list[str]:
        """The instance keys of ``stack`` in the applied config, each on its applied
        definition; one not known yet is created, stopped (for the caller to start)."""
        keys = []
        for key, (app, index) in self.sup.keys_of(self.gen.config).items():
            if app.stack != stack:
                continue
            if key in self.sup.instances:
                self.sup.take_app(key, app)
            else:
                self.sup.ensure(app, index, False)
            keys.append(key)
        return keys

    async def _stack_settle(self, stack: str, intent: Intent, revision: int,
                            keys: list[str], timeout: float,
                            deferred: dict[str, asyncio.Future[bool]]) -> dict[str, Any]:
        """Wait for the instances of the command that made ``intent`` (at ``revision``)
        the stack's, or until a later command moved the intent on: then ``superseded``
        says to what and by which command (the answer's states are those of that
        moment). Raises ShuttingDown as :meth:`InstanceCommands._settle`."""
        moved_on = self._moved_on(stack, revision)
        answer: dict[str, Any] = await self._settle(
            keys, WAITS_FOR[intent], timeout, f"{SET_BY[intent]} {stack}",
            deferred=deferred, superseded=moved_on)
        if moved_on():
            now = self.intents[stack]
            answer["superseded"] = {"by": SET_BY[Intent(now["intent"])],
                                    "intent": now["intent"], "revision": now["revision"]}
        return answer

    async def _set_intent(self, stack: str, intent: Intent) -> int:
        """Make ``intent`` the owner's durable intent of ``stack``; the revision in
        effect afterwards (the same when it was already so). The certificate stops
        vouching first (a failure to invalidate raises and nothing is sent). Call it
        holding the stack's lock. Raises what the owner raises (Conflict, StaleEpoch)."""
        current = self.intents.get(stack, NO_INTENT)
        if current["intent"] == intent:
            return int(current["revision"])
        self.gen.invalidate("stack intent")
        r = await self._owner().call("stack.set_intent", {
            "stack": stack, "intent": str(intent), "expected_revision": current["revision"]},
            epoch=self.gen.epoch)
        self.intents[stack] = {"intent": r["intent"], "revision": r["revision"]}
        self.sup.wake()   # a command waiting on the intent it wrote has been superseded
        return int(r["revision"])
