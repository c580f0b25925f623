"""Safe Unix socket paths: private directories, 0600 sockets, stale-file removal, peers.

Everything here refuses rather than repairs: a directory with the wrong owner or mode, a
symlink anywhere under the state root, or a live socket in the way is an error for the
operator, never something we chmod, follow or unlink.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from collections.abc import Callable
from contextlib import suppress

from .errors import AlreadyRunning, PathTooLong, UnsafePath
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # clients import this module: pathlib (with re) costs them ~10 ms
    from pathlib import Path

__all__ = [
    "MAX_SOCKET_PATH",
    "PeerCred",
    "admin_or_viewer",
    "admins",
    "bind_unix",
    "check_ancestors",
    "check_private_dir",
    "check_private_tree",
    "check_socket_file",
    "check_socket_path",
    "ensure_private_dir",
    "peer_credentials",
    "peer_of",
    "refuse_unsafe_home",
    "same_uid_or_root",
    "share_with_group",
    "symlink_refused",
    "unix_live",
    "unshare",
]

MAX_SOCKET_PATH = 100
_UCRED = struct.Struct("3i")


class PeerCred(Value):
    __slots__ = ("gid", "pid", "uid")

    def __init__(self, pid: int, uid: int, gid: int) -> None:
        self.pid, self.uid, self.gid = pid, uid, gid


def check_socket_path(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as str. Raises PathTooLong beyond 100 bytes (sun_path is 108)."""
    p = os.fspath(path)
    n = len(os.fsencode(p))
    if n > MAX_SOCKET_PATH:
        raise PathTooLong(
            f"socket path {p!r} is {n} bytes; the limit is {MAX_SOCKET_PATH}. "
            "Choose a shorter TENURE_HOME.", {"path": p, "length": n})
    return p


def _allowed_owners() -> tuple[int, ...]:
    return (os.geteuid(), 0)


def symlink_refused(path: str) -> UnsafePath:
    return UnsafePath(f"{path} is a symlink; tenure never follows symlinks in state paths "
                      f"(give the directory it points to: {os.path.realpath(path)})",
                      {"path": path})


def refuse_unsafe_home(home: str | os.PathLike[str]) -> None:
    """Every command refuses a home that is a symlink, not only `up` (which would create
    nothing through it): a command that followed one would read or stop the daemons of
    another home. So is one that is not a directory, and one others may write to (as
    `up` refuses it: anyone could swap what the daemons and this command read there,
    also after `up` checked it). One lstat; a home that does not exist is no one's
    business here (`up` creates it). Raises UnsafePath."""
    p = os.fspath(home)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise symlink_refused(p)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{p} is not a directory: a home is one", {"path": p})
    if st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        raise UnsafePath(f"{p} has mode {mode:04o}: others may write to it; it must be "
                         f"0700 (`chmod 700 {p}`)", {"path": p, "mode": mode})


def check_private_dir(path: str | os.PathLike[str], owners: tuple[int, ...] | None = None) -> None:
    """Raises UnsafePath unless ``path`` is a real directory, mode 0700 (0710 allowed),
    owned by us (or root)."""
    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        raise UnsafePath(f"{p} does not exist", {"path": p}) from None
    if stat.S_ISLNK(st.st_mode):
        raise symlink_refused(p)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{p} is not a directory", {"path": p})
    if st.st_uid not in (owners or _allowed_owners()):
        raise UnsafePath(f"{p} is owned by uid {st.st_uid}", {"path": p, "uid": st.st_uid})
    # group search (0o010) is the one bit allowed: it lets a configured viewer group reach
    # the backend's API socket without listing or reading anything
    if st.st_mode & 0o067:
        raise UnsafePath(f"{p} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700: "
                         "find out who changed it, then chmod 700 it",
                         {"path": p, "mode": stat.S_IMODE(st.st_mode)})


def check_ancestors(path: str | os.PathLike[str], owners: tuple[int, ...] | None = None
                    ) -> None:
    """Raises UnsafePath when a directory above ``path``, as written or as its symlinks
    resolve, could be changed by a user other than one of ``owners`` (default: us or
    root): owned by another user, or writable by its group or others without the sticky
    bit (/tmp has it). Such a user could move ``path`` away and put another directory in
    its place: an owner that sees its home replaced stops every application."""
    allowed = owners or _allowed_owners()
    written = os.path.abspath(path)
    seen: set[str] = set()
    for top in (written, os.path.realpath(written)):
        d = os.path.dirname(top)
        while d not in seen:
            seen.add(d)
            st = os.lstat(d)
            if not stat.S_ISLNK(st.st_mode):   # a link's own place is its parent's
                _check_ancestor(d, st, allowed, path)
            if d == os.path.dirname(d):
                break
            d = os.path.dirname(d)


def _check_ancestor(d: str, st: os.stat_result, allowed: tuple[int, ...],
                    below: str | os.PathLike[str]) -> None:
    if st.st_uid not in allowed:
        why = f"is owned by uid {st.st_uid}"
    elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        why = f"has mode {stat.S_IMODE(st.st_mode):04o} (writable by others, not sticky)"
    else:
        return
    raise UnsafePath(f"{d} {why}: whoever can change it could replace {os.fspath(below)}; "
                     "put the home under directories only you or root can change",
                     {"path": d})


def ensure_private_dir(path: str | os.PathLike[str],
                       root: str | os.PathLike[str] | None = None,
                       owners: tuple[int, ...] | None = None, *,
                       above: bool = True) -> Path:
    """Create ``path`` (and missing parents below ``root``) with mode 0700, then check it.

    Every existing component from ``root`` (inclusive) down to ``path`` must be a private
    directory owned by one of ``owners`` (default: us or root), and no directory above
    ``root`` changeable by anyone else (:func:`check_ancestors`; ``above`` False: ``root``
    is a directory inside the home, whose own owners this caller does not know, and the
    home's daemon checked above it). Raises UnsafePath; never changes an existing
    directory's mode or owner.
    """
    base, chain = _private_chain(path, root)
    os.makedirs(base.parent, exist_ok=True)  # ordinary parents (e.g. ~/.local/state)
    if above:
        check_ancestors(base, owners)
    for component in chain:
        with suppress(FileExistsError):
            os.mkdir(component, 0o700)
        check_private_dir(component, owners)
    return chain[-1]


def check_private_tree(path: str | os.PathLike[str],
                       root: str | os.PathLike[str] | None = None,
                       owners: tuple[int, ...] | None = None, *, above: bool = True) -> None:
    """What :func:`ensure_private_dir` would refuse, read only: it creates nothing and
    changes nothing. The directories above ``root`` (with ``above``) and every component
    from ``root`` down to ``path`` that exists are checked by the same rules; a missing
    one ends the check (ensure_private_dir would create it, and what it creates, 0700,
    passes). For a check ahead of a start by another process (the guardian's, before a
    handoff, of what the candidate generation would refuse). Raises UnsafePath."""
    base, chain = _private_chain(path, root)
    if above and os.path.lexists(base):
        check_ancestors(base, owners)
    for component in chain:
        if not os.path.lexists(component):
            return
        check_private_dir(component, owners)


def _private_chain(path: str | os.PathLike[str], root: str | os.PathLike[str] | None
                   ) -> tuple[Path, list[Path]]:
    """``root`` (default ``path``) and the directories from it down to ``path``."""
    from pathlib import Path
    target = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root)) if root is not None else target
    if base != target and base not in target.parents:
        raise ValueError(f"{target} is not under {base}")
    chain = [base, *reversed([p for p in target.parents if base in p.parents])]
    if base != target:
        chain.append(target)
    return base, chain


def check_socket_file(path: str | os.PathLike[str], owners: tuple[int, ...] | None = None,
                      allow_group: bool = False) -> None:
    """Client-side check before connecting: a real socket, owned by a trusted uid, not
    readable or writable by others (nor the group unless ``allow_group``), in a directory
    that is not a symlink. Raises UnsafePath."""
    p = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(p))
    pst = os.lstat(parent)
    if stat.S_ISLNK(pst.st_mode) or pst.st_mode & 0o002:
        raise UnsafePath(f"{parent} is a symlink or writable by others", {"path": parent})
    st = os.lstat(p)
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafePath(f"{p} is not a socket", {"path": p})
    if st.st_uid not in (owners or _allowed_owners()):
        raise UnsafePath(f"{p} is owned by uid {st.st_uid}, not a trusted user",
                         {"path": p, "uid": st.st_uid})
    wide = 0o007 if allow_group else 0o077
    if st.st_mode & wide:
        raise UnsafePath(f"{p} has mode {stat.S_IMODE(st.st_mode):04o}", {"path": p})


def unix_live(path: str) -> bool:
    """Whether a listener answers at the Unix socket ``path``, asked without waiting: a
    connect that succeeds, or that would have to wait (the accept queue is full: a busy
    listener is a live one), says yes; ECONNREFUSED (a socket file nobody listens on)
    says no. A blocking connect waited for as long as a full queue stayed full, and held
    the event loop of whoever asked. Raises OSError for anything else (no such file, a
    socket of another type, no permission)."""
    kind = socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    with socket.socket(socket.AF_UNIX, kind) as probe:
        try:
            probe.connect(path)
        except BlockingIOError:
            return True
        except ConnectionRefusedError:
            return False
    return True


def _remove_if_stale(p: str) -> None:
    """Unlink ``p`` only if it is our socket and nothing answers on it."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePath(f"{p} exists and is not a socket of ours; refusing to replace it",
                         {"path": p})
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(p)
        # who listens (the kernel's record: a stopped or hung process still accepts), so
        # the operator can find it: `kill -CONT PID`, or end it
        pid = peer_credentials(probe).pid
    except ConnectionRefusedError:
        os.unlink(p)  # nobody listens: a leftover from a dead server
        return
    except OSError as exc:
        raise UnsafePath(f"cannot tell whether {p} is live ({exc}); leaving it",
                         {"path": p}) from None
    finally:
        probe.close()
    raise AlreadyRunning(f"a live server (pid {pid}) answers on {p}", {"path": p, "pid": pid})


def bind_unix(path: str | os.PathLike[str], kind: int = socket.SOCK_STREAM) -> socket.socket:
    """Bind a 0600 Unix socket at ``path`` inside an existing private directory.

    Raises PathTooLong, UnsafePath (bad directory, foreign file in the way) or
    AlreadyRunning (a live server owns the path; it is never removed).
    """
    p = check_socket_path(path)
    check_private_dir(os.path.dirname(os.path.abspath(p)))
    _remove_if_stale(p)
    sock = socket.socket(socket.AF_UNIX, kind)
    try:
        # umask is process-wide; the window is a single bind() and the directory is
        # already 0700, so even a racing thread's file cannot be reached by others.
        old = os.umask(0o177)
        try:
            sock.bind(p)
        finally:
            os.umask(old)
        os.chmod(p, 0o600, follow_symlinks=False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AlreadyRunning(f"{p} was taken while binding", {"path": p}) from None
        raise
    return sock


def share_with_group(paths: list[str], sock: str, gid: int) -> None:
    """Let members of ``gid`` reach ``sock``: its directories become 0710 (search only,
    no listing) and the socket 0660, all with group ``gid``. The server still checks
    every peer's credentials and gives the group the viewer role only."""
    for d in paths:
        os.chown(d, -1, gid, follow_symlinks=False)
        os.chmod(d, 0o710, follow_symlinks=False)
    os.chown(sock, -1, gid, follow_symlinks=False)
    os.chmod(sock, 0o660, follow_symlinks=False)


def unshare(paths: list[str], sock: str) -> None:
    """Undo :func:`share_with_group`: directories 0700, the socket 0600."""
    for d in paths:
        os.chmod(d, 0o700, follow_symlinks=False)
    if os.path.exists(sock):
        os.chmod(sock, 0o600, follow_symlinks=False)


def peer_of(address: str | bytes, timeout: float) -> PeerCred:
    """Who accepts connections at ``address`` (a path, or an abstract name starting with
    NUL): one connect, nothing sent; the kernel's SO_PEERCRED of the listener (a busy or
    stopped process still accepts). Raises ConnectionRefusedError (bound, nobody
    listening), FileNotFoundError, PermissionError or another OSError (TimeoutError
    when its backlog is full)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(address)
        return peer_credentials(s)


def peer_credentials(sock: socket.socket) -> PeerCred:
    """SO_PEERCRED of a connected AF_UNIX stream socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCred(pid, uid, gid)


Authorizer = Callable[[PeerCred], str | None]


def same_uid_or_root(cred: PeerCred) -> str | None:
    """Default authorization: the daemon's own uid or root is admin; nobody else."""
    return "admin" if cred.uid in (os.geteuid(), 0) else None


def admins(*uids: int) -> Authorizer:
    """:func:`same_uid_or_root`, and also ``uids`` as admins (the owner, running as root,
    admits the service account its guardian and backends run as); nobody else."""
    allowed = frozenset((os.geteuid(), 0, *uids))

    def authorize(cred: PeerCred) -> str | None:
        return "admin" if cred.uid in allowed else None
    return authorize


def admin_or_viewer(viewer_gid: int | None,
                    deny: frozenset[int] = frozenset()) -> Authorizer:
    """Admin as :func:`same_uid_or_root`; members of ``viewer_gid`` get the viewer role,
    except the uids in ``deny`` (the apps' users: they are refused everywhere)."""
    def authorize(cred: PeerCred) -> str | None:
        role = same_uid_or_root(cred)
        if role is None and cred.uid not in deny and viewer_gid is not None \
                and _in_group(cred, viewer_gid):
            return "viewer"
        return role
    return authorize


def _in_group(cred: PeerCred, gid: int) -> bool:
    if cred.gid == gid:
        return True
    from .procfs import status_groups
    return gid in (status_groups(cred.pid) or ())
