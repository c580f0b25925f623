"""The guardian's Ed25519 signing key: created on first run, 0600, never printed."""

from __future__ import annotations

import os

from protocol.durable import atomic_write, read_private
from protocol.ed25519 import PrivateKey
from protocol.errors import StateCorrupt

__all__ = ["DAMAGED", "load_or_create_key"]

DAMAGED = ("a damaged key cannot be replaced under the running owner, which pinned its "
           "public half: `tenure down` (the apps stop), remove runtime/guardian.key and "
           "execution/guardian.pub, then `tenure up` (docs/state.md, "
           "\"runtime/guardian.key\")")
"""The way out a refusal of the key ends with."""


def load_or_create_key(path: str) -> PrivateKey:
    """The key at ``path``, created (0600, atomically) when absent.

    Raises StateCorrupt for a file that is not an Ed25519 private key (never replaced),
    UnsafePath for a symlink or a file others can write.
    """
    try:
        raw = read_private(path, max_size=4096)
    except FileNotFoundError:
        key = PrivateKey.generate()
        atomic_write(path, key.to_pem())
        return key
    if os.stat(path).st_mode & 0o077:
        raise StateCorrupt(f"{path} is readable by others; refusing to use it",
                           {"path": path})
    try:
        return PrivateKey.from_pem(raw)
    except ValueError as e:
        raise StateCorrupt(f"{path} is not a key this guardian can read ({e}); {DAMAGED}",
                           {"path": path}) from None

