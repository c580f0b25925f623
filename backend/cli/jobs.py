"""``tenure job run|list|show|logs|stop|withdraw|resolve``: one-shot jobs.

A submission with ``--key`` is retried with the same key while the backend is away or
its answer is lost (a handoff, a crash): the ledger gives the same record back, so a
retry never makes a second job. Without a key only a request that was certainly not
sent is retried.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from functools import partial

from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    ConnectFailed,
    OutcomeUnknown,
    ShuttingDown,
    TenureError,
)

from .exits import Exit
from .logs import (
    FOLLOW_POLL_S,
    PAGE_RECORDS,
    line_count,
    not_running,
    read_page,
    through_handoffs,
)
from .present import dur, fields, identity, neutralise, table, value, when

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["add_job_parser", "job_command", "none_coming"]

OK, ERROR, UNSETTLED = Exit.OK, Exit.ERROR, Exit.UNSETTLED
OPEN = ("admitted", "starting", "running")
ACTIONS = ("run", "list", "show", "logs", "stop", "withdraw", "resolve")
_AWAY = (BackendUnavailable, ConnectFailed, ShuttingDown)
KEYED_WAIT = 3600.0     # s a keyed `run` goes on asking a backend away (default)
UNKEYED_WAIT = 60.0     # s one without a key does: a handoff, a restart of the backend
RUN_WAIT = 3600.0       # s `run --wait` waits for the job to end, from its admission (default)


# the options of each action (dest: its default), as docs/cli.md gives them; another
# action's option is a usage error, not silently ignored
_DEFAULTS: dict[str, Any] = {"key": None, "job_args": [], "wait": False, "timeout": None,
                             "state": None, "limit": 50, "follow": False, "n": None,
                             "stream": None, "started": False, "not_started": False,
                             "note": ""}
_OPTIONS = {"run": ("key", "job_args", "wait", "timeout"), "list": ("state", "limit"),
            "show": (), "logs": ("follow", "n", "stream"), "stop": ("timeout",),
            "withdraw": (), "resolve": ("started", "not_started", "note")}
_SPELLED = {"job_args": "--arg", "follow": "-f", "n": "-n", "not_started": "--not-started"}


def add_job_parser(add: Callable[[str, str], Any]) -> None:
    import argparse  # already loaded: only the parser of `job` is made here
    none = argparse.SUPPRESS   # absent unless given: _own_options tells given from default
    p = add("job", "one-shot jobs: run, list, show, logs, stop, withdraw, resolve")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("target", nargs="?", help="run: STACK/JOB; list: STACK or STACK/JOB "
                   "(optional); the others: the job id")
    p.add_argument("--key", default=none,
                   help="run: the dedup key (the same key gives the same job)")
    p.add_argument("--arg", action="append", default=none, dest="job_args", metavar="ARG",
                   help="run: append ARG to the template's command (repeatable; "
                   "--arg=-x for a leading dash)")
    p.add_argument("--wait", action="store_true", default=none,
                   help="run: wait until the job ends")
    p.add_argument("--timeout", type=float, default=none,
                   help="run (how long to ask a backend that is away: 3600 s with "
                   "--key, 60 without), run --wait (how long to wait for the job to "
                   "end, from its admission: 3600 s), stop: give up waiting after this "
                   "many seconds")
    p.add_argument("--state", default=none, help="list: only these states (comma-separated)")
    p.add_argument("--limit", type=int, default=none, help="list: at most this many (50)")
    p.add_argument("-f", "--follow", action="store_true", default=none,
                   help="logs: follow until it ends")
    p.add_argument("-n", type=int, default=none, help="logs: the last N lines only")
    p.add_argument("--stream", choices=["stdout", "stderr"], default=none,
                   help="logs: one stream")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--started", action="store_true", default=none,
                   help="resolve: the start happened")
    g.add_argument("--not-started", action="store_true", default=none,
                   help="resolve: the start did not happen; allow a new attempt")
    p.add_argument("--note", default=none, help="resolve: what the decision rests on")
    p.check_parsed = _own_options


def _own_options(ns: Any) -> str | None:
    """The usage error for options ``ns`` was given that are not its action's
    (_OPTIONS), else None, with the defaults of those not given filled in."""
    foreign = [_SPELLED.get(dest, "--" + dest) for dest in _DEFAULTS
               if hasattr(ns, dest) and dest not in _OPTIONS[ns.action]]
    for dest, default in _DEFAULTS.items():
        if not hasattr(ns, dest):
            setattr(ns, dest, list(default) if isinstance(default, list) else default)
    if not foreign:
        return None
    own = ", ".join(_SPELLED.get(dest, "--" + dest.replace("_", "-"))
                    for dest in _OPTIONS[ns.action]) or "none"
    return (f"{', '.join(foreign)}: not an option of `tenure job {ns.action}` (its "
            f"options: {own})")


def job_command(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    handler = _HANDLERS[args.action]
    if args.action not in ("list",) and not args.target:
        what = "STACK/JOB" if args.action == "run" else "ID"
        raise BadRequest(f"tenure job {args.action} {what}: give the {what.lower()}")
    return handler(args, call, out)


def _id(args: Any) -> int:
    from .main import WIRE_INT_MAX
    text = str(args.target)
    if not (text.isascii() and text.isdigit()) or int(text) > WIRE_INT_MAX:
        raise BadRequest(f"{args.target!r} is not a job id (a number; see `tenure job list`)")
    return int(text)


def _target(text: str, what: str, stack_alone: bool = False) -> str:
    """``text`` checked as STACK/JOB (or, with ``stack_alone``, a STACK), names as the
    config spells them (config_values.NAME_RE): a malformed one is refused before any
    daemon is asked, as a malformed target is. Raises BadRequest."""
    from backend.config_values import NAME_RE
    parts = text.split("/")
    if len(parts) > 2 or (len(parts) == 1 and not stack_alone) or \
            not all(NAME_RE.fullmatch(part) for part in parts):
        form = "STACK or STACK/JOB" if stack_alone else "STACK/JOB"
        raise BadRequest(f"tenure job {what} {text!r}: give the job template as {form} "
                         "(names of 1-64 letters, digits, '_', '.' or '-'; `tenure job "
                         "list` shows them)", {"field": "template", "target": text})
    return text


def _run(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    params = {"template": _target(args.target, "run"), "args": list(args.job_args),
              **({"key": args.key} if args.key is not None else {})}   # "": refused
    # with a key the submission is safe to ask again however long the backend is away;
    # without one, a request certainly not handled is asked again through a handoff,
    # not for an hour (a stopped backend: BACKEND_UNAVAILABLE, as any other command)
    wait = args.timeout if args.timeout is not None else \
        KEYED_WAIT if args.key is not None else UNKEYED_WAIT
    deadline = time.monotonic() + wait
    held = Held(args)
    r = _retrying(args, lambda: call(args, "job.run", params), deadline,
                  lost_ok=bool(args.key), held=held)
    job = r["job"]
    dedup = " (deduplicated: this key's record)" if r["deduplicated"] else ""
    if not args.wait:
        out(args, r, _line(job) + dedup)
        return OK
    # the wait for the job's end is its own, counted from the admission: the submission's
    # (a minute without a key) is how long to ask a backend that is away, not how long
    # a job may run before `--wait` gives up on it
    deadline = time.monotonic() + (args.timeout if args.timeout is not None else RUN_WAIT)
    show = {"id": job["id"]}
    while True:   # shown at least once: run answers without the history
        if job["state"] in OPEN:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        try:
            # a stopped backend takes a call's whole timeout: not past the wait's end
            job = _retrying(args, lambda: call(args, "job.show", show, timeout=max(
                1.0, deadline - time.monotonic())), deadline, True, held, job["id"])
        except (*_AWAY, OutcomeUnknown) as exc:
            return _lost(args, out, {**r, "job": job}, exc, deadline, dedup)
        if job["state"] not in OPEN:
            break
    r = {**r, "job": job}
    out(args, r, (render_show(job) if "history" in job else _line(job)) + dedup)
    if job["state"] in OPEN:
        return UNSETTLED
    return OK if job["state"] == "succeeded" else ERROR


def _lost(args: Any, out: Callable[..., None], r: dict[str, Any], exc: TenureError,
          deadline: float, dedup: str) -> int:
    """`run --wait` whose job was admitted (``r["job"]``, as last seen) and whose backend
    was lost (``exc``): at the deadline, exit 4 (UNSETTLED) naming the job, which goes
    on (``--json``: ``settled`` false, ``error``); before it (none is coming), ``exc``
    raised with the job named and in its data. Either way a script learns the job's id
    and that it was admitted: asking again without --key would run it twice."""
    job = r["job"]
    follow = f"job {job['id']} goes on: `tenure job show {job['id']}` follows it"
    if time.monotonic() < deadline:
        raise type(exc)(f"{exc.msg}; {follow} once a backend answers",
                        {**exc.data, "job": job}) from None
    out(args, {**r, "settled": False, "error": exc.to_wire()},
        f"{_line(job)}{dedup}\n  no backend answered until --timeout ({exc}): {follow}")
    return UNSETTLED


def _retrying(args: Any, fn: Callable[[], Any], deadline: float, lost_ok: bool,
              held: Held | None = None, job_id: int | None = None) -> Any:
    """``fn()``, again while the backend is away (a request certainly not handled) or,
    with ``lost_ok``, while its answer is lost (safe only for a keyed submission or a
    read). Not when no backend is coming (:func:`none_coming`): the wait was silent
    for up to an hour. A backend that is stopped is said once (``held``)."""
    while True:
        try:
            return fn()
        except _AWAY as exc:
            if time.monotonic() >= deadline:
                raise
            final = none_coming(args, exc)
            if final is exc:
                raise
            if final is not None:
                raise final from None
            if held is not None:
                held.went(exc, job_id)
        except OutcomeUnknown:
            if not lost_ok or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def none_coming(args: Any, exc: Exception) -> BackendUnavailable | None:
    """``exc`` when it is a BACKEND_UNAVAILABLE that says no backend comes back by
    itself (nobackend.none_coming: tenure is stopped, the guardian's recovery is
    blocked, or the guardian is not running and nothing restarts it), which is the
    error to end the wait with; else None. Its message says why and what to run."""
    if not isinstance(exc, BackendUnavailable):
        return None
    data = exc.data
    if "none_coming" not in data:   # not from everyday.call: what it carries tells
        from .nobackend import none_coming as said_none_coming
        return exc if said_none_coming(data) else None
    return exc if data["none_coming"] else None


class Held:
    """Says once on stderr that the backend is stopped (alive, so the guardian does not
    replace it: the wait goes on, up to --timeout, until it is continued), naming the
    job already admitted, which goes on then. The wait was silent for up to an hour."""

    def __init__(self, args: Any) -> None:
        self.args, self.said = args, False

    def went(self, exc: Exception, job_id: int | None) -> None:
        if self.said:
            return
        from .render_backend import stopped_backend
        held = stopped_backend(getattr(exc, "data", {}).get("diagnostics"))
        if held is None:
            return
        self.said = True
        goes_on = "" if job_id is None else f"; job {job_id} goes on once it is continued"
        print(f"tenure: job {self.args.action}: no backend answers: the backend {held}; "
              f"waiting for it up to --timeout (Ctrl-C stops waiting{goes_on})",
              file=sys.stderr)


def _list(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.target is not None:
        target = _target(args.target, "list", stack_alone=True)
        params["template" if "/" in target else "stack"] = target
    if args.state is not None:   # "" too: the backend names the states
        params["state"] = args.state
    r = call(args, "job.list", params)
    out(args, r, render_list(r))
    return OK


def render_list(r: dict[str, Any]) -> str:
    """The answer of ``job.list`` as a table, and where a list cut at its size stops."""
    rows = [[str(j["id"]), j["state"], f"{j['stack']}/{j['template']}", j["key"] or "-",
             str(j["attempt"]), _exit(j), dur(j["duration"]), when(j["submitted_at"])]
            for j in r["jobs"]]
    text = table(rows, ["ID", "STATE", "TEMPLATE", "KEY", "ATTEMPT", "EXIT", "DURATION",
                        "SUBMITTED"]) if rows else "no jobs"
    if r.get("more"):   # a backend of before 'more' never cuts
        text += (f"\n(the list stops at job {r['jobs'][-1]['id']}: the answer holds at "
                 "most 2 MiB of records; narrow it with a target, --state or --limit)")
    return text


def _show(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    r = call(args, "job.show", {"id": _id(args)})
    out(args, r, render_show(r))
    return OK


def _stop(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    timeout = args.timeout if args.timeout is not None else 60.0
    r = call(args, "job.stop", {"id": _id(args), "timeout": timeout}, timeout=timeout + 30)
    out(args, r, _line(r) if r["settled"] else _unsettled_stop(r, timeout))
    return OK if r["settled"] else UNSETTLED


def _unsettled_stop(j: dict[str, Any], timeout: float) -> str:
    """A stop asked that the job has not ended by within ``timeout``: what goes on, and
    what the exit status 4 means."""
    return (f"{_line(j)}\n  the stop was asked and is still under way: the owner stops it "
            "by its stop policy (TERM, then SIGKILL after 10 s); it had not ended within "
            f"--timeout {timeout:g} s, so the exit status is 4 (not settled). `tenure job "
            f"show {j['id']}` shows when it ends")


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
    out(args, r, render_resolved(r))
    return OK


def _logs(args: Any, call: Callable[..., Any], out: Callable[..., None]) -> int:
    """The job's output, every attempt, a page at a time; ``-n N`` only the last N
    records (the journal's tail, as ``tenure logs`` asks it); ``-f`` on until the job
    ended, through backend handoffs and a silent owner (logs.read_page). Printed as
    ``tenure logs`` prints (logprint: a cut line whole, bytes unchanged when piped).
    While tenure is not running, or once it stopped under a follower, the journal
    file is read as ``tenure logs`` reads it (offline_logs.Fallback), and said so.
    Raises BadRequest for a negative ``-n``, and what ``call`` raises."""
    from .logprint import Printer, job_label
    from .offline_logs import FollowEnded
    tail = {} if args.n is None else {"tail": line_count(args.n)}
    job_id = _id(args)
    read = _journal(args, call)
    try:
        job = call(args, "job.show", {"id": job_id})
    except BackendUnavailable as exc:
        if not not_running(exc):
            raise
        job = {"id": job_id, "state": None, "journal": read.job_source(args, job_id)}
    flt = {**job["journal"], **({"stream": args.stream} if args.stream else {})}
    printer = Printer(args.json, None, job_label)
    try:
        after = _print_pages(args, read, {**flt, **tail}, printer)
        while args.follow and job["state"] in OPEN:
            time.sleep(FOLLOW_POLL_S)
            after = _print_pages(args, read, {**flt, "after": after}, printer)
            try:
                job = through_handoffs(True, partial(call, args, "job.show", {"id": job_id}))
            except BackendUnavailable as exc:
                if not not_running(exc):
                    raise
                break   # tenure stopped: the rest is read from the file, below
        if args.follow and job["state"] is not None:   # what it wrote just before it ended
            _print_pages(args, read, {**flt, "after": after}, printer)
    except FollowEnded:   # tenure stopped under the follower: the file was read to its end
        pass
    finally:
        printer.end()
    return OK


def _journal(args: Any, call: Callable[..., Any]) -> Any:
    """The reader of the journal for ``job logs``: the backend's ``logs``, or the file
    once tenure is not running (offline_logs.Fallback)."""
    from .everyday import layout
    from .offline_logs import Fallback
    return Fallback(call, layout(args), "job logs", "the job")


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


def render_resolved(j: dict[str, Any]) -> str:
    """The answer of ``job resolve``: the record's line; for one the owner's evidence
    settled (its resolution has ``proof``) rather than the decision, what it shows."""
    proof = (j.get("resolution") or {}).get("proof")
    if not isinstance(proof, dict):
        return _line(j)
    return (f"{_line(j)}\n  settled from the owner's evidence ({proof.get('shows')}), "
            f"not from the decision: pid {value(j['pid'])}   exit: {_exit(j)}")


def _resolution(r: dict[str, Any]) -> str:
    """How an uncertain start was resolved: the operator's decision, or the owner's
    evidence that settled it (``proof``; records from before it have none)."""
    said = "started" if r["started"] else "not started"
    proof = r.get("proof")
    if isinstance(proof, dict):
        said += f", settled from the owner's evidence ({proof.get('shows')}),"
    note = f": {r['note']}" if r.get("note") else ""
    return f"{said} by {r['by']} at {when(r['at'])}{note}"


def render_show(j: dict[str, Any]) -> str:
    pairs: list[tuple[str, Any]] = [
        ("key", j["key"]), ("command", shlex.join(j["argv"])),
        ("user", identity(j.get("identity"))),
        ("attempt", f"{j['attempt']}   launch key: {value(j['launch_key'])}"),
        ("pid", f"{value(j['pid'])}   exit: {_exit(j)}"),
        *([("due", when(j["due_at"]))] if j.get("due_at") is not None else []),
        ("submitted", when(j["submitted_at"])), ("started", when(j["started_at"])),
        ("ended", f"{when(j['ended_at'])}   duration: {dur(j['duration'])}")]
    if j.get("waiting_for"):
        pairs.append(("waiting", j["waiting_for"]))
    if j.get("evidence"):
        import json
        pairs.append(("evidence", json.dumps(j["evidence"], sort_keys=True)))
    if j.get("resolution"):
        pairs.append(("resolved", _resolution(j["resolution"])))
    lines = [_line(j), fields(pairs, indent="  ")]
    for h in j.get("history", []):
        lines.append(f"  {when(h['at'])}  {h['event']:<14} {h['from'] or '-'} -> {h['to']}"
                     + _left_behind(h.get("detail")))
    # its key, arguments and notes came through the API: none drives the terminal
    return "\n".join(map(neutralise, "\n".join(lines).split("\n")))


def _left_behind(detail: Any) -> str:
    """What a history row of an exit says about processes that outlived the job's leader
    (its ``detail.descendants``, docs/jobs.md); nothing when none did."""
    n = detail.get("descendants") if isinstance(detail, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return ""
    return f"   outlived by {n} process{'' if n == 1 else 'es'}, which tenure stops"
