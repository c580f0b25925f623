"""The owner's held sockets, as the owner holds and closes them: a unix socket's file
goes with the socket, and only when it is still that socket's file."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from owner.sockets import HeldSocket, SocketDecl, SocketHolder
from protocol.errors import SocketUnavailable


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


def _moded(path: Path, mode: int) -> SocketDecl:
    return SocketDecl.from_wire({"name": "web", "listen": f"unix:{path}", "mode": mode})


def test_a_mode_change_never_follows_a_symlink_put_at_the_path(tmp_path: Path) -> None:
    """Was: the held socket's file replaced by a symlink (its directory may be the app
    user's), a change of mode chmodded the symlink's target: an app user could make
    the root owner open any file to everyone. The change is refused, the target kept."""
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    held = holder.ensure("s", "a", _moded(path, 0o600))
    try:
        os.unlink(path)
        os.symlink(victim, path)
        with pytest.raises(SocketUnavailable, match="no longer the socket the owner "
                                                    "bound"):
            holder.ensure("s", "a", _moded(path, 0o666))
        assert victim.stat().st_mode & 0o777 == 0o600
        assert held.decl.mode == 0o600   # nothing taken for applied
    finally:
        holder.close_all()


def test_a_mode_change_of_a_socket_file_put_in_its_place_is_refused(tmp_path: Path
                                                                    ) -> None:
    """Another socket at the path is not the one held: left as it is."""
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    holder.ensure("s", "a", _moded(path, 0o600))
    other = socket.socket(socket.AF_UNIX)
    try:
        os.unlink(path)
        other.bind(str(path))
        os.chmod(path, 0o600)
        with pytest.raises(SocketUnavailable):
            holder.ensure("s", "a", _moded(path, 0o660))
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        other.close()
        holder.close_all()


Held = tuple[Path, SocketHolder, HeldSocket]


@pytest.fixture
def held600(tmp_path: Path) -> Iterator[Held]:
    """A unix socket held with mode 0600: its path, the holder and the held socket."""
    path = tmp_path / "a.sock"
    holder = SocketHolder()
    try:
        yield path, holder, holder.ensure("s", "a", _moded(path, 0o600))
    finally:
        holder.close_all()


def test_a_mode_change_applies_to_the_held_socket_in_place(held600: Held) -> None:
    path, holder, held = held600
    assert path.stat().st_mode & 0o777 == 0o600
    again = holder.ensure("s", "a", _moded(path, 0o660))
    assert again is held and path.stat().st_mode & 0o777 == 0o660


def test_update_retunes_a_held_socket_and_leaves_an_unheld_one_to_its_launch(
        held600: Held, tmp_path: Path) -> None:
    path, holder, held = held600
    client = socket.socket(socket.AF_UNIX)
    try:
        client.connect(str(path))   # queued on the socket: the update keeps it
        wanted = SocketDecl.from_wire({"name": "web", "listen": f"unix:{path}",
                                       "mode": 0o660, "backlog": 7})
        assert holder.update("s", "a", wanted)
        assert holder.held[held.key] is held and held.decl == wanted
        assert path.stat().st_mode & 0o777 == 0o660
        assert os.stat(path).st_ino == held.path_inode
        conn, _ = held.sock.accept()   # the connection made before is still there
        conn.close()
        assert [(h["backlog"], h["mode"]) for h in holder.to_wire()] == [(7, 0o660)]
        other = SocketDecl.from_wire({"name": "web", "listen": f"unix:{tmp_path}/b.sock"})
        assert not holder.update("s", "a", other)
        assert not (tmp_path / "b.sock").exists() and list(holder.held) == [held.key]
    finally:
        client.close()


def test_an_update_that_fails_keeps_what_the_socket_had(held600: Held) -> None:
    path, holder, held = held600
    bad = SocketDecl.from_wire({"name": "web", "listen": f"unix:{path}", "mode": 0o660,
                                "user": "no-such-user-of-tenure", "backlog": 9})
    with pytest.raises(SocketUnavailable, match="no-such-user-of-tenure"):
        holder.update("s", "a", bad)
    assert held.decl.mode == 0o600 and held.decl.backlog != 9
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_update_never_goes_through_a_directory_made_a_symlink(tmp_path: Path) -> None:
    """The socket's directory may be the app user's: swapped for a symlink to another
    directory that holds a socket, a change of mode must not reach through it (only the
    last component was opened without following a symlink)."""
    sub, other = tmp_path / "sub", tmp_path / "other"
    sub.mkdir()
    other.mkdir()
    holder = SocketHolder()
    held = holder.ensure("s", "a", _moded(sub / "a.sock", 0o600))
    victim = socket.socket(socket.AF_UNIX)
    try:
        victim.bind(str(other / "a.sock"))
        os.chmod(other / "a.sock", 0o600)
        os.rename(sub, tmp_path / "moved")
        os.symlink(other, sub)
        for path_inode in (held.path_inode, None):   # None: its file was gone at bind
            held.path_inode = path_inode
            with pytest.raises(SocketUnavailable):
                holder.update("s", "a", _moded(sub / "a.sock", 0o666))
            assert (other / "a.sock").stat().st_mode & 0o777 == 0o600
            assert held.decl.mode == 0o600
    finally:
        victim.close()
        holder.close_all()


def test_a_refused_change_of_owner_leaves_the_mode_as_it_was(
        held600: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode is narrowed before the owner changes; was: a chown refused (an owner
    that is not root, a group it is not in) left the narrowed mode behind, while the
    owner's record kept the old one (so reverting the config changed nothing)."""
    path, holder, held = held600
    holder.update("s", "a", _moded(path, 0o660))

    def refused(*a: object, **k: object) -> None:
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "chown", refused)
    wanted = SocketDecl.from_wire({"name": "web", "listen": f"unix:{path}", "mode": 0o600,
                                   "group": "root"})
    with pytest.raises(SocketUnavailable, match="not permitted"):
        holder.update("s", "a", wanted)
    assert path.stat().st_mode & 0o777 == 0o660 and held.decl.mode == 0o660
