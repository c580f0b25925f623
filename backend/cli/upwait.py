"""What `tenure up` waits for before it starts the daemons, and what `tenure down` waits
for after it signalled them: another `up` starting them (it holds ``runtime/up.lock``
until they answer: :func:`starting_daemons`, :func:`wait_background_start`), and an
owner that is shutting down (as long as its longest stop policy and its other stages
may take: :func:`shutdown_budget`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from protocol.errors import OperationInProgress
from protocol.layout import Layout
from protocol.procfs import running
from protocol.sockets import ensure_private_dir

__all__ = ["BACKGROUND_WAIT_S", "OWNER_STAGES_S", "shutdown_budget", "starting_daemons",
           "wait_background_start", "wait_owner_gone"]

UP_POLL_S = 0.005   # how often a held lock is tried again


BACKGROUND_WAIT_S = 30.0


def wait_background_start(layout: Layout, timeout: float = BACKGROUND_WAIT_S) -> bool:
    """Wait until no `tenure up --no-wait` is starting the daemons in the background
    (it holds ``runtime/up.lock`` until they answer, ~0.3 s): so that a `down` right
    after it stops them instead of finding nothing yet, and an `up` does not start a
    second pair. Returns False when one still held it after ``timeout``."""
    import fcntl
    try:
        fd = os.open(layout.up_lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True   # none ever ran here (or not a file we would wait on)
    try:
        return _flock_within(fd, fcntl.LOCK_SH, timeout)
    finally:
        os.close(fd)


@contextmanager
def starting_daemons(layout: Layout, timeout: float = BACKGROUND_WAIT_S) -> Iterator[bool]:
    """Hold ``runtime/up.lock`` while this `tenure up` starts the daemons, as an `up
    --no-wait`'s child does: another `up` waits here, then finds them running (each
    started a pair of its own, and the one whose guardian lost stopped the owner the
    other's had pinned), and a `down` waits for them to answer before it stops them.
    Not taken when both answer already (nothing to start: under systemd, whose home
    and its runtime/ are the service account's): it yields True then, for the caller to
    ask them nothing again, else False. Raises OperationInProgress when another held it
    ``timeout`` s."""
    import fcntl

    from .daemons import ping  # it waits for owners with this module
    answers = [ping(sock, home=layout.home)
               for sock in (layout.owner_sock, layout.guardian_sock)]
    if all(a is not None and a.get("draining") is not True for a in answers):
        yield True
        return
    ensure_private_dir(layout.runtime, root=layout.home)
    fd = os.open(layout.up_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        if not _flock_within(fd, fcntl.LOCK_EX, timeout):
            raise OperationInProgress(
                f"another `tenure up` has been starting the daemons for {timeout:g} s "
                f"(it holds {layout.up_lock}); try again once it is done",
                {"path": str(layout.up_lock)})
        yield False
    finally:
        os.close(fd)


def _flock_within(fd: int, how: int, timeout: float) -> bool:
    """Take flock ``how`` on ``fd``, trying for ``timeout`` s: whether it was taken."""
    import fcntl
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(UP_POLL_S)


def wait_down(layout: Layout, timeout: float) -> None:
    """Wait until a `tenure down` under way has ended (it holds execution/maintenance.lock
    while it runs, protocol.window): an `up` beside it found the guardian the `down` had
    just stopped gone and started another, and the `down` then stopped the owner under
    it. Raises OperationInProgress naming the `down`'s pid when it still runs after
    ``timeout``."""
    from protocol.window import DOWN, busy, down_running
    pid = down_running(layout.home)
    if pid is None:
        return
    print(f"tenure: `tenure down` (pid {pid}) is stopping tenure; waiting for it to "
          "end before starting tenure again", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout
    while pid is not None:
        if time.monotonic() > deadline:
            raise busy(pid, "`tenure up`", DOWN)
        time.sleep(0.05)
        pid = down_running(layout.home)


OWNER_STAGES_S = 60.0   # the owner's shutdown besides its applications' stops, and margin


def shutdown_budget(status: dict[str, Any] | None) -> float:
    """How long the owner whose ``status`` this is may take to shut down: its longest
    stop policy (an older owner does not say: 0) and the rest of its stages."""
    budget = (status or {}).get("stop_budget")
    if not isinstance(budget, int | float) or isinstance(budget, bool) or budget < 0:
        return 0.0
    return float(budget) + OWNER_STAGES_S


def wait_owner_gone(status: dict[str, Any]) -> None:
    """Wait for the owner whose ``status`` says it is shutting down (a `tenure down` cut
    short by Ctrl-C, say: the owner goes on stopping every application) to end. Raises
    OperationInProgress when it still runs after its budget (:func:`shutdown_budget`)."""
    pid, ticks = status["owner"]["pid"], status["owner"]["start_ticks"]
    budget = max(shutdown_budget(status), OWNER_STAGES_S)
    print(f"tenure: the owner (pid {pid}) is shutting down, stopping every application; "
          "waiting for it to end before starting a new one", file=sys.stderr, flush=True)
    deadline = time.monotonic() + budget
    while running(pid, ticks):
        if time.monotonic() > deadline:
            raise OperationInProgress(
                f"the owner (pid {pid}) is shutting down and still runs after {budget:g} s; "
                "`tenure up` again once it has ended (`tenure owner status` says when)",
                {"pid": pid})
        time.sleep(0.05)
