"""The background start of `tenure up --no-wait`: the child that verifies the release
while the command reads and parses the config (:func:`prestart`, or the one
backend.cli.early forked: :func:`early_child`), starts the owner and the guardian once
the command gives its word, and leaves how that ended in logs/up.log
(:func:`last_background_start`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import StorageFailed, TenureError
from protocol.layout import Layout
from protocol.sockets import ensure_private_dir

from .daemons import direct_commands, ensure_daemons, open_log, ping, queue_for_backend

if TYPE_CHECKING:
    from .early import Early

__all__ = ["Prestart", "early_child", "in_background", "last_background_start",
           "prestart", "start_queued"]


class Prestart:
    """The child of an `up --no-wait` that verifies the release while the command reads
    and parses the config, then waits for the command's word (:func:`prestart`).
    ``lock``: runtime/up.lock as locked here, an open file the child shares (one forked
    by backend.cli.early), else -1 (the child holds its own)."""

    def __init__(self, pid: int, word: int, lock: int = -1) -> None:
        self.pid, self._word, self._lock = pid, word, lock

    def go(self) -> None:
        """Let it start the daemons. Raises OSError when it is gone (its own failure is
        in logs/up.log)."""
        try:
            os.write(self._word, b"g")
        finally:
            self.cancel()

    def cancel(self) -> None:
        """It starts nothing and exits (what a config that does not parse, a queue that
        cannot be written, or a command that dies does): its pipe closes. Either way the
        lock stays with it until it has exited."""
        for fd in (self._word, self._lock):
            if fd >= 0:
                os.close(fd)
        self._word = self._lock = -1


def prestart(layout: Layout, early: Early | None = None) -> Prestart | None:
    """`tenure up --no-wait` on a home whose daemons all are down and whose guardian has
    a release selected: the child that will start them, ``early`` (forked as the
    command started, backend.cli.early) or one forked now (:func:`in_background`); it
    verifies the release beside the command's own work, and starts the owner and the
    guardian once :meth:`Prestart.go` says so. None when something answers or the home
    has no release selected yet (``early`` is cancelled then): `up` then does what it
    always does, and only leaves the apply running. Raises StorageFailed when it cannot
    fork (nothing was started)."""
    if not _selected(layout) or any(
            ping(sock, home=layout.home) is not None
            for sock in (layout.owner_sock, layout.guardian_sock, layout.api_sock)):
        if early is not None:
            early.cancel()
        return None
    if early is not None and (adopted := _adopt(layout, early)) is not None:
        return adopted
    told, word = os.pipe()

    def work() -> bool:
        os.close(word)   # else its own copy would keep the pipe from ever closing
        return _start_when_told(layout, told)
    try:   # the child waits for them to answer (or reports why not in logs/up.log)
        pid = in_background(layout, work)
    except OSError as exc:
        os.close(word)
        raise StorageFailed(f"cannot start the daemons in the background: "
                            f"{exc.strerror or exc}; nothing was started", {}) from None
    finally:
        os.close(told)
    return Prestart(pid, word)


WORD_WAIT_S = 60.0
"""How long the child of `up --no-wait` waits for its command's word before it gives
up, starting nothing (the command reads and parses the config meanwhile)."""
FRESH_S = 1.0
"""A verification older than this when the word comes is done again before the
daemons start from the release (the word usually comes within ~0.1 s)."""


def _adopt(layout: Layout, early: Early) -> Prestart | None:
    """``early``'s child as this command's, runtime/up.lock locked on the open file it
    shares (:class:`Prestart`); None, ``early`` cancelled, when it was forked for
    another home or has exited (it could not open up.log, say: a child forked now
    reports why)."""
    import fcntl
    if early.home != os.path.normpath(layout.root) or not early.alive():
        early.cancel()
        return None
    pid, word, lock = early.hand_over()
    fcntl.flock(lock, fcntl.LOCK_EX)
    return Prestart(pid, word, lock)


def early_child(layout: Layout, told: int) -> bool:
    """In the child backend.cli.early forked: what :func:`in_background`'s child does,
    on a home the command has not checked yet (it refuses an unsafe one first), with
    :func:`_start_when_told` as the work. False when it failed."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):   # not the command's: a pipe it writes to stays open until
        os.dup2(null, fd)  # the command exits, not until this child does
    from protocol.sockets import refuse_unsafe_home
    refuse_unsafe_home(layout.root)
    ensure_private_dir(layout.logs, root=layout.home)
    return _background(open_log(layout.logs / "up.log"),
                       lambda: _start_when_told(layout, told))


def _start_when_told(layout: Layout, told: int) -> bool:
    """In the child: the daemons' commands verified first, then the command's word;
    False (nothing started) when the command closed its end without it or said
    nothing within :data:`WORD_WAIT_S`."""
    import select
    direct = direct_commands(layout)
    verified = time.monotonic()
    if not select.select([told], [], [], WORD_WAIT_S)[0]:
        os.write(1, f"{time.strftime(_STAMP)} no word from the command in "
                    f"{WORD_WAIT_S:.0f} s: nothing started\n".encode())   # up.log
        return False
    if os.read(told, 1) != b"g":
        return False
    if time.monotonic() - verified > FRESH_S:   # the command took long: verify again
        direct = direct_commands(layout)
    ensure_daemons(layout, False, direct)
    return True


def start_queued(layout: Layout, early: Prestart, text: str | None, source: str | None
                 ) -> dict[str, Any]:
    """Queue ``text`` for the backend (backend.spool), then let ``early`` start the
    owner and the guardian; returns without waiting for them."""
    queued = None
    if text is not None and source is not None:
        try:
            queued = queue_for_backend(layout, text, source)
        except StorageFailed:
            early.cancel()
            raise
    try:
        early.go()
    except OSError as exc:
        then = "; run `tenure up` (the config stays queued for the backend)" if queued \
            else ""
        raise StorageFailed(f"cannot start the daemons in the background: "
                            f"{exc.strerror or exc}{then}", {"queued": queued}) from None
    return {"starting": ["owner", "guardian"], "queued": queued}


def in_background(layout: Layout, work: Any) -> int:
    """Run ``work()`` in a child of this process and return its pid at once, as a
    daemon's start returns once it has forked: the release is verified, the daemons
    spawned and waited for there, after the command has answered. The child has its
    own session, reads nothing, writes to ``logs/up.log`` (0600), where an error is
    left with its traceback (a daemon that did not come up: the end of its log), and
    holds ``runtime/up.lock`` until ``work`` ends; it exits 0 once ``work`` returned,
    1 otherwise. A ``work`` that returns False started nothing: no record is written."""
    import fcntl
    ensure_private_dir(layout.logs, root=layout.home)
    ensure_private_dir(layout.runtime, root=layout.home)
    log_fd = open_log(layout.logs / "up.log")
    # taken here, held by the child (the same open file) until it has started them:
    # a `tenure down` or `up` meanwhile waits for it (wait_background_start)
    lock_fd = os.open(layout.up_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                      os.O_CLOEXEC, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:   # no child: the lock is let go at once
        _close_all(log_fd, lock_fd)
        raise
    if pid:
        _close_all(log_fd, lock_fd)   # the child holds them now
        return pid
    ok = False
    try:
        os.setsid()
        # the command's own handlers (main._said_on_termination) are not the child's
        import signal
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        ok = _background(log_fd, work)
    finally:
        os._exit(0 if ok else 1)


def _background(log_fd: int, work: Callable[[], object]) -> bool:
    """The child's side of :func:`in_background`: reads nothing, writes to ``log_fd``,
    runs ``work`` and records how it ended. False when ``work`` raised."""
    import traceback
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        if work() is not False:
            os.write(log_fd, f"{time.strftime(_STAMP)} {_BACKGROUND}: {_DONE}\n".encode())
        return True
    except BaseException:
        os.write(log_fd, (f"{time.strftime(_STAMP)} {_BACKGROUND}: {_FAILED}\n" +
                          traceback.format_exc()).encode())
        return False


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


_STAMP = "%Y-%m-%dT%H:%M:%S"
_BACKGROUND = "tenure up --no-wait"
_DONE = "the daemons answer"
_FAILED = "starting the daemons failed"


def last_background_start(layout: Layout) -> dict[str, Any] | None:
    """How the last background start of `tenure up --no-wait` ended, from the end of
    ``logs/up.log``: ``{"at", "ok"}``, with ``error`` (the log's last line: the daemon's
    own last words when it did not come up) when it failed. None when there is none or
    the log cannot be read safely (for `tenure status` with no backend to ask)."""
    from protocol.durable import read_private
    try:
        data = read_private(layout.logs / "up.log", tail=16384)
    except (OSError, TenureError):
        return None
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    marks = [i for i, line in enumerate(lines) if f" {_BACKGROUND}: " in line]
    if not marks:
        return None
    head = lines[marks[-1]]
    at, _, what = head.partition(f" {_BACKGROUND}: ")
    if what == _DONE:
        return {"at": at, "ok": True}
    return {"at": at, "ok": False, "error": lines[-1].strip()}


def _selected(layout: Layout) -> bool:
    """Whether the guardian's state names a selected release (read only; False when it
    cannot be read: the waiting path then says why)."""
    import sqlite3

    from protocol.durable import read_rows
    try:
        rows = read_rows(layout.guardian_db, "SELECT current FROM selector")
    except (sqlite3.Error, TenureError):
        return False
    return bool(rows and rows[0][0])
