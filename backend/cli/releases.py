"""``tenure release seal|install|list|verify|select``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.errors import BadRequest

from .exits import Exit

__all__ = ["release_command"]


def release_command(args: Any, guardian: Any, out: Any) -> int:
    if args.action == "seal":
        if not args.arg:
            raise BadRequest("tenure release seal OUT_DIR")
        from guardian.seal import seal
        rel = seal(Path(args.arg).absolute(), signing_key=_signing_key(args.sign_key))
        out(args, {"release": rel.id, "path": str(rel.path)},
            f"sealed release {rel.id}\n  at {rel.path}\n"
            f"install with: tenure release install {rel.path}")
        return Exit.OK
    with guardian(args) as g:
        if args.action == "install":
            if not args.arg:
                raise BadRequest("tenure release install SEALED_DIR")
            r = g.call("release.install", {"path": str(Path(args.arg).absolute())})
            text = f"installed {r['release']}"
        elif args.action == "list":
            r = g.call("release.list")
            text = "\n".join(f"{x['release']}  {x['status']}"
                             f"{'  current' if x['current'] else ''}"
                             f"{'  previous' if x['previous'] else ''}"
                             for x in r["releases"]) or "no releases"
        elif args.action == "verify":
            r = g.call("release.verify", {"release": _release_id(args.arg)})
            text = f"{r['release']}: ok ({r['files']} files)"
        else:
            r = g.call("release.select", {"release": _release_id(args.arg)})
            text = f"selected {r['selected']}"
    out(args, r, text)
    return Exit.OK


def _release_id(arg: str | None) -> str:
    if not arg:
        raise BadRequest("give a release id (see `tenure release list`)")
    return arg


def _signing_key(path: Path | None) -> Any:
    """The Ed25519 private key in ``path`` (PEM), or None. Raises BadRequest."""
    if path is None:
        return None
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise BadRequest(f"{path}: not a readable PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadRequest(f"{path}: not an Ed25519 key")
    return key
