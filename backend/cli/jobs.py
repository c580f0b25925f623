"""``tenure job run|list|show|logs|stop|withdraw|resolve``: one-shot jobs.

A submission with ``--key`` is retried with the same key while the backend is away or
its answer is lost (a handoff, a crash): the ledger gives the same record back, so a
retry never makes a second job. Without a key only a request that was certainly not
sent is retried.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from functools import partial

from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    ConnectFailed,
    OutcomeUnknown,
    ShuttingDown,
)

from .exits import Exit
from .logs import FOLLOW_POLL_S, PAGE_RECORDS, line_count, read_page, through_handoffs
from .present import dur, fields, identity, table, value, when

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["add_job_parser", "job_command"]

OK, ERROR, UNSETTLED = Exit.OK, Exit.ERROR, Exit.UNSETTLED
OPEN = ("admitted", "starting", "running")
ACTIONS = ("run", "list", "show", "logs", "stop", "withdraw", "resolve")
_AWAY = (BackendUnavailable, ConnectFailed, ShuttingDown)


def add_job_parser(add: Callable[[str, str], Any]) -> None:
    p = add("job", "one-shot jobs: run, list, show, logs, stop, withdraw, resolve")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("target", nargs="?", help="run: STACK/JOB; list: STACK or STACK/JOB "
                   "(optional); the others: the job id")
    p.add_argument("--key", help="run: the dedup key (the same key gives the same job)")
    p.add_argument("--arg", action="append", default=[], dest="job_args", metavar="ARG",
                   help="run: append ARG to the template's command (repeatable; "
                   "--arg=-x for a leading dash)")
    p.add_argument("--wait", action="store_true", help="run: wait until the job ends")
    p.add_argument("--timeout", type=float, default=None,
                   help="run --wait, stop: give up waiting after this many seconds")
    p.add_argument("--state", help="list: only these states (comma-separated)")
    p.add_argument("--limit", type=int, default=50, help="list: at most this many")
    p.add_argument("-f", "--follow", action="store_true", help="logs: follow until it ends")
    p.add_argument("-n", type=int, default=None, help="logs: the last N lines only")
    p.add_argument("--stream", choices=["stdout", "stderr"], help="logs: one stream")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--started", action="store_true", help="resolve: the start happened")
    g.add_argument("--not-started", action="store_true",
                   help="resolve: the start did not happen; allow a new attempt")
    p.add_argument("--note", default="", help="resolve: what the decision rests on")


def job_command(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    handler = _HANDLERS[args.action]
    if args.action not in ("list",) and not args.target:
        what = "STACK/JOB" if args.action == "run" else "ID"
        raise BadRequest(f"tenure job {args.action} {what}: give the {what.lower()}")
    return handler(args, call, out)


def _id(args: Any) -> int:
    if not str(args.target).isdigit():
        raise BadRequest(f"{args.target!r} is not a job id (a number; see `tenure job list`)")
    return int(args.target)


def _run(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    params = {"template": args.target, "args": list(args.job_args),
              **({"key": args.key} if args.key is not None else {})}   # "": refused
    deadline = time.monotonic() + (args.timeout if args.timeout is not None else 3600.0)
    r = _retrying(lambda: call(args, "job.run", params), deadline, lost_ok=bool(args.key))
    job = r["job"]
    if not args.wait:
        out(args, r, _line(job) + (" (deduplicated: this key's record)"
                                   if r["deduplicated"] else ""))
        return OK
    show = {"id": job["id"]}
    while job["state"] in OPEN and time.monotonic() < deadline:
        time.sleep(0.1)
        job = _retrying(lambda: call(args, "job.show", show), deadline, True)
    r = {**r, "job": job}
    out(args, r, render_show(job) if "history" in job else _line(job))
    if job["state"] in OPEN:
        return UNSETTLED
    return OK if job["state"] == "succeeded" else ERROR


def _retrying(fn: Callable[[], Any], deadline: float, lost_ok: bool) -> Any:
    """``fn()``, again while the backend is away (a request certainly not handled) or,
    with ``lost_ok``, while its answer is lost (safe only for a keyed submission or a
    read). Not when no backend is coming (:func:`_none_coming`): the wait was silent
    for up to an hour."""
    while True:
        try:
            return fn()
        except _AWAY as exc:
            if _none_coming(exc) or time.monotonic() >= deadline:
                raise
        except OutcomeUnknown:
            if not lost_ok or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def _none_coming(exc: Exception) -> bool:
    """Whether no backend comes back by itself: tenure is stopped (neither the guardian
    nor the owner runs), or the guardian gave up recovering one (blocked until the
    operator runs `tenure backend recover`)."""
    if not isinstance(exc, BackendUnavailable):
        return False
    diagnostics = exc.data.get("diagnostics")
    blocked = isinstance(diagnostics, dict) and diagnostics.get("blocked")
    return exc.data.get("stopped") is not None or bool(blocked)


def _list(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.target:
        params["template" if "/" in args.target else "stack"] = args.target
    if args.state:
        params["state"] = args.state
    r = call(args, "job.list", params)
    rows = [[str(j["id"]), j["state"], f"{j['stack']}/{j['template']}", j["key"] or "-",
             str(j["attempt"]), _exit(j), dur(j["duration"]), when(j["submitted_at"])]
            for j in r["jobs"]]
    out(args, r, table(rows, ["ID", "STATE", "TEMPLATE", "KEY", "ATTEMPT", "EXIT",
                               "DURATION", "SUBMITTED"]) if rows else "no jobs")
    return OK


def _show(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    r = call(args, "job.show", {"id": _id(args)})
    out(args, r, render_show(r))
    return OK


def _stop(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    timeout = args.timeout if args.timeout is not None else 60.0
    r = call(args, "job.stop", {"id": _id(args), "timeout": timeout}, timeout=timeout + 30)
    out(args, r, _line(r))
    return OK if r["settled"] else UNSETTLED


def _withdraw(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    r = call(args, "job.withdraw", {"id": _id(args)})
    out(args, r, _line(r))
    return OK


def _resolve(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    if not (args.started or args.not_started):
        raise BadRequest("tenure job resolve ID --started|--not-started: say which the "
                         "evidence shows (`tenure job show ID`)")
    r = call(args, "job.resolve", {"id": _id(args), "started": bool(args.started),
                                   "note": args.note})
    out(args, r, _line(r))
    return OK


def _logs(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    """The job's output, every attempt, a page at a time; ``-n N`` only the last N
    records (the journal's tail, as ``tenure logs`` asks it); ``-f`` on until the job
    ended, through backend handoffs and a silent owner (logs.read_page). Printed as
    ``tenure logs`` prints (logprint: a cut line whole, bytes unchanged when piped).
    Raises BadRequest for a negative ``-n``, and what ``call`` raises."""
    from .logprint import Printer, job_label
    tail = {} if args.n is None else {"tail": line_count(args.n)}
    job = call(args, "job.show", {"id": _id(args)})
    flt = {**job["journal"], **({"stream": args.stream} if args.stream else {})}
    printer = Printer(args.json, None, job_label)
    after = _print_pages(args, call, {**flt, **tail}, printer)
    while args.follow and job["state"] in OPEN:
        time.sleep(FOLLOW_POLL_S)
        after = _print_pages(args, call, {**flt, "after": after}, printer)
        job = through_handoffs(True, partial(call, args, "job.show", {"id": job["id"]}))
    if args.follow:  # what it wrote just before it ended
        _print_pages(args, call, {**flt, "after": after}, printer)
    printer.end()
    return OK


def _print_pages(args: Any, call: Callable[..., Any], params: dict[str, Any],
                 printer: Any) -> int:
    """Print the records ``params`` select up to the journal's end, a page at a time;
    returns the ``after`` that continues from there."""
    while True:
        page = read_page(args, call, {**params, "limit": PAGE_RECORDS})
        printer.page(page["records"])
        params = {**{k: v for k, v in params.items() if k != "tail"}, "after": page["next"]}
        if not page["more"]:
            return int(page["next"])


_HANDLERS: dict[str, Callable[[Any, Callable[..., Any], Callable[..., None]], int]] = {
    "run": _run, "list": _list, "show": _show, "logs": _logs, "stop": _stop,
    "withdraw": _withdraw, "resolve": _resolve}

# -- rendering ----------------------------------------------------------------------------


def _line(j: dict[str, Any]) -> str:
    end = f", {j['outcome']}" if j.get("outcome") else ""
    return (f"job {j['id']} {j['stack']}/{j['template']}: {j['state']}{end}"
            + (f" (exit {_exit(j)})" if j.get("exit_code") is not None or j.get("signal")
               else ""))


def _exit(j: dict[str, Any]) -> str:
    if j.get("signal"):
        return f"signal {j['signal']}"
    return "-" if j.get("exit_code") is None else str(j["exit_code"])


def render_show(j: dict[str, Any]) -> str:
    pairs: list[tuple[str, Any]] = [
        ("key", j["key"]), ("command", shlex.join(j["argv"])),
        ("user", identity(j.get("identity"))),
        ("attempt", f"{j['attempt']}   launch key: {value(j['launch_key'])}"),
        ("pid", f"{value(j['pid'])}   exit: {_exit(j)}"),
        ("submitted", when(j["submitted_at"])), ("started", when(j["started_at"])),
        ("ended", f"{when(j['ended_at'])}   duration: {dur(j['duration'])}")]
    if j.get("waiting_for"):
        pairs.append(("waiting", j["waiting_for"]))
    if j.get("evidence"):
        import json
        pairs.append(("evidence", json.dumps(j["evidence"], sort_keys=True)))
    if j.get("resolution"):
        r = j["resolution"]
        pairs.append(("resolved", f"{'started' if r['started'] else 'not started'} by "
                                  f"{r['by']} at {when(r['at'])}: {value(r['note'])}"))
    lines = [_line(j), fields(pairs, indent="  ")]
    for h in j.get("history", []):
        lines.append(f"  {when(h['at'])}  {h['event']:<14} {h['from'] or '-'} -> {h['to']}")
    return "\n".join(lines)
