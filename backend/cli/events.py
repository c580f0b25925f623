"""``tenure events``: what happened, in order, from the backend's event log.

Without ``-f`` it prints the last ``-n`` events (or those after ``--since``) and stops
at the end the log had when it started. With ``-f`` it goes on printing new events,
across backend handoffs and restarts: while no backend answers, from its first read on,
it waits (up to ``FOLLOW_OUTAGE`` seconds, backend.cli.logs.through_handoffs, which
says at once when a blocked recovery keeps the backend away) and continues after the
last id it printed, so nothing is skipped or printed twice; once tenure is stopped
(`tenure down`: neither the guardian nor the owner runs) it ends there, exit 0.
``--json`` prints one JSON object per line; ``--since ID`` resumes after the last id a
reader saw.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from protocol.errors import BackendUnavailable

from .exits import Exit
from .logs import AWAY, line_count, neutralise, since, through_handoffs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["describe", "follow_events"]

PAGE = 1000
FOLLOW_POLL_S = 0.25


class _Stopped(Exception):
    """tenure was stopped while -f followed: nothing more will be written."""


def describe(e: dict[str, Any]) -> str:
    """One event's words, without its id, time and target."""
    d, kind = e["data"], e["kind"]
    if kind == "state":
        why = f" ({d['reason']})" if d.get("reason") else ""
        return f"{d['from']} → {d['to']}{why}"
    if kind == "exit":
        how = _ended(d)
        left = d.get("left_running")
        return f"pid {d['pid']} {how}" + (" (stopped by tenure)" if d.get("requested") else "") \
            + (f"; {left} process(es) it left running are stopped" if left else "")
    if kind == "restart":
        return f"restart {d['restarts']} (launch generation {d['generation']})"
    if kind == "probe":
        return str(d["text"])
    if kind == "operation":
        extra = f": {d['error']}" if d.get("error") else \
            f" plan {d['plan']} ({', '.join(d.get('stacks') or [])})" if d.get("plan") else ""
        return f"{d['id']} {d['phase']}{extra}"
    if kind == "handoff":
        return f"{d['phase']} (activation {d['activation']}, epoch {d['epoch']})"
    if kind == "queued-config":
        if d.get("outcome") == "rejected":
            why = f": {d['msg']}" if d.get("msg") else ""
            return f"rejected ({d.get('code')}{why}); kept as {d.get('file')}"
        return f"{d.get('request_id')} from {d.get('source')}: {d.get('outcome')}" + \
            (f" as {d['operation']}" if d.get("operation") else "")
    if kind == "lost":
        return f"{d.get('count')} event(s) lost: recorded while the log could not be " \
            "written, beyond what the backend buffers"
    return str(d)


def _ended(d: dict[str, Any]) -> str:
    if d.get("signal"):
        from protocol.signame import signal_name
        return f"killed by {signal_name(d['signal'])}" + (
            " (core dumped)" if d.get("core_dumped") else "")
    if d.get("exit_code") is None:
        return "ended (status unknown)"
    return f"exited {d['exit_code']}"


def _line(e: dict[str, Any], tty: bool) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(e["at"]))
    ms = f".{int(e['at'] * 1000) % 1000:03d}"     # truncated, as localtime truncates
    text = describe(e)
    if tty:
        text = neutralise(text)   # a probe's text carries an app's output
    return f"#{e['id']} {clock}{ms} {e['target'] or '-'} {e['kind']}: {text}"


def _print(args: Any, events: list[dict[str, Any]], tty: bool) -> None:
    import json
    out = sys.stdout
    for e in events:
        out.write((json.dumps(e) if args.json else _line(e, tty)) + "\n")
    out.flush()


def follow_events(args: Any, call: Callable[..., Any]) -> int:
    """Print events as the module says. Raises what ``call`` raises (but a backend away
    while following, which it waits out)."""
    flt: dict[str, Any] = {}
    if args.targets:
        flt["targets"] = args.targets
    if args.kind:
        flt["kinds"] = args.kind
    tty = not args.json and sys.stdout.isatty()
    start = since(args.since, time.time()) or {"tail": _event_count(args.n)}
    page = through_handoffs(args.follow, lambda: call(args, "events.read", {
        **flt, **start, "limit": PAGE}), "events")
    end = page["last_id"]
    while True:
        _say_gap(page)
        _say_lost(page)
        events = page["events"]
        if not args.follow:
            _print(args, [e for e in events if e["id"] <= end], tty)
            if not page["more"] or page["next"] >= end:
                return Exit.OK
        else:
            _print(args, events, tty)
            if not page["more"]:
                time.sleep(FOLLOW_POLL_S)
        try:
            page = _next(args, call, {**flt, "after": page["next"], "limit": PAGE})
        except _Stopped:
            # what the last generation recorded after this reader's last page (its
            # drain, say) is in backend.db: printed from there, nothing skipped
            _print(args, _left_in_file(args, page["next"], flt), tty)
            sys.stderr.write("tenure: events: tenure stopped; -f ends here\n")
            return Exit.OK


def _say_gap(page: dict[str, Any]) -> None:
    """Say on stderr that events this reader asked for were pruned before it read them:
    at its first page (an old ``--since ID``), or at any later one (a follower that fell
    behind by more than the log keeps, a long read while the log grows)."""
    if page.get("gap"):
        sys.stderr.write(f"tenure: events before #{page['first_id']} were pruned "
                         "(the log keeps the newest 100,000)\n")
        sys.stderr.flush()


def _say_lost(page: dict[str, Any]) -> None:
    """Say on stderr that events of this page's range were dropped unwritten (its
    ``lost`` events tell how many, also to a reader whose filters leave them out)."""
    if page.get("lost"):
        sys.stderr.write(f"tenure: {page['lost']} event(s) here were lost: the backend "
                         "could not write its log and its buffer was full (a `lost` "
                         "event marks where)\n")
        sys.stderr.flush()


def _left_in_file(args: Any, after: int, flt: dict[str, Any]) -> list[dict[str, Any]]:
    """The events after id ``after`` that ``flt`` (targets, kinds) keeps, read from
    backend.db (read only) once tenure is stopped, and filtered as the backend filters
    them; [] when it cannot be read (said on stderr: the follower ends as it would
    have)."""
    from backend.events import COLUMNS, event_from_row, wanted
    from backend.targets import select
    from protocol.durable import read_rows

    from .everyday import layout
    try:
        rows = read_rows(layout(args).backend_db, f"SELECT {COLUMNS} FROM events "
                         f"WHERE id > {int(after)} ORDER BY id") or []
    except Exception as exc:   # the file, not the follower, failed: say so, end
        sys.stderr.write(f"tenure: events: could not read what is left in backend.db "
                         f"({type(exc).__name__}: {exc})\n")
        return []
    keys = None   # the instance keys the targets name, as the backend resolves them
    if flt.get("targets"):
        seen = {row[3] for row in rows if row[3]}
        keys = {k for t in flt["targets"] for k in select(seen, t)}
    kinds = set(flt["kinds"]) if flt.get("kinds") else None
    return [event_from_row(row) for row in rows if wanted(row, keys, kinds)]


KEPT = 100_000   # the newest events the backend keeps (backend.events.KEEP)


def _event_count(n: int) -> int:
    """``-n N`` checked: 0 to KEPT (the API's bound, in the option's words). Raises
    BadRequest."""
    if line_count(n) > KEPT:
        from protocol.errors import BadRequest
        raise BadRequest(f"-n {n}: the event log keeps the newest {KEPT:,}; give at most "
                         f"{KEPT}", {"field": "n"})
    return n


def _next(args: Any, call: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """The next page; with -f a backend that is away (a handoff, a restart) is waited
    for, then asked again from the same id. Raises _Stopped once tenure is stopped."""
    def ask() -> dict[str, Any]:
        try:
            page: dict[str, Any] = call(args, "events.read", params)
            return page
        except AWAY as exc:
            if args.follow and _tenure_stopped(args, exc):
                raise _Stopped from None
            raise
    answer: dict[str, Any] = through_handoffs(args.follow, ask, "events")
    return answer


def _tenure_stopped(args: Any, exc: Exception) -> bool:
    """Whether tenure is stopped (no guardian nor owner runs), not between generations."""
    if isinstance(exc, BackendUnavailable) and exc.data.get("stopped") is not None:
        return True
    from .everyday import layout, stopped
    return stopped(layout(args)) is not None

