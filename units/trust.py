"""What root may trust when it installs: directories nobody else can change, plan files of
its own, and the installation record the CLI reads.

A system-scope plan is reviewed by the operator and installed by root as units that run
as root. So the plan must live where only root can change it — never in the service
account's home — and install checks that again instead of trusting a path:

- :func:`check_trusted_chain`: every directory from ``/`` down to the plan directory is
  owned by root (or us) and not writable by group or others; a world-writable directory
  is accepted only with the sticky bit and root as its owner (``/tmp``), where nobody
  may rename or remove what another user created.
- :func:`check_plan_files`: the plan directory is ours, 0700, and holds only regular
  files of ours with no group or other permission bits.

The **installation record** (``<plan root>/installation.json``, root 0644) says which
home the system installation serves and as which service account, so that a viewer's
CLI can accept an API socket owned by that account (:func:`service_account_uid`).
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import StateCorrupt, UnsafePath

__all__ = ["RECORD_KIND", "check_plan_files", "check_trusted_chain", "ensure_trusted_dir",
           "read_record", "service_account_uid", "write_record"]

RECORD_KIND = "tenure-installation"


def _trusted(st: os.stat_result) -> bool:
    if st.st_uid not in (0, os.geteuid()):
        return False
    if st.st_mode & 0o002:
        return bool(st.st_mode & stat.S_ISVTX) and st.st_uid == 0
    return not st.st_mode & 0o020


def check_trusted_chain(path: Path) -> None:
    """Raises UnsafePath unless ``path`` and every directory above it is a real
    directory that only root (or we) can change (see the module docstring)."""
    here = Path(os.path.abspath(path))
    for d in [*reversed(here.parents), here]:
        st = os.lstat(d)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{d} is a symlink or not a directory", {"path": str(d)})
        if not _trusted(st):
            raise UnsafePath(f"{d} (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}) "
                             "can be changed by another user: a plan there could be swapped",
                             {"path": str(d), "uid": st.st_uid})


def ensure_trusted_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) 0755 as us, then check the whole chain.
    Raises UnsafePath."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    check_trusted_chain(path)


def check_plan_files(pdir: Path) -> None:
    """Raises UnsafePath unless ``pdir`` is a 0700 directory of ours holding only
    regular 0600-or-stricter files of ours."""
    st = os.lstat(pdir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UnsafePath(f"{pdir} must be a 0700 directory owned by uid {os.geteuid()}",
                         {"path": str(pdir)})
    for entry in os.scandir(pdir):
        fst = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(fst.st_mode) or fst.st_uid != os.geteuid() \
                or fst.st_mode & 0o077:
            raise UnsafePath(f"{entry.path} is not a private regular file of uid "
                             f"{os.geteuid()} (uid {fst.st_uid}, mode "
                             f"{stat.S_IMODE(fst.st_mode):04o})", {"path": entry.path})


def write_record(path: Path, *, scope: str, home: Path, user: str, group: str) -> None:
    """Write the installation record (0644: no secrets; every user's CLI reads it). An
    account that does not exist is recorded without a uid. Raises OSError."""
    try:
        uid: int | None = pwd.getpwnam(user).pw_uid
    except KeyError:
        uid = None
    atomic_write_json(path, {"kind": RECORD_KIND, "format": 1, "scope": scope,
                             "home": str(home), "user": user, "group": group, "uid": uid},
                      0o644)


def read_record(path: Path) -> dict[str, Any] | None:
    """The record, when it is a root-owned file that only root can change in a trusted
    directory; None when there is none. Raises UnsafePath, StateCorrupt."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise UnsafePath(f"{path} must be a regular file of root that only root can change",
                         {"path": str(path)})
    check_trusted_chain(path.parent)
    return read_json(path, RECORD_KIND)


def service_account_uid(path: Path, home: Path) -> int | None:
    """The service account's uid when the record at ``path`` is for ``home``, else
    None (no record, another home, or an unreadable one: the CLI then trusts only root
    and itself, as without a record). Raises nothing."""
    try:
        record = read_record(path)
    except (OSError, UnsafePath, StateCorrupt):
        return None
    if record is None or record.get("home") != str(home):
        return None
    uid = record.get("uid")
    return uid if isinstance(uid, int) and not isinstance(uid, bool) and uid > 0 else None
