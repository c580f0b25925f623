"""The notify socket: sd_notify datagrams from applications, attributed to launches.

Apps get ``NOTIFY_SOCKET`` and send ``READY=1``, ``STATUS=...``, ``WATCHDOG=1`` ... exactly
as under systemd. The kernel stamps each datagram with the sender's (pid, uid, gid)
(``SO_PASSCRED`` → ``SCM_CREDENTIALS``); the listener maps that pid to a launch through a
caller-supplied ``resolve`` and hands ``(launch_key, sender_pid, fields)`` to
``on_message``. Unattributable datagrams are counted and dropped.

Descriptors attached to a message (SCM_RIGHTS) are closed at once, except those of an
attributed ``FDSTORE=1`` message, which go to ``on_message`` (it owns them from then on:
the fd store, owner.fdstore). Nothing else ever keeps a descriptor an app sent.

A message whose descriptors did not all arrive (``MSG_CTRUNC``: the owner was out of
descriptors, or the sender attached more than the buffer's room for SCM_MAX_FD) is
dropped whole, as systemd does: the fd store takes all of a message or none, and the
fields alone would tell the app its fds were stored. What did arrive is closed, the
message is counted (``truncated``; an ``FDSTORE=1`` one's fds also as refused by the fd
store, through ``on_refused``) and logged at most once per TRUNCATED_LOG_EVERY, since a
flood of them is exactly what an owner out of descriptors receives.

Attribution limits (measured with Debian 12's systemd 252 ``systemd-notify``):

- ``systemd-notify --ready`` sends READY with the credentials of its PARENT (normally the
  app's shell, which waits for it and is alive when we read), then ``BARRIER=1`` from its
  own pid carrying a pipe fd, and blocks until that fd is closed (up to 5 s). We close
  every received fd at once, so the barrier returns immediately; barrier-only messages are
  not delivered. ``--no-block`` skips the barrier.
- If the app's leader IS ``systemd-notify`` (e.g. ``sh -c 'systemd-notify --ready'``
  where the shell execs it), its parent is the owner itself: that message cannot be
  attributed and is dropped. Run it from a shell that stays, or pass ``--pid=$$``.
- A sender that exits before we read its datagram (a non-root ``systemd-notify``, whose
  kernel-filled pid is its own) cannot be looked up in /proc any more. The default
  resolver then falls back to the pid being a launch leader itself (pgid == pid);
  otherwise the message is dropped and counted. A pid reused in between could, rarely,
  misattribute: credentials carry no start time.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import logging
import os
import re
import socket
import stat
import struct
from collections.abc import Callable
from typing import Generic, TypeVar

from protocol.errors import AlreadyRunning, PathTooLong, UnsafePath
from protocol.seldom import Seldom

from .procinfo import read_pgid

__all__ = [
    "KNOWN_KEYS",
    "MAX_DATAGRAM",
    "TRUNCATED_LOG_EVERY",
    "NotifyListener",
    "parse_message",
    "pgid_resolver",
]

log = logging.getLogger(__name__)

K = TypeVar("K")

MAX_DATAGRAM = 4096
MAX_PATH_BYTES = 100  # ARCHITECTURE.md: every socket path must fit in 100 bytes
# Datagrams read per wakeup: keeps one chatty app from starving the loop.
BATCH = 64
# Room for credentials plus the most fds one message may carry (SCM_MAX_FD = 253: the
# kernel refuses to send more), so only an owner out of descriptors sees MSG_CTRUNC.
_ANCILLARY = socket.CMSG_SPACE(12) + socket.CMSG_SPACE(253 * 4)
TRUNCATED_LOG_EVERY = 60.0
"""Seconds between two warnings about messages dropped for cut-short descriptors."""

KNOWN_KEYS = frozenset({
    "READY", "RELOADING", "STOPPING", "STATUS", "ERRNO", "BUSERROR", "EXIT_STATUS",
    "MAINPID", "MONOTONIC_USEC", "WATCHDOG", "WATCHDOG_USEC", "EXTEND_TIMEOUT_USEC",
    "FDSTORE", "FDSTOREREMOVE", "FDNAME", "FDPOLL", "BARRIER", "NOTIFYACCESS",
})
_KEY_RE = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def parse_message(data: bytes) -> dict[str, str] | None:
    """Parse newline-separated ``KEY=VALUE`` lines; None if no line of the datagram is
    UTF-8 (it has lines, none of which can be read).

    Unknown keys, lines that are not ``KEY=VALUE`` and lines that are not UTF-8 are
    skipped with a debug line (a newer protocol must not break an older owner; a
    ``STATUS=`` in another encoding must not cost the ``READY=1`` beside it, which
    systemd honours too); for a repeated key the last wins. Pure: raises nothing.
    """
    fields: dict[str, str] = {}
    lines = [raw for raw in data.split(b"\n") if raw]
    unreadable = 0
    for raw in lines:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            unreadable += 1
            log.debug("notify: skipping a line that is not UTF-8 (%d bytes)", len(raw))
            continue
        key, sep, value = line.partition("=")
        if not sep or not _KEY_RE.match(key):
            log.debug("notify: skipping malformed line %r", line[:80])
        elif key not in KNOWN_KEYS:
            log.debug("notify: ignoring unknown key %r", key)
        else:
            fields[key] = value
    return None if lines and unreadable == len(lines) else fields


def pgid_resolver(launch_for_pgid: Callable[[int], K | None]) -> Callable[[int], K | None]:
    """A ``resolve(pid)`` that attributes a sender to the launch owning its process group.

    ``launch_for_pgid(pgid)`` names the launch whose group is ``pgid`` (apps run in their
    own session, so pgid == the leader's pid). A sender already gone from /proc is tried
    as a launch leader itself. Never raises.
    """

    def resolve(pid: int) -> K | None:
        pgid = read_pgid(pid)
        return launch_for_pgid(pid if pgid is None else pgid)

    return resolve


def _take_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds passed with a message (SCM_RIGHTS; received close-on-exec)."""
    out: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            out.extend(fds)
    return out


def _close_fds(fds: list[int]) -> int:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    return len(fds)


def _credentials(ancillary: list[tuple[int, int, bytes]]) -> tuple[int, int, int] | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
            pid, uid, gid = struct.unpack("iii", data[:12])
            return pid, uid, gid
    return None


class NotifyListener(Generic[K]):
    """One AF_UNIX datagram socket at ``path`` (0600; or an abstract ``@name``), read in
    the running asyncio loop.

    ``stats`` counts received, delivered, unattributed, oversized, malformed, ignored
    (no known key), barrier, truncated (descriptors cut short) datagrams and fds_closed;
    nothing is dropped without being counted.
    """

    def __init__(self, path: str, resolve: Callable[[int], K | None],
                 on_message: Callable[[K, int, dict[str, str], list[int]], None],
                 on_refused: Callable[[int], None] | None = None) -> None:
        """``on_message(key, sender_pid, fields, fds)`` owns ``fds`` (empty unless the
        message says ``FDSTORE=1``) once it returns; if it raises they are closed.
        ``on_refused(n)`` is told how many fds of an ``FDSTORE=1`` message that arrived
        cut short were closed instead of delivered (the fd store counts them refused)."""
        self.path = path
        self._resolve = resolve
        self._on_message = on_message
        self._on_refused = on_refused
        self._sock: socket.socket | None = None
        self._owns_path = True
        self.stats = dict.fromkeys(("received", "delivered", "unattributed", "oversized",
                                    "malformed", "ignored", "barrier", "truncated",
                                    "fds_closed"), 0)
        self._truncated = Seldom(TRUNCATED_LOG_EVERY)   # warned of at most this often

    def open(self) -> None:
        """Bind the socket (umask 0177, then chmod 0600) and start reading.

        Raises PathTooLong (over 100 bytes), UnsafePath (something not ours or not a
        socket is at ``path``), AlreadyRunning (a live socket answers there) or OSError.
        A stale socket file is removed only after a connect to it was refused.
        """
        if len(os.fsencode(self.path)) > MAX_PATH_BYTES:
            raise PathTooLong(f"notify socket path exceeds {MAX_PATH_BYTES} bytes",
                              {"path": self.path})
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            if self.abstract:
                # no file, no permissions: see owner.paths.OwnerPaths.notify_address
                sock.bind("\0" + self.path[1:])
            else:
                self._bind_file(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    @property
    def abstract(self) -> bool:
        """``@name``: an address in the abstract namespace, as sd_notify(3) spells it."""
        return self.path.startswith("@")

    def _bind_file(self, sock: socket.socket) -> None:
        self._remove_stale()
        # umask is process-wide: a file another thread creates in this instant gets
        # 0600 too, which errs on the safe side. Binding under it leaves no window in
        # which the socket exists with wider permissions; chmod pins the result.
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    def disown(self) -> None:
        """The path is no longer ours (the home was lost): close leaves it alone."""
        self._owns_path = False

    def close(self) -> None:
        """Stop reading, close the socket and remove its path (unless disowned).
        Idempotent."""
        if self._sock is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        if not self.abstract and self._owns_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _remove_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafePath(f"{self.path} exists and is not our socket", {"path": self.path})
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            probe.connect(self.path)
        except ConnectionRefusedError:
            os.unlink(self.path)
            return
        except OSError as e:
            if e.errno != errno.ECONNREFUSED:
                raise
        finally:
            probe.close()
        raise AlreadyRunning(f"a live socket answers at {self.path}", {"path": self.path})

    def _on_readable(self) -> None:
        sock = self._sock
        for _ in range(BATCH):
            if sock is None:
                return
            try:
                data, anc, flags, _addr = sock.recvmsg(MAX_DATAGRAM, _ANCILLARY,
                                                       socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return
            self._handle(data, anc, flags)

    def _handle(self, data: bytes, anc: list[tuple[int, int, bytes]], flags: int) -> None:
        self.stats["received"] += 1
        fds = _take_fds(anc)
        if flags & socket.MSG_CTRUNC:
            self._drop_truncated(data, fds)
            return
        fields = self._fields(data, anc, flags)
        creds = _credentials(anc)
        key = None
        if fields is not None:
            key = None if creds is None else self._resolve_safely(creds[0])
            if key is None:
                self.stats["unattributed"] += 1
                log.debug("notify: dropped message from unattributable sender %s", creds)
        if key is None or fields is None or creds is None:
            self.stats["fds_closed"] += _close_fds(fds)
            return
        keep = fds if fields.get("FDSTORE") == "1" else []
        self.stats["fds_closed"] += _close_fds([fd for fd in fds if fd not in keep])
        self.stats["delivered"] += 1
        try:
            self._on_message(key, creds[0], fields, keep)
        except Exception:
            log.exception("notify: on_message failed")
            self.stats["fds_closed"] += _close_fds(keep)

    def _drop_truncated(self, data: bytes, fds: list[int]) -> None:
        """Drop a message whose descriptors were cut short (see the module docstring):
        close the ``fds`` that arrived, count it, and warn at most once per
        TRUNCATED_LOG_EVERY. Raises nothing."""
        self.stats["truncated"] += 1
        self.stats["fds_closed"] += _close_fds(fds)
        fields = parse_message(data)
        if fields is not None and fields.get("FDSTORE") == "1" and self._on_refused:
            try:
                self._on_refused(len(fds))
            except Exception:
                log.exception("notify: on_refused failed")
        said = self._truncated.due()
        if said:
            log.warning("notify: dropped %d message(s) whose descriptors did not all "
                        "arrive (MSG_CTRUNC: usually the owner out of file descriptors); "
                        "none of their fds was stored (reported at most every %g s)",
                        said, TRUNCATED_LOG_EVERY)

    def _fields(self, data: bytes, anc: list[tuple[int, int, bytes]], flags: int
                ) -> dict[str, str] | None:
        """The message's fields, or None (counted) when there is nothing to deliver."""
        if flags & socket.MSG_TRUNC:
            self.stats["oversized"] += 1
            log.debug("notify: dropped a datagram over %d bytes", MAX_DATAGRAM)
            return None
        fields = parse_message(data)
        if fields is None:
            self.stats["malformed"] += 1
            return None
        if set(fields) == {"BARRIER"}:
            self.stats["barrier"] += 1  # its fd is closed: that is the answer
            return None
        if not fields:
            self.stats["ignored"] += 1  # nothing we know: a newer protocol, or noise
            return None
        return fields

    def _resolve_safely(self, pid: int) -> K | None:
        if pid <= 0 or pid == os.getpid():
            return None  # see module docstring: the owner itself is never an app
        try:
            return self._resolve(pid)
        except Exception:
            log.exception("notify: resolve(%d) failed", pid)
            return None
