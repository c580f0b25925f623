"""The owner's held sockets, as the owner holds and closes them: a unix socket's file
goes with the socket, and only when it is still that socket's file."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from owner.sockets import SocketDecl, SocketHolder


def _decl(path: Path) -> SocketDecl:
    return SocketDecl.from_wire({"name": "web", "listen": f"unix:{path}"})


def test_closing_a_unix_socket_removes_its_file(tmp_path: Path) -> None:
    """Was: the file stayed (its inode was compared with the socket's own, in sockfs,
    which a file never has), so a moved or removed socket left its path behind."""
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    held = holder.ensure("s", "a", _decl(path))
    assert path.is_socket()
    assert holder.close(held.key)
    assert not path.exists()


def test_a_file_made_at_the_path_since_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    held = holder.ensure("s", "a", _decl(path))
    os.unlink(path)
    other = socket.socket(socket.AF_UNIX)   # someone else's socket at the path now
    try:
        other.bind(str(path))
        assert holder.close(held.key)
        assert path.is_socket()
    finally:
        other.close()
