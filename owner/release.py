"""The release the owner runs from: ``execution/owner-release.json`` names it; an owner
started from the installed code verifies the release's tree and replaces itself with it
(exec) before it touches anything. The tree is the guardian's installed copy
(``runtime/releases/<id>``) when that belongs to the owner's own uid, else a copy staged
for the owner in ``execution/releases/<id>`` by `tenure owner upgrade` (an owner running
as root never runs code another account could change).

A release that no longer verifies (a changed interpreter, a damaged copy) is reported,
never fatal: the owner then runs the installed code and says so in its status, because
an owner that does not start strands every application's supervision. An unreadable
record is fatal (exit 2): it is the owner's own state.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import NotFound, StateCorrupt, TenureError
from protocol.layout import Layout, is_release_id, release_of

if TYPE_CHECKING:
    from guardian.release import Release

__all__ = ["KIND", "OwnerRelease", "direct_command", "follow", "load", "running", "save",
           "serve_args", "tree", "verified"]

log = logging.getLogger("tenure.owner")

KIND = "tenure-owner-release"


@dataclass(frozen=True)
class OwnerRelease:
    release: str | None = None     # None: the installed code
    previous: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"kind": KIND, "format": 1, "release": self.release,
                "previous": self.previous}


def _rid(obj: dict[str, Any], key: str, where: str) -> str | None:
    v = obj.get(key)
    if v is not None and not is_release_id(v):
        raise StateCorrupt(f"{where}: {key} is not a release id", {"field": key})
    return v


def load(path: str, *, denied: bool = False) -> OwnerRelease:
    """The record (absent: the installed code). Raises StateCorrupt, UnsafePath; with
    ``denied``, PermissionError when this account may not read it (another account's
    owner: :func:`protocol.durable.read_private`)."""
    try:
        obj = read_json(path, KIND, denied=denied)
    except FileNotFoundError:
        return OwnerRelease()
    return OwnerRelease(_rid(obj, "release", path), _rid(obj, "previous", path))


def save(path: str, rec: OwnerRelease) -> None:
    atomic_write_json(path, rec.to_wire())


def running(layout: Layout) -> str | None:
    """The release this owner's code was loaded from, or None."""
    return release_of(__file__, layout.owner_releases) or \
        release_of(__file__, layout.releases)


def tree(layout: Layout, rid: str, uid: int | None = None) -> Path:
    """Where the owner (running as ``uid``, default this process's) runs release ``rid``
    from: its staged copy, or the guardian's when every directory down to it is ``uid``'s
    own. Raises NotFound."""
    staged = layout.owner_releases / rid
    if staged.is_dir():
        return staged
    shared = layout.releases / rid
    uid = os.geteuid() if uid is None else uid
    try:
        owned = all(stat.S_ISDIR(st.st_mode) and st.st_uid == uid
                    for st in map(os.lstat, (layout.runtime, shared.parent, shared)))
    except OSError:
        owned = False
    if not owned:
        raise NotFound(f"release {rid} is not staged for the owner ({staged})",
                       {"release": rid, "path": str(staged)})
    return shared


def serve_args(home: str, log_level: str, service_account: str | None = None) -> list[str]:
    """What ``python -m owner`` is given to serve ``home``: by the installed code when it
    execs into the release (:func:`follow`) and by `tenure up` (:func:`direct_command`)."""
    return ["serve", "--home", home, "--log-level", log_level,
            *([] if service_account is None else ["--service-account", service_account])]


def verified(layout: Layout, rid: str, seen: dict[str, bytes] | None = None,
             uid: int | None = None) -> Release:
    """Release ``rid`` from the owner's tree for it (:func:`tree`; the owner runs as
    ``uid``, default this process's), verified now as the guardian verifies its own
    releases (guardian.trust): every file against its RUNTIME.json, with the operator's
    trusted release keys and interpreter bindings (`tenure release rebind`). Raises what
    :func:`guardian.release.verify` raises, NotFound, and StateCorrupt or UnsafePath for
    a key or bindings file that cannot be read."""
    from guardian.paths import GuardianPaths
    from guardian.trust import verified_tree
    return verified_tree(GuardianPaths(layout.home), tree(layout, rid, uid), rid, seen)


def direct_command(layout: Layout, log_level: str,
                   seen: dict[str, bytes] | None = None) -> list[str] | None:
    """``python -m owner serve`` run straight from the recorded release, verified now as
    :func:`follow` verifies it: for a caller that would otherwise start the installed
    code only for it to exec into that release (`tenure up`). None when the installed
    code is what runs. Raises what the verification raises (the caller then starts the
    installed code, which verifies again and reports why). ``seen``: see
    :func:`guardian.release.verify`."""
    rec = load(layout.owner_release)
    if rec.release is None:
        return None
    from guardian.release import command
    return command(verified(layout, rec.release, seen),
                   *serve_args(str(layout.home), log_level), module="owner")


def follow(layout: Layout, args: list[str]) -> TenureError | None:
    """Exec into the recorded release unless this code is it: ``python -m owner *args``
    from the staged copy, verified now. Returns None when there is nothing to follow,
    else the reason it could not (the caller runs the installed code). Raises
    StateCorrupt for an unreadable record."""
    rec = load(layout.owner_release)
    if rec.release is None or rec.release == running(layout):
        return None
    try:
        from guardian.release import exec_release
        rel = verified(layout, rec.release)
        log.info("the owner continues from release %s", rec.release)
        failed = exec_release(rel, *args, module="owner")
        err: TenureError = StateCorrupt(f"cannot execute the owner of release "
                                        f"{rec.release}: {failed.strerror}",
                                        {"release": rec.release})
    except TenureError as exc:
        err = exc
    log.error("the owner runs the installed code: release %s cannot run: %s",
              rec.release, err)
    return err
