"""Fakes for the guardian's flows: a fake owner, fake backend generations and a
:class:`FakeCoordinator` that keeps the real phase tables, state.db, grants, receipts,
handoff records and checkpoints, and replaces only the processes and sockets. Unit tests
of handoff, cold starts and boot run in milliseconds and never sleep.

Faults are set on the :class:`World`: ``world.fail[method]`` is a list of actions
consumed one per call — an exception instance to raise before the call takes effect,
``"lose"`` (it takes effect, the answer is lost), ``"late"`` (for ``fence``: it takes
effect only when :meth:`World.land_late` runs), ``"hang"`` (a generation's call never
answers: it ends at its timeout, RequestTimedOut at once) — and ``world.start_fault`` makes the
next generation start ``"timeout"`` or ``"crash"``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.ed25519 import PrivateKey
from protocol.errors import (
    BackendStartTimeout,
    HandoffFailed,
    NotFound,
    RequestTimedOut,
    StaleEpoch,
    TransportLost,
)
from protocol.grant import SignedGrant
from protocol.handover import (
    OWNER_CONTRACTS,
    pack_checkpoint,
    read_handoff,
    write_checkpoint,
)
from protocol.identity import Identity

from .backendproc import EXITED
from .coordinator import Coordinator
from .paths import GuardianPaths
from .release import Release
from .state import StateStore

__all__ = ["FakeBackend", "FakeCoordinator", "World", "run_on"]

_pids = itertools.count(40_000)


@dataclass
class FakeBackend:
    """A backend generation as the coordinator sees one (duck-types BackendProcess)."""

    world: World
    activation: str
    release: str
    pid: int = field(default_factory=lambda: next(_pids))
    epoch: int = 0
    ready: bool = False
    draining: bool = False
    expected_exit: bool = False
    returncode: int | None = None
    report: dict[str, Any] | None = None   # no preflight report: a preflight runs
    started_s: float = 0.0
    up_since: float | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    def alive(self) -> bool:
        return not self.exited.is_set()

    def die(self, code: int = -9) -> None:
        if self.alive():
            self.returncode = code
            self.exited.set()
        if self.world.api is self:
            self.world.api = None

    async def stop(self, term_after: float = 0.0, kill_after: float = 10.0) -> None:
        self.expected_exit = True
        self.die()

    def ended_why(self, what: str = "") -> tuple[str, dict[str, Any]]:
        status = "" if self.returncode is None else f" (exit status {self.returncode})"
        return f"{what or EXITED}{status}", {"pid": self.pid, "exit_status": self.returncode,
                                              "log": None}

    async def activate(self, activation: str, timeout: float = 30.0) -> None:
        self.activation = activation
        await self.world.start(self)

    def to_wire(self) -> dict[str, Any]:
        return {"activation": self.activation, "pid": self.pid, "start_ticks": 1,
                "alive": self.alive(), "returncode": self.returncode}


@dataclass
class World:
    """The owner, the generations and the faults of one fake installation."""

    home: Path
    identity: Identity = field(default_factory=lambda: Identity("owner-1", 100, 7, "boot-1"))
    epoch: int = 0
    grant: dict[str, Any] | None = None
    inventory: list[dict[str, Any]] = field(default_factory=list)
    api: FakeBackend | None = None
    generations: list[FakeBackend] = field(default_factory=list)
    fail: dict[str, list[Any]] = field(default_factory=dict)
    start_fault: str | None = None
    late: list[dict[str, Any]] = field(default_factory=list)
    certificate: dict[str, Any] = field(default_factory=lambda: {"valid": False,
                                                                  "body": None})
    calls: list[str] = field(default_factory=list)

    def _fault(self, method: str) -> Any:
        actions = self.fail.get(method)
        return actions.pop(0) if actions else None

    # -- the owner ----------------------------------------------------------------------

    def owner_call(self, method: str, params: dict[str, Any]) -> Any:
        self.calls.append(f"owner.{method}")
        fault = self._fault(method)
        if isinstance(fault, BaseException):
            raise fault
        if method == "fence" and fault == "late":
            self.late.append(params["grant"])
            raise TransportLost("test: the fence frame is still on its way")
        answer = self._owner_answer(method, params)
        if fault == "lose":
            raise TransportLost(f"test: the answer to {method} was lost")
        return answer

    def _owner_answer(self, method: str, params: dict[str, Any]) -> Any:
        if method == "status":
            return {"owner": self.identity.to_wire(), "epoch": self.epoch, "grant": self.grant,
                    "capabilities": dict(OWNER_CONTRACTS)}
        if method == "fence":
            return self._fence(params["grant"])
        if method == "inventory":
            return {"launches": list(self.inventory)}
        if method == "guardian.pin":
            return {"pinned": False}
        raise NotFound(f"fake owner has no method {method}")

    def _fence(self, wire: dict[str, Any]) -> dict[str, Any]:
        grant = SignedGrant.from_wire(wire).grant
        if grant.epoch <= self.epoch:
            raise StaleEpoch(f"epoch {grant.epoch} is not newer than {self.epoch}",
                             {"current": self.epoch})
        self.epoch = grant.epoch
        self.grant = {"epoch": grant.epoch, "activation": grant.activation}
        return {"epoch": self.epoch}

    def land_late(self) -> None:
        """Deliver fence frames that were still on their way."""
        for wire in self.late:
            try:
                self._fence(wire)
            except StaleEpoch:
                pass
        self.late.clear()

    # -- generations --------------------------------------------------------------------

    def spawn(self, release: str, activation: str = "") -> FakeBackend:
        bp = FakeBackend(self, activation, release)
        self.generations.append(bp)
        return bp

    async def start(self, bp: FakeBackend) -> None:
        """What a generation does before READY: read its handoff record, check the
        owner's epoch, open the API."""
        fault, self.start_fault = self.start_fault, None
        if fault == "timeout":
            bp.die()
            raise BackendStartTimeout("test: the generation hung before READY")
        if fault == "crash":
            bp.die(1)
            raise HandoffFailed(EXITED)
        record = read_handoff(GuardianPaths(self.home).handoff_file(bp.activation))
        if record["epoch"] != self.epoch:
            bp.die(1)
            raise StaleEpoch(f"owner epoch is {self.epoch}", {"current": self.epoch})
        bp.epoch, bp.ready = record["epoch"], True
        self.api = bp

    def alive(self) -> list[FakeBackend]:
        return [g for g in self.generations if g.alive() and g.ready]

    def api_call(self, method: str, params: dict[str, Any]) -> Any:
        self.calls.append(method)
        fault = self._fault(method)
        if isinstance(fault, BaseException):
            raise fault
        if fault == "hang":
            raise RequestTimedOut(f"test: {method} did not answer")
        bp = self.api
        if bp is None:
            raise TransportLost("test: nothing answers on api.sock")
        answer = self._api_answer(bp, method, params)
        if fault == "lose":
            raise TransportLost(f"test: the answer to {method} was lost")
        return answer

    def _api_answer(self, bp: FakeBackend, method: str, params: dict[str, Any]) -> Any:
        if method == "generation.status":
            inv = list(self.inventory)
            return {"activation": bp.activation, "epoch": bp.epoch, "ready": bp.ready,
                    "draining": bp.draining, "owner": self.identity.to_wire(),
                    "identity": {"pid": bp.pid, "start_ticks": 1}, "release": bp.release,
                    "config_revision": "rev-1", "inventory": inv,
                    "adoption": {"adopted": inv, "missing": []}}
        if method == "generation.drain":
            bp.draining = True
            return {"drained": True, "in_flight": 0}
        if method == "generation.resume":
            bp.draining = False
            return {"resumed": True}
        if method == "generation.checkpoint":
            return self._checkpoint(bp, params["path"])
        if method == "generation.retire":
            bp.die(0)
            return {"retiring": True}
        raise NotFound(f"fake generation has no method {method}")

    def _checkpoint(self, bp: FakeBackend, path: str) -> dict[str, Any]:
        write_checkpoint(path, pack_checkpoint(
            from_activation=bp.activation, owner=self.identity.to_wire(), epoch=bp.epoch,
            cursor=0, config_revision="rev-1", instances=[], inventory=list(self.inventory),
            operations=[], written_at=0.0))
        from .recovery import digest
        return {"path": path, "inventory_digest": digest(self.inventory),
                "launches": len(self.inventory), "cursor": 0}


class FakeCoordinator(Coordinator):
    """The real coordinator over a :class:`World`: only processes and sockets are fake."""

    def __init__(self, home: Path) -> None:
        paths = GuardianPaths(home)
        paths.prepare()
        super().__init__(paths, StateStore(paths.state_db), PrivateKey.generate())
        self.world = World(home)
        self.slept: list[float] = []
        self.owner_timeouts: list[tuple[str, float | None]] = []  # (method, timeout)
        self.control_timeouts: list[tuple[str, float | None]] = []   # the same, api.sock
        self.fault.spec = None

        async def no_sleep(delay: float) -> None:
            self.slept.append(delay)
        self.sleep = no_sleep  # type: ignore[assignment]

    async def connect_owner(self) -> Identity:
        self.owner_identity = self.world.identity
        return self.world.identity

    async def _owner_answer(self, method: str, params: dict[str, Any],
                            timeout: float | None) -> Any:
        self.owner_timeouts.append((method, timeout))
        return self.world.owner_call(method, params)

    async def control(self, method: str, params: dict[str, Any] | None = None,
                      timeout: float | None = None) -> Any:
        self.control_timeouts.append((method, timeout))
        answer = self.world.api_call(method, params or {})
        self.fault.after_reply(method)
        return answer

    def release(self, release_id: str) -> Release:
        return _FakeRelease(release_id)  # type: ignore[return-value]

    async def preflight(self, release: Release, deadline: float | None = None
                        ) -> dict[str, Any]:
        return {"elapsed": 0.0, "exit_status": 0}

    async def standby(self, release_id: str, verified: Any = None, warm: Any = None) -> Any:
        return self.world.spawn(release_id)

    def prewarm(self) -> Any:
        return None   # no interpreter in a fake world

    async def discard(self, warm: Any) -> None:
        return None

    async def live_backend(self) -> dict[str, Any] | None:
        bp = self.world.api
        if bp is None:
            return None
        answer: dict[str, Any] = self.world._api_answer(bp, "generation.status", {})
        return answer

    async def start_generation(self, act: Any, release: Any, standby: Any) -> Any:
        bp: Any = standby if standby is not None and standby.alive() else \
            self.world.spawn(act.release)
        self.candidate = bp
        await bp.activate(act.id)
        return bp

    def certificate(self) -> dict[str, Any]:
        return self.world.certificate

    async def boot_generation(self, release: str) -> FakeBackend:
        """A generation in control as after a completed first start (for handoff tests)."""
        from .cold import start_selected
        self.state.add_release(release)
        self.state.select(release, self.state.selector().revision)
        await start_selected(self)
        assert self.world.api is not None
        return self.world.api


@dataclass
class _FakeRelease:
    id: str
    contracts: dict[str, int] = field(default_factory=lambda: dict(OWNER_CONTRACTS))


def run_on(home: Path, fn: Callable[[FakeCoordinator], Awaitable[Any]]) -> Any:
    """``fn`` run to its end against a fresh :class:`FakeCoordinator` of ``home`` (its
    state.db), which is then closed and its tasks cancelled, whatever ``fn`` did."""
    async def main() -> Any:
        co = FakeCoordinator(home)
        try:
            return await fn(co)
        finally:
            await co.cancel_tasks()
            co.diagnostics.close()   # as the daemon does: no write arranged runs after
            co.state.close()
    return asyncio.run(main())
