"""The background child of `tenure up --no-wait`, forked as the command starts.

On a home whose daemons are all down, `up --no-wait` has a child verify the release
while the command reads and parses the config; the child starts the owner and the
guardian once the command gives its word (backend.cli.background.prestart). Forked there,
the child began after the command line's imports and its parse (~60 ms into the
command), and the daemons then waited for its verification. Forked here, before any of
that, the verification runs beside the command's own work on the other CPU.

The child forked here is a guess from the words of the command line, made before they
are parsed: it starts nothing until the command, having parsed its line and checked the
home as before, adopts it (background.prestart) and says go. A command that does not (not
`up --no-wait` after all, a home where a daemon answers, a config that does not parse, a
command that fails or dies) closes its pipe, and the child exits having started and
written nothing. Only what it can do without that word is done here: no file is
created and nothing is written; runtime/up.lock is opened, not locked.
"""

from __future__ import annotations

import os

from protocol.layout import Layout, default_home_str

__all__ = ["Early", "prefork", "take"]

_CHILD: Early | None = None


class Early:
    """A child forked by :func:`prefork`, until the command adopts or cancels it."""

    def __init__(self, home: str, pid: int, word: int, lock: int) -> None:
        self.home, self.pid, self.word, self.lock = home, pid, word, lock

    def alive(self) -> bool:
        """Whether the child has not exited (it is this process's own child)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            return False

    def hand_over(self) -> tuple[int, int, int]:
        """(pid, word, lock), now the adopter's to close."""
        taken = (self.pid, self.word, self.lock)
        self.word = self.lock = -1
        return taken

    def cancel(self) -> None:
        """Close the command's ends: the child exits without starting anything. It
        holds runtime/up.lock until then, as a child the command adopted does, unless
        another holds it: a `down` or `up` right after this command waits for it."""
        if self.lock >= 0:
            import fcntl
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:   # EWOULDBLOCK: another command's child holds it
                pass
        for fd in (self.word, self.lock):
            if fd >= 0:
                os.close(fd)
        self.word = self.lock = -1


def take() -> Early | None:
    """The child :func:`prefork` forked for this command, handed over once."""
    global _CHILD
    child, _CHILD = _CHILD, None
    return child


def prefork(argv: list[str]) -> None:
    """Fork the child when ``argv`` reads as `up --no-wait` on a home whose daemons
    have no socket (all down) and whose guardian has state. Never raises: a guess that
    cannot be made leaves the command to fork its child later, as it did."""
    global _CHILD
    try:
        home = _home_of_up_no_wait(argv)
        if home is not None and _all_down(Layout(home)):
            _CHILD = _fork(Layout(home))
    except Exception:   # a guess: prestart forks one when this did not
        _CHILD = None


def _home_of_up_no_wait(argv: list[str]) -> str | None:
    """The home of `tenure [--home H] [--json] up ... --no-wait ...` (absolute), or None
    for any other command line, and when --home is given twice or help is asked."""
    rest, homes = list(argv), []
    while rest and rest[0].startswith("-"):   # the global options before the command
        a = rest.pop(0)
        if a == "--home" and rest:
            homes.append(rest.pop(0))
        elif a.startswith("--home="):
            homes.append(a.split("=", 1)[1])
        elif a != "--json":
            return None
    if not rest or rest.pop(0) != "up" or "--no-wait" not in rest or \
            any(a in ("-h", "--help", "--foreground") for a in rest):
        return None
    homes += [rest[i + 1] for i, a in enumerate(rest[:-1]) if a == "--home"]
    homes += [a.split("=", 1)[1] for a in rest if a.startswith("--home=")]
    if len(homes) > 1 or homes == [""]:   # an empty home: argparse refuses it
        return None
    return os.path.normpath(default_home_str(homes[0] if homes else None))


def _all_down(layout: Layout) -> bool:
    """No daemon's socket exists, and the guardian has state: a stopped home (after
    `tenure down`, a reboot). A stale socket (a killed daemon) sends the command down
    its usual path."""
    return os.path.isfile(layout.guardian_db) and not any(
        os.path.lexists(s) for s in (layout.owner_sock, layout.guardian_sock,
                                     layout.api_sock))


def _fork(layout: Layout) -> Early:
    """Fork the child (backend.cli.background.early_child) with runtime/up.lock open: the
    command locks that open file once it adopts the child, so that the lock passes to
    the child with the word as it does for a child forked then."""
    lock = os.open(layout.up_lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        told, word = os.pipe()
    except OSError:
        os.close(lock)
        raise
    try:
        pid = os.fork()
    except OSError:
        for fd in (lock, told, word):
            os.close(fd)
        raise
    if pid == 0:   # the child: never returns
        ok = False
        try:
            os.close(word)
            from .background import early_child  # runtime/up.lock stays open here
            ok = early_child(layout, told)
        finally:
            os._exit(0 if ok else 1)
    os.close(told)
    return Early(os.path.normpath(layout.root), pid, word, lock)
