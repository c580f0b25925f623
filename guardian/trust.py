"""What decides whether a release may run here: the operator's trusted release keys
(``runtime/trusted-release-keys``) and the interpreter updates bound by `tenure release
rebind` (``runtime/interpreters.json``). Every verification and every install goes
through :func:`verified_release` or :func:`install_trusted`, in the guardian and in the
command line alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.durable import read_private
from protocol.errors import StateCorrupt, TenureError

from .interp import load_bindings
from .paths import GuardianPaths
from .release import Release, install, verify

__all__ = ["install_trusted", "trusted_release_keys", "verified_release", "verified_tree"]


def trusted_release_keys(path: str) -> list[Any] | None:
    """The public keys in ``path`` (one ``ed25519:<base64>`` per line), or None when the
    file is absent (signing not required). Raises StateCorrupt for an unreadable file
    (never ignored), UnsafePath."""
    from protocol.grant import load_public_key
    try:
        text = read_private(path, max_size=65536).decode()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise StateCorrupt(f"{path}: not text (one ed25519:<base64> key per line)",
                           {"path": path}) from None
    try:
        return [load_public_key(line) for line in text.splitlines()
                if line.strip() and not line.startswith("#")]
    except TenureError as exc:
        raise StateCorrupt(f"{path}: {exc.msg}") from None


def verified_release(paths: GuardianPaths, release_id: str,
                     seen: dict[str, bytes] | None = None) -> Release:
    """The installed release, verified now: a missing or modified release is an error
    (and with trusted release keys configured, an unsigned or badly signed one).
    ``seen``: see :func:`guardian.release.verify`."""
    return verified_tree(paths, paths.releases / release_id, release_id, seen)


def verified_tree(paths: GuardianPaths, root: Path, release_id: str,
                  seen: dict[str, bytes] | None = None) -> Release:
    """The copy of release ``release_id`` at ``root`` (the guardian's, or one staged for
    the owner), verified now under the same trust as :func:`verified_release`: the
    trusted release keys and the interpreter bindings of ``paths``. Raises what
    :func:`guardian.release.verify` raises, and StateCorrupt or UnsafePath for a key or
    bindings file that cannot be read."""
    return verify(root, release_id,
                  trusted_keys=trusted_release_keys(paths.trusted_keys),
                  bindings=load_bindings(paths.interpreters), seen=seen)


def install_trusted(paths: GuardianPaths, src: Path, into: Path | None = None) -> Release:
    """Install the sealed release ``src`` into ``into`` (default: the guardian's
    releases) under the same trust as :func:`verified_release`. Raises what
    :func:`guardian.release.install` raises."""
    return install(src, paths.releases if into is None else into,
                   trusted_keys=trusted_release_keys(paths.trusted_keys),
                   bindings=load_bindings(paths.interpreters))
