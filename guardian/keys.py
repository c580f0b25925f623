"""The guardian's Ed25519 signing key: created on first run, 0600, never printed."""

from __future__ import annotations

import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from protocol.durable import atomic_write, read_private
from protocol.errors import StateCorrupt

__all__ = ["load_or_create_key"]


def load_or_create_key(path: str) -> Ed25519PrivateKey:
    """The key at ``path``, created (0600, atomically) when absent.

    Raises StateCorrupt for a file that is not an Ed25519 private key (never replaced),
    UnsafePath for a symlink or a file others can write.
    """
    try:
        raw = read_private(path, max_size=4096)
    except FileNotFoundError:
        key = Ed25519PrivateKey.generate()
        atomic_write(path, key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                                             NoEncryption()))
        return key
    if os.stat(path).st_mode & 0o077:
        raise StateCorrupt(f"{path} is readable by others; refusing to use it",
                           {"path": path})
    try:
        loaded = load_pem_private_key(raw, password=None)
    except (ValueError, TypeError):
        raise StateCorrupt(f"{path} is not a readable private key", {"path": path}) from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise StateCorrupt(f"{path} is not an Ed25519 key", {"path": path})
    return loaded

