"""A unix socket whose config stops naming an ``owner`` or ``group`` goes back to the
owner's own. Was: no user or group meant "change nothing", so the file stayed the old
user's, who could still connect and chmod it, while the owner recorded (and
``sockets.list`` reported) it as the owner's: the backend saw nothing to change."""

from __future__ import annotations

import grp
import os
import pwd
import sys
from pathlib import Path
from typing import Any

import pytest

from owner.sockets import SocketDecl, SocketHolder


def _root_with_nobody() -> tuple[int, int]:
    """uid of nobody and gid of nogroup; skips (saying why) unless root can chown to them."""
    why = None
    if os.geteuid() != 0:
        why = "giving a socket file to another user needs root"
    else:
        try:
            return pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
        except KeyError:
            why = "no user nobody or group nogroup on this host"
    print(f"skipped: {why}", file=sys.stderr)
    pytest.skip(why)


def _decl(path: Path, **extra: Any) -> SocketDecl:
    return SocketDecl.from_wire({"name": "a", "listen": f"unix:{path}", "mode": 0o660,
                                 **extra})


def test_dropping_owner_and_group_gives_the_socket_back_to_the_owner(
        tmp_path: Path) -> None:
    nobody, nogroup = _root_with_nobody()
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    try:
        held = holder.ensure("s", "app", _decl(path, user="nobody", group="nogroup"))
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (nobody, nogroup)
        inode = st.st_ino
        assert holder.update("s", "app", _decl(path))
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
        assert st.st_mode & 0o777 == 0o660 and st.st_ino == inode
        assert held.to_wire()["user"] is None and held.to_wire()["group"] is None
    finally:
        holder.close_all()


def test_dropping_only_the_group_keeps_the_user(tmp_path: Path) -> None:
    nobody, nogroup = _root_with_nobody()
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    try:
        holder.ensure("s", "app", _decl(path, user="nobody", group="nogroup"))
        assert holder.update("s", "app", _decl(path, user="nobody"))
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (nobody, os.getegid())
        assert holder.update("s", "app", _decl(path, group="nogroup"))
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (os.geteuid(), nogroup)
    finally:
        holder.close_all()
