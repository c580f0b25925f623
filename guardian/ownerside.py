"""The guardian's side of the owner link: connecting and pinning its key, calls whose
answers count as a word from the owner, the owner's status asked before an activation
changes anything, and fencing: a grant recorded in state.db before the owner is asked to
hold it, and proof that it holds one whose answer was lost.

A part of guardian.coordinator.Coordinator (which inherits it), kept apart because the
owner link is one concern: the flows call these as the coordinator's methods.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from protocol.aclient import AsyncClient
from protocol.ed25519 import PrivateKey
from protocol.errors import ConnectFailed, RequestTimedOut, TenureError, TransportLost
from protocol.grant import Grant, public_key_text
from protocol.handover import OWNER_CONTRACTS
from protocol.identity import Identity
from protocol.link import Link, LinkEvent
from protocol.procfs import silence

from .faults import Fault
from .paths import GuardianPaths
from .state import Activation, StateStore

__all__ = ["OWNER_CHECK_S", "OwnerSide"]

log = logging.getLogger("tenure.guardian")

OWNER_CHECK_S = 5.0  # the owner's first answer in an activation, before anything changes


class OwnerSide:
    """The owner link's methods of the coordinator (its attributes are set there)."""

    paths: GuardianPaths
    state: StateStore
    key: PrivateKey
    fault: Fault
    deadline: float
    owner: AsyncClient | None
    owner_identity: Identity | None
    owner_link: Link

    async def connect_owner(self) -> Identity:
        """Connect (pinning the owner instance), pin our key. Raises TenureError."""
        if self.owner is None:
            # allow_group: in system scope owner.sock is root:<service account> 0660
            self.owner = AsyncClient(self.paths.owner_sock, want=OWNER_CONTRACTS,
                                     name="guardian", timeout=60.0, allow_group=True)
        welcome = await self.owner.connect()
        self.owner_identity = welcome.identity
        self.owner_link.handle(LinkEvent.SEEN, time.time())
        await self.owner.call("guardian.pin",
                              {"public_key": public_key_text(self.key.public_key())})
        return welcome.identity

    async def owner_call(self, method: str, params: dict[str, Any] | None = None,
                         timeout: float | None = None) -> Any:
        """The owner's answer to ``method``; any answer is a word from the owner (the
        link's ``seen``), also while the owner watch is not running yet: a guardian
        retrying its first recovery said the owner silent though it answered every
        fence. Raises what the call raises."""
        answer = await self._owner_answer(method, params or {}, timeout)
        self.owner_link.handle(LinkEvent.SEEN, time.time())
        self.fault.after_reply(method)
        return answer

    async def _owner_answer(self, method: str, params: dict[str, Any],
                            timeout: float | None) -> Any:
        assert self.owner is not None
        return await self.owner.call(method, params, timeout=timeout)

    async def owner_status(self) -> dict[str, Any]:
        """The owner's ``status``, asked before an activation changes anything. An owner
        that does not answer within OWNER_CHECK_S (stopped, stuck on storage) ends the
        activation there, rather than at the owner connection's 60 s: RequestTimedOut
        (or ConnectFailed, when the connection had to be made again and the handshake got
        no answer) saying what /proc shows of its process."""
        wait = min(OWNER_CHECK_S, self.deadline)
        try:
            try:
                status: dict[str, Any] = await self.owner_call("status", timeout=wait)
            except TransportLost:   # a connection that broke meanwhile (the owner watch
                # gave up on a silent owner): asked once more, on a new one
                status = await self.owner_call("status", timeout=wait)
        except (RequestTimedOut, ConnectFailed, TransportLost) as exc:
            pid = self.owner_identity.pid if self.owner_identity is not None else None
            why = silence(pid) if pid is not None else "its pid is unknown"
            raise type(exc)(f"the owner did not answer within {wait:g} s: {why}. Nothing "
                            "was changed", {**exc.data, "owner_pid": pid}) from exc
        return status

    async def fence(self, act: Activation, owner_epoch: int | None = None) -> int:
        """Grant row first, then the owner; returns the new epoch. ``owner_epoch``: the
        owner's epoch as its ``status`` said since the activation began (else asked now).
        Only this guardian fences, one flow at a time, so it cannot have moved; if it
        had, the owner refuses an epoch that is not newer than its own and the fence
        fails."""
        ident = self.owner_identity
        assert ident is not None
        if owner_epoch is None:
            owner_epoch = int((await self.owner_call("status"))["epoch"])
        epoch = max(self.state.last_epoch(), owner_epoch) + 1
        grant = Grant(epoch, act.id, act.release, ident.instance, time.time())
        signed = grant.sign(self.key)
        self.state.record_grant(grant, signed.sig)
        await self.owner_call("fence", {"grant": signed.to_wire()})
        return epoch

    async def fence_proven(self, act: Activation, owner_epoch: int | None = None) -> int:
        """:meth:`fence`; when it fails (the answer may be lost after the owner accepted)
        the activation counts as fenced only if the owner provably holds the grant
        recorded for *this* activation. Raises what the fence raised otherwise."""
        try:
            return await self.fence(act, owner_epoch)
        except Exception:
            epoch = await self.proven_grant(act.id)
            if epoch is None:
                raise
            log.warning("the fence answer was lost; the owner holds activation %s's grant "
                        "(epoch %d)", act.id, epoch)
            return epoch

    async def proven_grant(self, activation: str) -> int | None:
        """The epoch of ``activation``'s recorded grant if the owner holds exactly that
        grant now, else None (also when the owner cannot be asked)."""
        granted = self.state.grant_for(activation)
        if granted is None:
            return None
        try:
            st = await self.owner_call("status")
        except TenureError:
            return None
        held = st.get("grant") or {}
        if st.get("epoch") == granted and held.get("activation") == activation:
            return granted
        return None
