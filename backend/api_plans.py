"""The backend API's plans and operations: ``plan`` (a config checked against what runs
and stored), ``apply`` (the operation applying a plan, admitted once per request id),
and ``op.list``, ``op.show`` and ``op.abandon``. A part of backend.api.Api (it mixes
this in), apart for size."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    Conflict,
    ConnectFailed,
    OutcomeUnknown,
    OwnerUnavailable,
    ShuttingDown,
    StalePlan,
)
from protocol.server import Call
from protocol.window import refuse_in_window

from .activation import CAPABILITY, check_sockets, needs_sockets, retuned
from .config import check_declares_something, check_new, parse_recent
from .configfile import check_size
from .enforce import Host, check_config
from .jobs.config import job_changes
from .model import Config
from .plan import (
    live_revision,
    new_plan,
    running_definitions,
    setting_changes,
    shown_stopped,
)

if TYPE_CHECKING:
    from .generation import Generation
    from .operations import OperationRunner
    from .steps import StepGate
    from .store import BackendStore
    from .supervisor import Supervisor

__all__ = ["PlanCommands"]


class PlanCommands:
    """What backend.api.Api gives these methods."""

    gen: Generation
    sup: Supervisor
    store: BackendStore
    gate: StepGate
    ops: OperationRunner
    intents: dict[str, Any]
    stopped_stacks: Callable[[], set[str]]
    _owner: Callable[[], Any]
    _link: Callable[..., dict[str, Any]]
    _unavailable: Callable[[str, str, dict[str, Any]], OwnerUnavailable]
    _require_owner: Callable[[str], None]

    def _basis(self) -> dict[str, Any]:
        """What a plan reads of the instances (backend.plan.compute_changes): the
        definitions they run, those shown stopped, those an open operation still
        restarts. One deferred for a queued config (backend.generation) runs nothing
        yet: the plan starts it, on the new definition."""
        held, instances = self.stopped_stacks(), [
            i for k, i in self.sup.instances.items() if k not in self.sup.deferred]
        return {"running": running_definitions(instances, held),
                "stopped": shown_stopped(instances), "rolling": self.ops.rolling()}

    def _live(self, basis: dict[str, Any] | None = None) -> str:
        """The live revision (backend.plan.live_revision) of now, of ``basis`` when
        given (:meth:`_basis`, taken now)."""
        return live_revision(self.gen.config, self.intents, list(self.sup.instances),
                             **(basis if basis is not None else self._basis()))

    async def plan(self, call: Call) -> Any:
        """A plan checks the config against the owner (its uid, cgroups, sockets): one
        that does not answer is named (a stopped one: with its kill -CONT), not left as
        a bare CONNECT_FAILED of the handshake; a config that does not parse is said
        first, as ever."""
        try:
            return await self.plan_text(call.params["config_text"], call.params["source"],
                                        owner_needed=True)
        except (ConnectFailed, OutcomeUnknown) as exc:
            raise self._unavailable(f"did not answer ({exc.msg})", "plan",
                                    self._link(failed=True)) from None

    async def plan_text(self, text: str, source: str, *, owner_needed: bool = False
                        ) -> dict[str, Any]:
        """Plan ``text`` against what runs; the plan is stored. Raises ConfigInvalid and
        the config checks' errors; with ``owner_needed`` (`tenure plan`), OwnerUnavailable
        when the owner does not answer, once the config parsed."""
        check_size(source, text)
        new = parse_recent(text, source)
        check_declares_something(new)
        check_new(new, text)
        if owner_needed:
            self._require_owner("plan")
        owner = self._owner()
        host = Host.of(await owner.call("status"))
        check_config(new, text, host)
        retune = await self._check_sockets(new, text, host.owner_uid)
        basis = self._basis()
        plan = new_plan(self.gen.config, new, text, source, self._live(basis),
                        retune=retune, **basis)
        self.store.add_plan(plan)
        stopped = sorted(set(plan["stacks"]) & self.stopped_stacks())   # stays down
        return {**{k: plan[k] for k in ("id", "fingerprint", "changes", "config_revision",
                                        "live_revision", "stacks")},
                "jobs": job_changes(self.gen.config, new),
                "settings": setting_changes(self.gen.config, new),
                "stopped_stacks": stopped}

    async def _check_sockets(self, new: Config, text: str, owner_uid: int
                             ) -> dict[str, list[str]] | None:
        """Plan-time socket checks (backend.activation.check_sockets); returns the held
        sockets whose settings ``new`` changes in place (backend.plan.Retune), None when
        the owner cannot change them in place."""
        if not needs_sockets(new):
            return {}
        owner = self._owner()
        caps = (await owner.connect()).capabilities
        held = (await owner.call("sockets.list"))["sockets"] \
            if caps.get("sockets") == CAPABILITY["sockets"] else []
        check_sockets(new, text, caps, held, owner_uid)
        if caps.get("socketUpdate") != CAPABILITY["socketUpdate"]:
            return None
        return retuned(new, held)

    async def apply(self, call: Call) -> Any:
        refuse_in_window(self.gen.layout.home, f"apply {call.params['plan']}")
        return self.admit(call.params["plan"], call.params["request_id"],
                          owner_needed=True)

    async def apply_text(self, text: str, source: str, request_id: str) -> dict[str, Any]:
        """Plan and apply ``text`` at once (a queued config, backend.spool); the
        operation admitted for ``request_id`` before, when there is one (a queue taken
        again after a generation died); ``planned``: the plan, when one was made."""
        if (prior := self.store.operation_by_request(request_id)) is not None:
            return prior
        plan = await self.plan_text(text, source)
        return {**self.admit(plan["id"], request_id), "planned": plan}

    def admit(self, plan_id: str, rid: str | None, *, owner_needed: bool = False
              ) -> dict[str, Any]:
        """The operation applying plan ``plan_id`` (``{"id": None, ...}`` when there is
        nothing to change); with request id ``rid``, the one admitted for it before; the
        open one already applying the plan's config, marked ``joined`` (nothing admitted).
        With ``owner_needed`` (`tenure apply`) a new operation is refused while the owner
        does not answer (OwnerUnavailable): admitted, it waited silently, then failed
        its step as 'did not settle', saying nothing of the owner; what was admitted
        before is answered all the same. Raises NotFound, Conflict, StalePlan,
        OperationInProgress, and ShuttingDown once a handoff's drain began (a queued
        config planned while it began: the checkpoint may be taken, and the next
        generation takes the queue again)."""
        if self.gate.paused:
            raise ShuttingDown(f"the backend is draining for a handoff; plan {plan_id} "
                               "was not admitted (a config `tenure up` queued is taken "
                               "again by the generation that serves next)",
                               {"plan": plan_id})
        plan = self.store.plan(plan_id)
        if rid and (prior := self.store.operation_by_request(rid)) is not None:
            if prior["plan"] != plan["id"]:
                raise Conflict(f"request id {rid} was used for plan {prior['plan']}",
                               {"request_id": rid, "plan": prior["plan"]})
            return prior
        applied = plan["config_revision"] == self.gen.config.revision
        # checked first: an operation still applying this config has made it the applied
        # one and changed what runs (so this plan, made before it, is stale), and its
        # instances may already run it (not ready, or about to fail): the answer is that
        # operation, whatever it ends with
        if applied and (open_op := self.ops.applying(plan["config_revision"])) is not None:
            return {**open_op, "joined": True}
        if plan["live_revision"] != self._live():
            raise StalePlan("the running system changed since this plan was made; plan "
                            "again", {"plan": plan["id"]})
        if applied and not plan["changes"]:
            return {"id": None, "outcome": "no-change", "changes": []}
        if owner_needed:
            self._require_owner(f"apply {plan_id}")
        return self.ops.admit(plan, rid)

    async def op_list(self, call: Call) -> Any:
        return {"operations": self.store.operations(open_only=call.params["open"])}

    async def op_show(self, call: Call) -> Any:
        """The operation's row; with ``wait`` (seconds) once it ended, or ``wait`` passed,
        or a drain began, whichever comes first (``tenure up`` and ``apply`` wait so,
        instead of asking again and again; an older backend ignores ``wait``)."""
        task = self.ops.tasks.get(call.params["id"])
        if call.params["wait"] > 0 and task is not None:
            await self.sup.wait(lambda: task.done() or self.gate.paused, call.params["wait"])
        op = self.store.operation(call.params["id"])
        plan = self.store.plan(op["plan"]) if op["plan"] else None
        return {**op, "changes": plan["changes"] if plan else [],
                "running_here": op["id"] in self.ops.tasks}

    async def op_abandon(self, call: Call) -> Any:
        return await self.ops.abandon(call.params["id"])
