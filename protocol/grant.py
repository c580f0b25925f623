"""Grants: the guardian's signed statement that one epoch belongs to one activation.

A grant is ``{epoch, activation, release, owner_instance, issued_at}`` signed with the
guardian's Ed25519 key over a canonical msgpack encoding. The owner verifies it against
the public key it pinned, so nobody without the guardian's private key can move the epoch.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from .ed25519 import PrivateKey, PublicKey
from .errors import BadRequest, BadSignature
from .framing import pack
from .schema import Field, Schema, check_int

__all__ = ["Grant", "SignedGrant", "load_public_key", "public_key_text"]

GRANT_FORMAT = 1

_SCHEMA = Schema(
    Field("format", int),
    Field("epoch", int, check=check_int(1, 2**62)),
    Field("activation", str),
    Field("release", str),
    Field("owner_instance", str),
    Field("issued_at", float),
)
_SIGNED = Schema(Field("grant", dict), Field("sig", bytes))


@dataclass(frozen=True)
class Grant:
    epoch: int
    activation: str
    release: str
    owner_instance: str
    issued_at: float

    def to_wire(self) -> dict[str, Any]:
        return {"format": GRANT_FORMAT, "epoch": self.epoch, "activation": self.activation,
                "release": self.release, "owner_instance": self.owner_instance,
                "issued_at": self.issued_at}

    def canonical(self) -> bytes:
        """The exact bytes that are signed (msgpack of the map with sorted keys)."""
        return pack(dict(sorted(self.to_wire().items())))

    @classmethod
    def from_wire(cls, obj: Any) -> Grant:
        """Raises BadRequest for a missing or mistyped field or another format."""
        d = _SCHEMA.validate(obj, "grant")
        if d.pop("format") != GRANT_FORMAT:
            raise BadRequest(f"grant format must be {GRANT_FORMAT}")
        return cls(**d)

    def sign(self, key: PrivateKey) -> SignedGrant:
        return SignedGrant(self, key.sign(self.canonical()))


@dataclass(frozen=True)
class SignedGrant:
    grant: Grant
    sig: bytes

    def to_wire(self) -> dict[str, Any]:
        return {"grant": self.grant.to_wire(), "sig": self.sig}

    @classmethod
    def from_wire(cls, obj: Any) -> SignedGrant:
        d = _SIGNED.validate(obj, "signed_grant")
        return cls(Grant.from_wire(d["grant"]), d["sig"])

    def verify(self, key: PublicKey) -> Grant:
        """The grant, when the signature verifies. Raises BadSignature otherwise."""
        if not key.verify(self.sig, self.grant.canonical()):
            raise BadSignature("grant signature does not verify against the pinned "
                               "guardian key")
        return self.grant


def public_key_text(key: PublicKey) -> str:
    """The pinned form of a public key: ``ed25519:<base64 raw bytes>``."""
    return "ed25519:" + base64.b64encode(key.raw).decode()


def load_public_key(text: str) -> PublicKey:
    """Parse :func:`public_key_text` output. Raises BadRequest."""
    prefix, _, body = text.strip().partition(":")
    try:
        if prefix != "ed25519":
            raise ValueError("not ed25519")
        return PublicKey(base64.b64decode(body, validate=True))
    except ValueError as exc:
        raise BadRequest(f"not an ed25519 public key: {exc}") from None
