"""``tenure logs``: read the owner's journal through the backend, page by page.

Pages are bounded by the owner (a record count and a byte budget) and printed as they
come, so ``-n 100000`` of long lines never holds more than a page. On a terminal, control
characters in application output (escape sequences, carriage returns) are shown as
``\\xNN`` instead of being interpreted: an app must not be able to move the cursor,
recolour, retitle or rewrite what the operator sees.

A follower outlives a silent owner (stopped, busy, being restarted): it says once on
stderr that it waits and why, asks again every OWNER_WAIT_S, and says when the owner
answers again; the lines captured meanwhile then follow, none skipped. It outlives a
backend handoff (``tenure backend upgrade``) and a backend restart the same way, without
a word: :func:`through_handoffs`, which every follower of the backend shares.
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

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["AWAY", "FOLLOW_OUTAGE", "follow_logs", "neutralise", "read_page", "since",
           "through_handoffs"]

STREAM_MARK = {"stdout": "", "stderr": " (stderr)"}
TENURE_FLAG = 4
"""Journal flag of a line tenure wrote into the app's stream (owner.notes.TENURE): shown
with the mark `` (tenure)``, which app output cannot produce (it always follows ``: ``)."""
TENURE_PREFIX = "tenure: "
PAGE_RECORDS = 10_000
FOLLOW_POLL_S = 0.2
OWNER_WAIT_S = 1.0   # a follower asks again this often while the owner is silent
FOLLOW_OUTAGE = 120.0   # seconds a follower waits for a backend before giving up
AWAY = (BackendUnavailable, ShuttingDown, TooManyConnections, TransportLost)
"""A backend between generations (a handoff, a restart), not one that failed: what a
follower waits out (INTERNAL is not). Followers only read, and a read asked again
changes nothing, so one whose connection broke (TRANSPORT_LOST) is asked again too."""

# C0 controls but TAB, DEL, and C1 controls (a decoded 0x9b is CSI on many terminals).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}


def neutralise(text: str) -> str:
    """``text`` with every terminal control character written out as ``\\xNN``."""
    return text.translate(_CONTROLS)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since(text: str | None, now: float) -> dict[str, Any]:
    """``--since`` → the API's ``after`` (a record id) or ``since_time`` (wall clock).
    Accepts ``42`` (an id), ``90s``/``10m``/``2h``/``1d`` (that long ago), ``14:05`` or
    ``14:05:30`` (today, local time) and ISO dates (``2026-12-01T14:05``, local unless
    it names a zone). Raises BadRequest."""
    if text is None:
        return {}
    t = text.strip()
    if t.isdigit():
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
    return {"since_time": max(when.timestamp(), 0.0)}


def _print(args: Any, recs: list[dict[str, Any]], tty: bool, grep: Any) -> None:
    import json
    out = sys.stdout
    for r in recs:
        data = r["data"].decode(errors="replace")
        if grep is not None and not grep.search(data):
            continue
        if args.json:
            out.write(json.dumps({**r, "data": data}) + "\n")
        else:
            if tty:
                data = neutralise(data)
            mark = STREAM_MARK.get(r["stream"], "")
            if r.get("flags", 0) & TENURE_FLAG:
                mark, data = " (tenure)", data.removeprefix(TENURE_PREFIX)
            out.write(f"{r['stack']}/{r['app']}/{r['instance']}{mark}: {data}\n")
    out.flush()


def follow_logs(args: Any, call: Callable[..., Any]) -> int:
    """Print the last ``args.n`` records (or those after ``args.since``), then, with
    ``args.follow``, every new one. Without it, stops at the journal's end as it was
    when the command started. Raises what ``call`` raises."""
    tail = line_count(args.n)
    flt: dict[str, Any] = {"stream": args.stream} if args.stream else {}
    if args.targets:
        flt["targets"] = args.targets
    tty = not args.json and sys.stdout.isatty()
    grep = _pattern(args.grep)
    start = since(args.since, time.time()) or {"tail": tail}
    page = read_page(args, call, {**flt, **start, "limit": PAGE_RECORDS})
    end = page["last_id"]
    while True:
        recs = page["records"]
        if not args.follow and recs and recs[-1]["id"] > end:
            _print(args, [r for r in recs if r["id"] <= end], tty, grep)
            return Exit.OK
        _print(args, recs, tty, grep)
        if not page["more"]:
            if not args.follow:
                return Exit.OK
            time.sleep(FOLLOW_POLL_S)
        page = read_page(args, call, {**flt, "after": page["next"], "limit": PAGE_RECORDS})


def line_count(n: int) -> int:
    """``-n N`` checked: a count of lines, 0 or more. Raises BadRequest."""
    if n < 0:
        raise BadRequest(f"-n {n}: give a number of lines, 0 or more", {"field": "n"})
    return n


def through_handoffs(follow: bool, ask: Callable[[], Any]) -> Any:
    """``ask()``, a read; with ``follow`` asked again every FOLLOW_POLL_S while the
    backend is away (AWAY), for at most FOLLOW_OUTAGE seconds. Raises what ``ask``
    raises: an AWAY error at once without ``follow``, after FOLLOW_OUTAGE with it."""
    deadline = time.monotonic() + FOLLOW_OUTAGE
    while True:
        try:
            return ask()
        except AWAY:
            if not follow or time.monotonic() > deadline:
                raise
            time.sleep(FOLLOW_POLL_S)


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
    except re.error as exc:
        raise BadRequest(f"--grep {text!r} is not a regular expression: {exc}") from None
