"""Listening sockets the owner creates and holds for apps (socket activation).

An app declares named sockets in its launch (``sockets`` in :class:`owner.specs.LaunchSpec`,
wire shape :meth:`SocketDecl.from_wire`). The owner binds each one the first time a launch
asks for it and keeps it, under the key ``stack/app/name@address``, until the backend
closes it explicitly (``sockets.close``) — across every restart of the app and every
backend generation, so a connection arriving while the app restarts waits in the backlog
instead of being refused. Only the owner's own end stays open; the app gets a duplicate as
fd 3.. (:mod:`owner.fdpass`).

Why the address is part of the key: an app whose socket moves to another address restarts
instance by instance, and the instances still running keep the old socket until the
backend closes it once no launch uses it.

The owner keeps its ends blocking and never accepts on them. Unix sockets: the parent
directory must exist and be reached without a symlink; a stale socket file (a connect is
refused) is replaced, anything else at the path is refused. The socket is bound under
umask 0177 and only then given its ``mode`` and owner, so it is never wider than asked.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import logging
import os
import pwd
import socket
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import BadRequest, SocketUnavailable
from protocol.listen import ListenAddress, parse_listen
from protocol.sockets import unix_live

__all__ = ["DEFAULT_BACKLOG", "MAX_SOCKETS", "HeldSocket", "SocketDecl", "SocketHolder",
           "socket_key"]

log = logging.getLogger("tenure.owner")

DEFAULT_BACKLOG = socket.SOMAXCONN
MAX_BACKLOG = 65535
MAX_SOCKETS = 64  # per launch: the fds 3.. an app gets stay few
_KEYS = frozenset({"name", "listen", "backlog", "mode", "user", "group"})


def _fdname(value: object) -> str:
    """A name as LISTEN_FDNAMES carries it: 1-255 printable ASCII, no ':'."""
    if not isinstance(value, str) or not 1 <= len(value) <= 255 or ":" in value \
            or not value.isascii() or not value.isprintable():
        raise BadRequest("socket name must be 1-255 printable ASCII characters without ':'")
    return value


@dataclass(frozen=True)
class SocketDecl:
    """One socket a launch asks for. ``mode``/``user``/``group`` only for unix sockets
    (None: 0666 like systemd's SocketMode, and the owner's user and group)."""

    name: str
    listen: ListenAddress
    backlog: int = DEFAULT_BACKLOG
    mode: int | None = None
    user: str | None = None
    group: str | None = None

    @classmethod
    def from_wire(cls, d: object) -> SocketDecl:
        """Parse ``{name, listen, backlog?, mode?, user?, group?}``. Raises BadRequest
        (and nothing else) for a bad name, address, backlog, mode or owner, or unix-only
        keys on a TCP socket. Unknown keys are ignored."""
        if not isinstance(d, Mapping):
            raise BadRequest(f"a socket must be a map, not {type(d).__name__}")
        extras = [k for k in d if k not in _KEYS]
        if extras:
            log.debug("socket: ignoring unknown keys %r", extras)
        name = _fdname(d.get("name"))
        try:
            listen = parse_listen(d.get("listen"))
        except ValueError as e:
            raise BadRequest(f"socket {name!r}: {e}") from None
        backlog = d.get("backlog", DEFAULT_BACKLOG)
        if isinstance(backlog, bool) or not isinstance(backlog, int) \
                or not 1 <= backlog <= MAX_BACKLOG:
            raise BadRequest(f"socket {name!r}: backlog must be between 1 and {MAX_BACKLOG}")
        mode = d.get("mode")
        if mode is not None and (isinstance(mode, bool) or not isinstance(mode, int)
                                 or not 0 <= mode <= 0o777):
            raise BadRequest(f"socket {name!r}: mode must be between 0 and 0o777")
        owner = {k: d.get(k) for k in ("user", "group")}
        for k, v in owner.items():
            if v is not None and (not isinstance(v, str) or not v or "\0" in v):
                raise BadRequest(f"socket {name!r}: {k} must be a non-empty name")
        if not listen.is_unix and (mode is not None or any(owner.values())):
            raise BadRequest(f"socket {name!r}: mode, user and group are for unix sockets")
        return cls(name, listen, backlog, mode, owner["user"], owner["group"])

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "listen": str(self.listen),
                               "backlog": self.backlog}
        for k in ("mode", "user", "group"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


def socket_key(stack: str, app: str, decl: SocketDecl) -> str:
    """The key the owner holds ``decl`` of ``stack/app`` under."""
    return f"{stack}/{app}/{decl.name}@{decl.listen}"


@dataclass
class HeldSocket:
    key: str
    stack: str
    app: str
    decl: SocketDecl
    sock: socket.socket
    inode: int                      # the socket's own (sockfs), as /proc shows it
    path_inode: int | None = None   # a unix socket's file, removed with it if unchanged

    def fileno(self) -> int:
        return self.sock.fileno()

    def to_wire(self) -> dict[str, Any]:
        """Address, inode and, for TCP, the kernel's accept queue (``queued``: connections
        waiting to be accepted; ``backlog``: the limit the kernel applies)."""
        queued, limit = _tcp_queue(self.sock) if not self.decl.listen.is_unix else (None,
                                                                                   None)
        return {"key": self.key, "stack": self.stack, "app": self.app,
                "name": self.decl.name, "listen": str(self.decl.listen),
                "inode": self.inode, "backlog": self.decl.backlog, "queued": queued,
                "queue_limit": limit, "mode": self.decl.mode, "user": self.decl.user,
                "group": self.decl.group}


# struct tcp_info (linux/tcp.h): eight u8 fields, then u32 rto, ato, snd_mss, rcv_mss,
# unacked, sacked. For a listening socket the kernel reports the accept queue's length in
# tcpi_unacked and its limit in tcpi_sacked (what `ss -l` shows as Recv-Q and Send-Q).
_TCP_INFO = struct.Struct("8B6I")


def _tcp_queue(sock: socket.socket) -> tuple[int | None, int | None]:
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
    except OSError:
        return None, None
    if len(raw) < _TCP_INFO.size:
        return None, None
    fields = _TCP_INFO.unpack(raw)
    return fields[12], fields[13]


def _file_inode(decl: SocketDecl) -> int | None:
    """The inode of the file a unix socket was just bound to (not the socket's own);
    None for TCP, or when it cannot be read (the file is then never removed)."""
    if not decl.listen.is_unix:
        return None
    try:
        return os.lstat(decl.listen.path).st_ino
    except OSError:
        return None


class SocketHolder:
    """The sockets the owner holds, by key. Not thread-safe: the owner's loop only."""

    def __init__(self) -> None:
        self.held: dict[str, HeldSocket] = {}

    def ensure(self, stack: str, app: str, decl: SocketDecl) -> HeldSocket:
        """The held socket for ``decl`` of ``stack/app``, created if needed; a changed
        backlog, mode or owner is applied to the socket already held.

        Raises SocketUnavailable (address in use, permission denied, unsafe path) and
        leaves nothing behind.
        """
        key = socket_key(stack, app, decl)
        held = self.held.get(key)
        if held is None:
            sock = _create(decl)
            held = HeldSocket(key, stack, app, decl, sock, os.fstat(sock.fileno()).st_ino,
                              _file_inode(decl))
            self.held[key] = held
            log.info("holding socket %s (inode %d)", key, held.inode)
            return held
        _retune(held, decl)
        return held

    def update(self, stack: str, app: str, decl: SocketDecl) -> bool:
        """Give the socket held for ``decl`` of ``stack/app`` its backlog, mode and owner
        now, while it stays the same socket (nothing queued on it is lost). Returns False,
        changing nothing, when no such socket is held (a launch creates it as declared)
        or it already has them. Raises SocketUnavailable as :meth:`ensure`."""
        held = self.held.get(socket_key(stack, app, decl))
        return held is not None and _retune(held, decl)

    def close(self, key: str) -> bool:
        """Close the socket held under ``key`` (a unix socket's path is removed when it is
        still this socket). Returns whether one was held. Raises nothing."""
        held = self.held.pop(key, None)
        if held is None:
            return False
        if held.decl.listen.is_unix:
            with contextlib.suppress(OSError):
                st = os.lstat(held.decl.listen.path)
                if stat.S_ISSOCK(st.st_mode) and st.st_ino == held.path_inode:
                    os.unlink(held.decl.listen.path)
        held.sock.close()
        log.info("closed socket %s", key)
        return True

    def close_all(self) -> None:
        for key in list(self.held):
            self.close(key)

    def to_wire(self) -> list[dict[str, Any]]:
        return [h.to_wire() for _, h in sorted(self.held.items())]


def _retune(held: HeldSocket, decl: SocketDecl) -> bool:
    """Apply ``decl``'s backlog, mode and owner to ``held`` (same address) where they
    differ; returns whether they did. Raises SocketUnavailable; the socket keeps what it
    had."""
    if held.decl == decl:
        return False
    if decl.listen.is_unix and held.path_inode is None:   # its file was gone at bind
        raise _unavailable(decl, "the owner cannot tell that the file at the path is the "
                                 "socket it bound; its mode and owner were not changed")
    try:
        held.sock.listen(decl.backlog)
        if decl.listen.is_unix:
            _set_owner(decl, held.path_inode)
    except OSError as e:
        with contextlib.suppress(OSError):
            held.sock.listen(held.decl.backlog)
        raise _unavailable(decl, e) from e
    held.decl = decl
    log.info("socket %s: backlog %d, mode %s, owner %s:%s", held.key, decl.backlog,
             "0666" if decl.mode is None else f"{decl.mode:04o}", decl.user or "-",
             decl.group or "-")
    return True


def _unavailable(decl: SocketDecl, e: OSError | str) -> SocketUnavailable:
    reason = e if isinstance(e, str) else (e.strerror or str(e))
    return SocketUnavailable(f"cannot listen on {decl.listen} (socket {decl.name!r}): "
                             f"{reason}", {"socket": decl.name, "listen": str(decl.listen),
                                           "reason": reason})


def _create(decl: SocketDecl) -> socket.socket:
    addr = decl.listen
    sock = socket.socket(addr.family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        if addr.is_unix:
            _bind_unix(sock, decl)
        else:
            # as systemd: a restart of the owner may rebind while old connections linger
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if addr.family == socket.AF_INET6:
                # [::]:80 means IPv6 only; 0.0.0.0:80 is its own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr.sockaddr)
        sock.listen(decl.backlog)
    except OSError as e:
        sock.close()
        raise _unavailable(decl, e) from e
    except SocketUnavailable:
        sock.close()
        raise
    return sock


def _bind_unix(sock: socket.socket, decl: SocketDecl) -> None:
    """Raises SocketUnavailable or OSError."""
    path = decl.listen.path
    parent = os.path.dirname(path)
    if os.path.realpath(parent) != parent or not os.path.isdir(parent):
        raise _unavailable(decl, f"{parent} must be an existing directory reached "
                                 "without symlinks")
    _remove_stale(decl)
    old = os.umask(0o177)  # never wider than asked, not even for an instant
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    try:
        _set_owner(decl)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _set_owner(decl: SocketDecl, inode: int | None = None) -> None:
    """Mode and owner of a bound unix socket: of the socket file at its path, never of
    what a symlink or another file put there names. The directory may belong to the
    app's user, who can replace the socket file at any moment: the file is opened
    without following a symlink (O_PATH), checked to be a socket (and, with ``inode``,
    the one bound), and changed through that descriptor, so the check and the change
    are of one inode (a chmod of the path followed a symlink: an app's user could have
    the root owner make any file world-writable); no directory on the way is a symlink
    either (:func:`_open_path`). Raises OSError (KeyError as ENOENT; ELOOP or ENOTDIR for
    a path that no longer holds the socket)."""
    path = decl.listen.path
    # No user or group means the owner's own, as sockets.list reports it: given back
    # when a config drops them, not left to the user or group the file had before
    # (who could still connect, and chmod the file).
    try:
        uid = os.geteuid() if decl.user is None else pwd.getpwnam(decl.user).pw_uid
        gid = os.getegid() if decl.group is None else grp.getgrnam(decl.group).gr_gid
    except KeyError as e:
        raise OSError(errno.ENOENT, f"unknown user or group {e.args[0]!r}") from None
    fd = _open_path(path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISSOCK(st.st_mode) or (inode is not None and st.st_ino != inode):
            raise OSError(errno.ELOOP, f"{path} is no longer the socket the owner bound "
                          "(replaced by another file or a symlink); its mode and owner "
                          "were not changed")
        # an O_PATH descriptor takes no fchmod; its /proc link names that very inode
        here = f"/proc/self/fd/{fd}"
        mode, old = 0o666 if decl.mode is None else decl.mode, stat.S_IMODE(st.st_mode)
        # never, not for a moment, the old mode for the new owner: the narrower first
        if old & mode != old:
            os.chmod(here, old & mode)
        try:
            os.chown(here, uid, gid)
        except OSError:
            with contextlib.suppress(OSError):
                os.chmod(here, old)   # refused: the socket keeps what it had
            raise
        os.chmod(here, mode)
    finally:
        os.close(fd)


def _open_path(path: str) -> int:
    """An O_PATH descriptor of ``path`` (absolute), reached without following a symlink
    in any of its components: each directory is opened from the one before it with
    O_NOFOLLOW (a directory the app's user owns may have become a symlink since the
    bind). Raises OSError (ENOTDIR or ELOOP where a symlink is met)."""
    names = path.split("/")[1:]
    if not path.startswith("/") or any(n in ("", ".", "..") for n in names):
        raise OSError(errno.ELOOP, f"{path} is not a plain absolute path")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            step = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=fd)
            os.close(fd)
            fd = step
        return os.open(names[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def _remove_stale(decl: SocketDecl) -> None:
    """A socket file nobody answers on is removed; anything else is refused."""
    path = decl.listen.path
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise _unavailable(decl, f"{path} exists and is not a socket")
    try:
        live = unix_live(path)   # never waits: a busy listener held the owner's loop
    except OSError as e:
        raise _unavailable(decl, e) from e
    if not live:
        os.unlink(path)
        return
    raise _unavailable(decl, f"a live socket answers at {path}")
