"""Waiting for an operation to end (``apply --wait``, ``op show --wait``, ``up --config``),
through backend handoffs.

An operation is a durable row of the backend's store: a handoff (``tenure backend
upgrade``) or a backend restart leaves it to the next generation, which continues it
from that row. So a wait that loses its backend asks the next one for the same
operation id, and ends with the operation's own outcome, not with the error of the
generation that went away. A backend that drains (SHUTTING_DOWN), a connection that
broke (TRANSPORT_LOST: ``op.show`` only reads, so asking again changes nothing) and no
backend answering for a moment (BACKEND_UNAVAILABLE) are waited out (logs.AWAY, what
every follower waits out), within the wait's ``--timeout``; a silence longer than a
handoff takes is said once on stderr, and so is the answer after it. When no backend
comes back by itself (tenure stopped, a blocked recovery, an unmanaged guardian gone:
jobs.none_coming) the wait ends at once with that error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from protocol.errors import BackendUnavailable, RequestTimedOut, TenureError

from .logs import AWAY, SAY_AFTER_S

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["AWAY_POLL_S", "OP_WAIT", "wait_op", "wait_queued"]

OP_WAIT = 10.0       # seconds one op.show waits in the backend for the operation to end
AWAY_POLL_S = 0.2    # a backend away is asked again this often
ANSWER_S = 5.0
"""Seconds an answer may take beyond the wait it was asked for. A backend that does not
answer within them (stopped: SIGSTOP, a debugger) is waited out as one away: with the
client's own 300 s per call, `op show --wait --timeout 5` hung silently for minutes."""
SILENT = (*AWAY, RequestTimedOut)


def wait_op(args: Any, call: Callable[..., Any], op_id: str, timeout: float,
            what: str) -> dict[str, Any]:
    """The row of operation ``op_id`` once it ended, or as it is once ``timeout`` passed
    (``outcome`` None: still running). The backend answers when it ends; an older one
    answers at once, and is asked again every 20 ms. A backend away is waited out within
    ``timeout`` (:class:`Away`). Raises what ``call`` raises, BACKEND_UNAVAILABLE when
    no backend answered by the deadline, and the error that says no backend is coming."""
    deadline = time.monotonic() + timeout
    away = Away(args, what, deadline, f"operation {op_id}",
                f"the operation goes on under the next one: `tenure op show {op_id} "
                "--wait` follows it", {"operation": op_id})
    while True:
        asked = time.monotonic()
        wait = round(max(0.0, min(OP_WAIT, deadline - asked)), 3)
        try:
            op: dict[str, Any] = call(args, "op.show", {"id": op_id, "wait": wait},
                                      timeout=wait + ANSWER_S)
        except SILENT as exc:
            away.went(exc)
            time.sleep(AWAY_POLL_S)
            continue
        away.back()
        if op["outcome"] is not None or time.monotonic() > deadline:
            return op
        if time.monotonic() - asked < 0.02:
            time.sleep(0.02)


def wait_queued(args: Any, call: Callable[..., Any], request_id: str, timeout: float,
                what: str) -> dict[str, Any]:
    """How the config queued as ``request_id`` (backend.spool) ended: ``queue.show``'s
    answer once it no longer waits. A backend away is waited out as by :func:`wait_op`.
    Raises TIMEOUT when it still waits at ``timeout`` (it stays queued), what ``call``
    raises, and the error that says no backend is coming."""
    deadline = time.monotonic() + timeout
    subject = f"the config queued as request {request_id}"
    away = Away(args, what, deadline, subject, "it stays queued for the next one: "
                "`tenure status` says whether it waits", {"request_id": request_id})
    while True:
        wait = round(max(0.0, min(OP_WAIT, deadline - time.monotonic())), 3)
        try:
            r: dict[str, Any] = call(args, "queue.show",
                                     {"request_id": request_id, "wait": wait},
                                     timeout=wait + ANSWER_S)
        except SILENT as exc:
            away.went(exc)
            time.sleep(AWAY_POLL_S)
            continue
        away.back()
        if r["state"] != "waiting":
            return r
        if time.monotonic() >= deadline:
            raise RequestTimedOut(
                f"the backend did not take {subject} within {timeout:g} s (an operation "
                "open before it, or the owner out of reach); it stays queued and is "
                "applied once the backend can: `tenure status` says whether it waits",
                {"request_id": request_id})


class Away:
    """A waiter's view of the backend between generations: since when none answered,
    and whether that was said on stderr (``tenure: WHAT: ...``). ``subject``: what is
    waited for; ``after``: what a wait that timed out leaves, and how to follow it."""

    def __init__(self, args: Any, what: str, deadline: float, subject: str, after: str,
                 data: dict[str, Any]) -> None:
        self.args, self.what, self.deadline = args, what, deadline
        self.subject, self.after, self.data = subject, after, data
        self.since: float | None = None
        self.told = False

    def went(self, exc: TenureError) -> None:
        """No backend answered (``exc``, one of logs.AWAY). Raises the error that ends
        the wait when none is coming by itself (jobs.none_coming) or the deadline passed
        (:meth:`timed_out`); says a silence of SAY_AFTER_S once."""
        from .jobs import none_coming
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        final = none_coming(self.args, exc)
        if final is exc:
            raise exc
        if final is not None:
            raise final from None
        if now >= self.deadline:
            raise self.timed_out(exc) from None
        if not self.told and now - self.since >= SAY_AFTER_S:
            from .logs import away
            sys.stderr.write(
                f"tenure: {self.what}: {away(exc, now - self.since)} "
                f"({exc.msg}); waiting for one, and for {self.subject}, for up to "
                f"{self.deadline - now:.0f} s more (Ctrl-C ends; the operation goes on)\n")
            sys.stderr.flush()
            self.told = True

    def back(self) -> None:
        """A backend answered: said when the silence before was."""
        if self.told:
            sys.stderr.write(f"tenure: {self.what}: a backend answers again; waiting for "
                             f"{self.subject}\n")
            sys.stderr.flush()
        self.since, self.told = None, False

    def timed_out(self, exc: TenureError) -> BackendUnavailable:
        """The error of a wait whose ``--timeout`` passed while no backend answered:
        ``exc`` itself when it is BACKEND_UNAVAILABLE (it carries the guardian's
        diagnostics), else one that names the operation and ``exc``. Never an error
        that reads as the operation's end: it may still run."""
        if isinstance(exc, BackendUnavailable):
            return exc
        return BackendUnavailable(
            f"no backend generation answered before the --timeout while waiting for "
            f"{self.subject} (the last answer: {exc}); {self.after}",
            {**self.data, "last_error": exc.code_str})
