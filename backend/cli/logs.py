"""``tenure logs``: read the owner's journal through the backend, page by page.

Pages are bounded by the owner (a record count and a byte budget) and printed as they
come (backend.cli.logprint: a line cut into several records printed once, terminal
controls neutralised on a terminal, the app's bytes unchanged when piped), so ``-n
100000`` of long lines never holds more than a page.

A follower outlives a silent owner (stopped, busy, being restarted): it says once on
stderr that it waits and why, asks again every OWNER_WAIT_S, and says when the owner
answers again; the lines captured meanwhile then follow, none skipped. It outlives a
backend handoff (``tenure backend upgrade``) and a backend restart the same way, without
a word (a longer wait is said): :func:`through_handoffs`, which every follower of the
backend shares. Records log retention removed before they were read (a follower behind
a fast app, a ``--since`` older than what is kept) are said on stderr (loggaps).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    OwnerUnavailable,
    ShuttingDown,
    TooManyConnections,
    TransportLost,
)

from .exits import Exit
from .loggaps import RetentionGaps
from .logprint import TENURE_FLAG, Printer, neutralise

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["AWAY", "FOLLOW_OUTAGE", "TENURE_FLAG", "away", "follow_logs", "neutralise",
           "not_running", "read_page", "since", "through_handoffs"]

PAGE_RECORDS = 10_000
FOLLOW_POLL_S = 0.2
OWNER_WAIT_S = 1.0   # a follower asks again this often while the owner is silent
FOLLOW_OUTAGE = 120.0   # seconds a follower waits for a backend before giving up
SAY_AFTER_S = 5.0       # and after how long of it the wait is said on stderr
AWAY = (BackendUnavailable, ShuttingDown, TooManyConnections, TransportLost)
"""A backend between generations (a handoff, a restart), not one that failed: what a
follower waits out (INTERNAL is not). Followers only read, and a read asked again
changes nothing, so one whose connection broke (TRANSPORT_LOST) is asked again too."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since(text: str | None, now: float) -> dict[str, Any]:
    """``--since`` → the API's ``after`` (a record id) or ``since_time`` (wall clock).
    Accepts ``42`` (an id), ``90s``/``10m``/``2h``/``1d`` (that long ago), ``14:05`` or
    ``14:05:30`` (today, local time) and ISO dates (``2026-12-01T14:05``, local unless
    it names a zone). Raises BadRequest."""
    if text is None:
        return {}
    t = text.strip()
    if t.isascii() and t.isdigit():
        from .main import WIRE_INT_MAX
        if int(t) > WIRE_INT_MAX:
            raise BadRequest(f"--since {t}: no record id is that large", {"field": "since"})
        return {"after": int(t)}
    if len(t) > 1 and t[-1] in _UNITS:
        try:
            amount = float(t[:-1])
        except ValueError:
            amount = -1.0
        if amount >= 0:
            return {"since_time": max(now - amount * _UNITS[t[-1]], 0.0)}
    import datetime as dt
    try:
        if ":" in t and "-" not in t:
            clock = dt.time.fromisoformat(t)
            when = dt.datetime.combine(dt.date.fromtimestamp(now), clock)
        else:
            when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise BadRequest(f"--since {text!r}: give a record id (42), a duration (90s, 10m, "
                         "2h, 1d) or a local time (14:05, 2026-12-01T14:05)") from None
    try:
        return {"since_time": max(when.timestamp(), 0.0)}
    except (ValueError, OverflowError):   # a date before the platform's first (year 1)
        return {"since_time": 0.0}


def follow_logs(args: Any, call: Callable[..., Any]) -> int:
    """Print the last ``args.n`` records (or those after ``args.since``), then, with
    ``args.follow``, every new one. Without it, stops at the journal's end as it was
    when the command started. The targets are resolved once, by the first read: later
    pages read the sources it found (an app a glob matched is read on after it is
    removed from the config). Records log retention removed before they were read are
    said on stderr, once each (loggaps). Raises what ``call`` raises."""
    tail = line_count(args.n)
    flt: dict[str, Any] = {"stream": args.stream} if args.stream else {}
    if args.targets:
        flt["targets"] = args.targets
    printer = Printer(args.json, _pattern(args.grep))
    gaps = RetentionGaps(args.follow)
    start = since(args.since, time.time()) or {"tail": tail}
    page = read_page(args, call, {**flt, **start, "limit": PAGE_RECORDS})
    if page.get("resolved") is not None and args.targets:
        flt.update(targets=page["resolved"], resolved=True)
    end = page["last_id"]
    try:
        while True:
            printer.gaps(gaps.take(page))   # said before the records that follow them
            recs = page["records"]
            if not args.follow and recs and recs[-1]["id"] > end:
                printer.page([r for r in recs if r["id"] <= end])
                return Exit.OK
            printer.page(recs)
            if not page["more"]:
                if not args.follow:
                    return Exit.OK
                time.sleep(FOLLOW_POLL_S)
            page = read_page(args, call, {**flt, "after": page["next"],
                                          "limit": PAGE_RECORDS})
    finally:   # a line cut at the end of what was read is printed as far as it goes
        printer.end()


def line_count(n: int) -> int:
    """``-n N`` checked: a count of lines, 0 or more. Raises BadRequest."""
    if n < 0:
        raise BadRequest(f"-n {n}: give a number of lines, 0 or more", {"field": "n"})
    return n


def through_handoffs(follow: bool, ask: Callable[[], Any], what: str = "logs") -> Any:
    """``ask()``, a read; with ``follow`` asked again every FOLLOW_POLL_S while the
    backend is away (AWAY), for at most FOLLOW_OUTAGE seconds. A handoff or a restart
    is waited out without a word, but a recovery the guardian's diagnostics say is
    blocked needs the operator: that is said at once, once, on stderr as ``tenure:
    WHAT: ...`` (also after the wait was said); any other wait is said once after
    SAY_AFTER_S (a backend hung or stopped), and an answer after either is said too.
    Raises what ``ask`` raises: an AWAY error at once without ``follow`` or when tenure
    is not running (nothing comes back by itself), after FOLLOW_OUTAGE otherwise."""
    began = time.monotonic()
    # each said once, apart: a wait said after 5 s may turn out a blocked recovery
    # (the guardian gave up meanwhile), which only the operator ends
    blocked = silent = False
    while True:
        try:
            answer = ask()
        except AWAY as exc:
            waited = time.monotonic() - began
            if not follow or not_running(exc) or waited > FOLLOW_OUTAGE:
                raise
            blocked = blocked or _tell_blocked(what, exc)
            silent = silent or blocked or _tell_silent(what, exc, waited)
            time.sleep(FOLLOW_POLL_S)
            continue
        if blocked or silent:
            sys.stderr.write(f"tenure: {what}: a backend answers again; following\n")
        return answer


def not_running(exc: Exception) -> bool:
    """No backend answers because tenure is not running (everyday.stopped said so)."""
    return isinstance(exc, BackendUnavailable) and exc.data.get("stopped") is not None


def _tell_silent(what: str, exc: Exception, waited: float) -> bool:
    """Once no backend has answered for SAY_AFTER_S (longer than a handoff or a
    restart takes: hung, stopped, or not coming back), say so on stderr with the
    answer's words (which name a backend alive but not answering); whether it was said."""
    if waited < SAY_AFTER_S:
        return False
    msg = getattr(exc, "msg", str(exc))
    sys.stderr.write(f"tenure: {what}: {away(exc, waited)} ({msg}); waiting for one for up "
                     f"to {FOLLOW_OUTAGE:g} s (Ctrl-C ends)\n")
    sys.stderr.flush()
    return True


def away(exc: Exception, waited: float) -> str:
    """What a wait of ``waited`` s for a backend was: a drain for a handoff that takes
    long (it answers, SHUTTING_DOWN: a restart whose stop is slow holds it), or no
    answer at all."""
    if isinstance(exc, ShuttingDown):
        return f"the backend has been draining for a handoff for {waited:.0f} s"
    return f"no backend has answered for {waited:.0f} s"


def _tell_blocked(what: str, exc: Exception) -> bool:
    """Say on stderr that the backend waited for is kept away by a blocked recovery
    (render.blocked, as ``status`` explains it); whether it was said."""
    if not isinstance(exc, BackendUnavailable):
        return False
    from .render import blocked
    stuck = blocked(exc.data.get("diagnostics"))
    if stuck is None:
        return False
    sys.stderr.write(f"tenure: {what}: no backend answers: {stuck}; waiting for one for up "
                     f"to {FOLLOW_OUTAGE:g} s (Ctrl-C ends)\n")
    sys.stderr.flush()
    return True


def read_page(args: Any, call: Callable[..., Any], params: dict[str, Any]) -> Any:
    """One page of the backend's ``logs``. While following (``args.follow``), an owner
    that does not answer is waited for rather than ending the follow: said once on
    stderr, and again when it answers; a backend away is waited out (through_handoffs).
    Raises what ``call`` raises."""
    silent = False
    while True:
        try:
            page = through_handoffs(args.follow, lambda: call(args, "logs", params))
        except OwnerUnavailable as exc:
            if not args.follow:
                raise
            if not silent:
                sys.stderr.write(f"tenure: logs: {_silence(exc)}; following on once it "
                                 "answers (Ctrl-C ends)\n")
                silent = True
            time.sleep(OWNER_WAIT_S)
            continue
        if silent:
            sys.stderr.write("tenure: logs: the owner answers again; following\n")
        return page


def _silence(exc: OwnerUnavailable) -> str:
    """What the backend says of the owner's silence, e.g. 'the owner has not answered
    for 7 s (pid 12 is stopped ...)'."""
    link = exc.data.get("owner_link") or {}
    age = link.get("age")
    text = "the owner does not answer" if not isinstance(age, int | float) or age < 1 \
        else f"the owner has not answered for {age:.0f} s"
    return text + (f" ({link['process']})" if link.get("process") else "")


def _pattern(text: str | None) -> Any:
    if text is None:
        return None
    import re
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:   # a{99999999999}: overflow
        raise BadRequest(f"--grep {text!r} is not a regular expression: {exc}") from None
