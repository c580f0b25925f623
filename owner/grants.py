"""Grants are checked, not trusted by number.

The owner pins the guardian's public key on first use (``guardian.pin``) and from then on
holds it in memory: it is read back at start only from ``execution/guardian.pub``, a
private file the owner itself owns, and never re-read afterwards (a replaced file changes
nothing until an operator restarts the owner deliberately).

Every mutating call must come on a connection that presented the grant currently
fenced: the client puts the signed grant in its ``hello`` (protocol.md, "Grants"), the
owner verifies the signature against the pinned key and the owner instance it names and
binds the connection to it (:meth:`GrantKeeper.bind`). A call is then admitted only if
the connection's grant is the current one — same epoch *and* same activation — and the
request carries that epoch. An epoch number alone, or a grant that was once valid,
authorizes nothing.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from protocol.durable import atomic_write, read_private
from protocol.ed25519 import PublicKey
from protocol.errors import (
    BadRequest,
    Conflict,
    NoGrant,
    OwnerChanged,
    StaleEpoch,
    StateCorrupt,
    Unauthorized,
)
from protocol.grant import Grant, SignedGrant, load_public_key, public_key_text

if TYPE_CHECKING:
    from protocol.server import Call, Connection

__all__ = ["GrantKeeper"]

log = logging.getLogger("tenure.owner")


class GrantKeeper:
    """The pinned key and the grant checks of one owner instance."""

    def __init__(self, pub_path: str, instance: str) -> None:
        self.pub_path = pub_path
        self.instance = instance
        self.key: PublicKey | None = self._load()

    def _load(self) -> PublicKey | None:
        """The key pinned by an earlier owner of this home. Raises UnsafePath when the
        file is not a private regular file of ours, StateCorrupt (naming it) when it does
        not hold a key."""
        try:
            data = read_private(self.pub_path, owners=(os.geteuid(),))
        except FileNotFoundError:
            return None
        try:
            return load_public_key(data.decode())
        except (UnicodeDecodeError, BadRequest) as exc:
            why = "it is not text" if isinstance(exc, UnicodeDecodeError) else exc.msg
            raise StateCorrupt(f"{self.pub_path} does not hold the guardian's public key "
                               f"({why}); put the real one back, or, with the guardian "
                               "stopped, move it away for the next guardian to pin its own",
                               {"path": self.pub_path}) from None

    def pin(self, text: str) -> bool:
        """Trust ``text`` on first use; True when it was pinned now, False when the same
        key was pinned already. Raises BadRequest (not a key), Conflict (another key)."""
        key = load_public_key(text)
        if self.key is None:
            atomic_write(self.pub_path, (public_key_text(key) + "\n").encode())
            self.key = key
            log.info("pinned guardian key")
            return True
        if public_key_text(self.key) != public_key_text(key):
            raise Conflict("another guardian key is pinned; replace guardian.pub only with "
                           "the owner stopped")
        return False

    def verify(self, wire: Any) -> Grant:
        """The grant in ``wire`` (a signed grant), when it verifies against the pinned key
        and names this owner. Raises BadRequest, NoGrant (no key pinned yet),
        BadSignature, OwnerChanged."""
        signed = SignedGrant.from_wire(wire)
        if self.key is None:
            raise NoGrant("no guardian key is pinned; call guardian.pin first")
        grant = signed.verify(self.key)
        if grant.owner_instance != self.instance:
            raise OwnerChanged(f"grant names owner {grant.owner_instance}, this is "
                               f"{self.instance}", {"expected": grant.owner_instance,
                                                    "actual": self.instance})
        return grant

    def bind(self, conn: Connection) -> None:
        """The server's hello hook: bind ``conn`` to the grant its hello presents. Raises
        what :meth:`verify` raises: a bad grant refuses the connection."""
        hello = conn.hello
        if hello is not None and hello.grant is not None:
            conn.grant = self.verify(hello.grant)

    def require(self, call: Call, epoch: int, activation: str | None) -> None:
        """Admit a mutating call only on a connection bound to the current grant
        (``epoch`` and ``activation``) with the request carrying that epoch.

        Raises NoGrant (nothing fenced yet), StaleEpoch (another epoch or another
        activation's grant: ``data.current``), Unauthorized (no grant presented).
        """
        if epoch == 0:
            raise NoGrant("no grant has been fenced yet; the guardian issues epoch 1")
        if call.epoch != epoch:
            raise StaleEpoch(f"request carries epoch {call.epoch}; current is {epoch}",
                             {"current": epoch})
        held: Grant | None = call.conn.grant
        if held is None:
            raise Unauthorized(f"{call.method} needs a connection that presented the "
                               "current grant (hello.grant); an epoch number alone "
                               "authorizes nothing")
        if held.epoch != epoch or activation is None or held.activation != activation:
            raise StaleEpoch(f"this connection holds the grant of epoch {held.epoch} "
                             f"({held.activation}); current is {epoch}",
                             {"current": epoch})

