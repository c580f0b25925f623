"""Human-readable output of the CLI (``--json`` prints the raw answers instead)."""

from __future__ import annotations

import time

from .present import (
    colour_for,
    dur,
    fields,
    identity,
    neutralise,
    paint,
    percent,
    size,
    span,
    table,
    value,
)
from .render_backend import (
    backend,
    not_answering,
    owner,
    owner_link,
    pruned,
    recover_plan,
    recovery_state,
    uncertifiable,
    why_silent,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["backend", "blocked", "down", "inspect", "instances", "operation", "operations",
           "owner", "owner_link", "plan", "pruned", "recover_plan", "recovery_state", "stack",
           "status", "uncertifiable", "unfinished_window", "up", "why"]


DEFAULT_LOG_RETENTION = "64 MiB"   # what the owner's journal keeps of an app (owner.journal)


_PIPES = ("/dev/fd/", "/proc/self/fd/", "/dev/stdin")   # a config given as `<(generate)`


def _config_label(source: str | None) -> str:
    """Where the applied config came from, as the header says it: its path, and for a
    pipe (whose path names nothing once the command ended) that it was one."""
    if not source:
        return "-"
    return f"{source} (read from a pipe: no file)" if source.startswith(_PIPES) else source


def status(st: dict[str, Any]) -> str:
    b = st["backend"]
    head = (f"backend {b['activation']} epoch {b['epoch']} pid {b['pid']}"
            f"{' (draining)' if b['draining'] else ''}; config {_config_label(b['config'])}")
    link = st.get("owner_link")
    if link is not None:
        head += "\n" + owner_link(link)
    hung = st.get("guardian_hung") or _trouble(st.get("guardian"))
    if hung:
        head += "\n" + paint(f"guardian: NOT ANSWERING: {_hung_line(hung)}", "red")
    elif st.get("guardian_running") is False:
        head += "\n" + paint("guardian: NOT RUNNING: a backend crash would not be "
                             "recovered; `tenure up` starts it (applications keep "
                             "running)", "red")
    head += unfinished_window(st.get("maintenance_unfinished"))
    rows, tints = [], []
    for r in st["apps"]:
        state = _row_state(r)
        rows.append([r["key"], state, value(r["pid"]), dur(r["uptime"]), str(r["restarts"]),
                     value(r["ready"]), percent(r["cpu_percent"]), size(r["rss"]), _detail(r)])
        tints.append([None, colour_for(state), *[None] * 7])
    stopped = [s for s, v in st.get("intents", {}).items() if v.get("intent") == "stopped"]
    tail = f"\nstopped stacks: {', '.join(sorted(stopped))}" if stopped else ""
    dropped = {f"{r['stack']}/{r['app']}": r["log_dropped"] for r in st["apps"]
               if r.get("log_dropped")}
    failing = st.get("log_write_error")
    # the owner's word as it last answered: once the link is lost it may be long gone
    if failing and (st.get("owner_link") or {}).get("state", "connected") == "connected":
        tail += "\n" + paint(f"the owner's journal cannot write since "
                             f"{_clock(failing['since'])} ({failing['error']}): log lines "
                             "are dropped", "red")
    uncertified = st.get("certificate_write_error")
    if uncertified:
        tail += "\n" + paint(
            f"the recovery certificate cannot be written since {_clock(uncertified['since'])} "
            f"({uncertified['error']}): a backend crash now waits for `tenure backend "
            "recover` (docs/recover.md)", "red")
    if st.get("log_retention_unsupported"):
        tail += "\n" + paint(f"the owner predates log_retention: every app keeps the default "
                             f"{DEFAULT_LOG_RETENTION} of output until the owner runs this "
                             "release (`tenure owner upgrade`)", "yellow")
    if dropped:
        tail += "\nlog lines dropped (the journal's queue was full, or it could not "\
            "write): " + ", ".join(f"{app} {n}" for app, n in sorted(dropped.items()))
    unrecorded = [r["key"] for r in st["apps"] if r.get("unrecorded")]
    if unrecorded:
        tail += "\n" + paint("launches the owner could not record (a storage error; they "
                             "are watched, see `tenure owner status`): ", "red") + \
            ", ".join(unrecorded)
    tail += _jobs_line(st.get("jobs") or {})
    tail += _QUEUED.get(st.get("queued_config") or "", "")
    tail += _sockets_lines(st.get("sockets") or [], st.get("fd_store") or [])
    if not rows:
        return head + "\nno applications" + tail
    return head + "\n" + table(rows, ["APP", "STATE", "PID", "UPTIME", "RESTARTS", "READY",
                                     "CPU", "MEM", "DETAIL"], tints) + \
        _counted([r["state"] for r in st["apps"]]) + tail


SUMMED_FROM = 20
"""Instances from which status adds a line counting them by state (a table of hundreds
said nothing of how many failed but by reading every row)."""


def _counted(states: list[str]) -> str:
    """``\\n4000 instances: 3990 ready, 8 backoff, 2 failed`` (states by how many), or
    "" below SUMMED_FROM."""
    if len(states) < SUMMED_FROM:
        return ""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    each = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"\n{len(states)} instances: " + ", ".join(
        paint(f"{n} {state}", colour_for(state)) for state, n in each)


def _clock(t: float) -> str:
    return time.strftime('%H:%M:%S', time.localtime(t))


_QUEUED = {
    "waiting": "\nconfig queued by `tenure up`: not applied yet (this backend "
               "takes it every 0.5 s)",
    "rejected": "\nconfig queued by `tenure up` was rejected: `tenure events "
                "--kind queued-config` says why (kept as backend/queued-config.rejected.json)",
}


def _detail(r: dict[str, Any], told: bool = True) -> str:
    """What the state alone does not say (why it failed, what it waits for, when a
    backing-off instance starts again), else (with ``told``) what the app says it does
    (its ``STATUS=``), or ""."""
    if r.get("next_start_in") is not None and r["state"] != "unknown":
        due = f"next start in {dur(r['next_start_in'])}"
        return f"{r['reason']}; {due}" if r.get("reason") else due
    if r.get("reason") and r["state"] != "unknown":
        return str(r["reason"])
    detail = r.get("detail")
    if detail and detail != r["state"] and r["state"] != "unknown":
        return str(detail)
    return _told(r.get("status_text"), STATUS_TEXT_CUT) if told else ""


STATUS_TEXT_CUT = 60
"""Characters of an app's ``STATUS=`` status's DETAIL shows (inspect: all of it)."""


def _told(text: Any, cut: int | None = None) -> str:
    """An app's ``STATUS=`` text in quotes (its own words), cut to ``cut`` characters
    with ``...``; "" for none."""
    if not isinstance(text, str) or not text:
        return ""
    return f'"{text[:cut - 3]}..."' if cut is not None and len(text) > cut else f'"{text}"'


def _sockets_lines(socks: list[dict[str, Any]], stores: list[dict[str, Any]]) -> str:
    """Held sockets (address, inode, accept queue/limit where the kernel reports it) and
    stored fds, after the apps."""
    rows = [[f"{s['stack']}/{s['app']}", s["name"], s["listen"], str(s["inode"]),
             "-" if s.get("queued") is None else f"{s['queued']}/{s['queue_limit']}"]
            for s in socks]
    out = ("\nsockets held by the owner:\n" + "\n".join(
        "  " + ln for ln in table(rows, ["APP", "SOCKET", "LISTEN", "INODE", "QUEUE"])
        .splitlines())) if rows else ""
    for st in stores:
        out += (f"\nstored fds of {st['stack']}/{st['app']}/{st['instance']}: "
                f"{_stored_fds(st['fds'])}")
    return out


def _row_state(r: dict[str, Any]) -> str:
    if r["state"] != "unknown":
        return str(r["state"])
    return f"unknown (last seen {r['last_state']} {dur(r['last_seen_age'])} ago)"


def _jobs_line(jobs: dict[str, int]) -> str:
    """``jobs: 2 running, 1 admitted`` and, loudly, records that wait for the operator."""
    parts = [f"{jobs[s]} {s}" for s in ("running", "starting", "admitted") if jobs.get(s)]
    line = f"\njobs: {', '.join(parts)}" if parts else ""
    if jobs.get("recovery_required"):
        line += (f"\njobs: {jobs['recovery_required']} recovery_required: see `tenure job "
                 "list --state recovery_required` and docs/jobs.md")
    return line


def unfinished_window(window: dict[str, Any] | None) -> str:
    """The line for an owner maintenance window that is not done (``{step[, running]}``:
    under way, or stopped), or ''."""
    if not window:
        return ""
    if window.get("running"):
        return "\n" + paint(f"owner maintenance window RUNNING (`tenure owner upgrade`, pid "
                            f"{window['running']}, step {window['step']} done): the apps "
                            "it stopped start again as it ends", "yellow")
    return "\n" + paint(f"owner maintenance window UNFINISHED (stopped after step "
                        f"{window['step']}): `tenure owner upgrade --continue` finishes "
                        "it", "red")


def _trouble(guardian: dict[str, Any] | None) -> dict[str, Any] | None:
    """The backend's word on a guardian that is stopped, as a hung guardian's (one that
    is gone is said by the line for a guardian that is not running)."""
    if not guardian or guardian.get("gone"):
        return None
    return {"pid": guardian["pid"], "msg": guardian["problem"]}


def _hung_line(hung: dict[str, Any]) -> str:
    # `tenure down` would stop the owner and every application with it
    return (f"{hung['msg']}; a backend crash would not be recovered; `kill {hung['pid']}` "
            f"(`kill -9 {hung['pid']}` if it does not end), then `tenure up`: the "
            "applications keep running")


def _held_owner(held: dict[str, Any]) -> str:
    """The owner is stopped (SIGSTOP, a debugger) and the guardian is not running: what
    continuing it does. With a SIGTERM waiting in it (a `tenure down` asked it to stop)
    it shuts down once continued, stopping every application; `tenure up` refuses
    while it does not answer."""
    pid = held["pid"]
    if held.get("term_pending"):
        from .holders import term_waiting
        said = term_waiting(pid).removeprefix(f"pid {pid} ")
        return f"the guardian is not running, and the owner (pid {pid}) {said}"
    return (f"the guardian is not running, and the owner (pid {pid}) is stopped (SIGSTOP "
            f"or a debugger): kill -CONT {pid} continues it, then `tenure up` starts the "
            "guardian (the applications keep running)")


def no_backend(diag: dict[str, Any] | None, start: dict[str, Any] | None,
               down: dict[str, Any] | None = None,
               hung: dict[str, Any] | None = None, guardian_running: bool | None = None,
               going: tuple[int | None, int | None] = (None, None),
               starting: int | None = None, held: dict[str, Any] | None = None,
               managed: bool | None = None) -> str:
    """`status` when no backend answers: why (:func:`why_none`) and, when the last
    background start of `tenure up --no-wait` failed, its error."""
    text = "backend: not available" + why_none(diag, down, hung, guardian_running, going,
                                                 starting, held, managed)
    if start is not None and not start["ok"] and starting is None:   # not of this start
        text += (f"\nthe background start of `tenure up --no-wait` at {start['at']} "
                 f"failed: {start['error']} (logs/up.log)")
    return text


def _facts(said: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments of :func:`why_none` from nobackend.facts (or the ``data`` of a
    BACKEND_UNAVAILABLE, which may hold fewer of them)."""
    return (said.get("diagnostics"), said.get("stopped"), said.get("guardian_hung"),
            said.get("guardian_running"),
            (said.get("owner_shutting_down"), said.get("down_running")),
            said.get("up_running"), said.get("owner_stopped"), said.get("service_managed"))


def no_backend_of(said: dict[str, Any], start: dict[str, Any] | None) -> str:
    """:func:`no_backend` from nobackend.facts."""
    diag, down, hung, running, going, starting, held, managed = _facts(said)
    return no_backend(diag, start, down, hung, running, going, starting, held, managed)


def unavailable(said: dict[str, Any]) -> str:
    """The message of every command's BACKEND_UNAVAILABLE, from nobackend.facts: what
    `status` says after "backend: not available", and whether none is coming."""
    coming = ", and none is coming" if said.get("none_coming") else ""
    return f"no backend generation answers{coming}" + why_none(*_facts(said))


def why_none(diag: dict[str, Any] | None, down: dict[str, Any] | None = None,
             hung: dict[str, Any] | None = None, guardian_running: bool | None = None,
             going: tuple[int | None, int | None] = (None, None),
             starting: int | None = None, held: dict[str, Any] | None = None,
             managed: bool | None = None) -> str:
    """Why no backend answers ("; …"), from the facts of nobackend.facts: ``hung``, a
    guardian that holds its lock but does not listen, says more than its diagnostics;
    ``held``, the owner stopped while the guardian is not running, what continuing it
    does; ``starting``, the pid of a `tenure up` under way; ``going``, the pid of an
    owner shutting down or of a `tenure down` under way (:func:`shutting_down`); a
    guardian that is not running while the owner is: the reason no backend comes
    (unless a service manager, ``managed``, starts it again); else :func:`why`."""
    if hung:
        return f"; {_hung_line(hung)}"
    if held is not None and down is None:
        return f"; {_held_owner(held)}"
    if starting is not None and going == (None, None):
        return (f"; `tenure up` (pid {starting}) is starting tenure: `tenure status` "
                "again shortly")
    if going != (None, None):
        return f"; {shutting_down(*going)}: `tenure up` waits for it to end, then starts " \
            "tenure again"
    if down is None and guardian_running is False and managed:
        return ("; the guardian is not running: its service manager starts it again, and "
                "with it a backend")
    if down is None and guardian_running is False:
        # its diagnostics are of a guardian gone: not shown as the present
        return ("; the guardian is not running, so none is started: `tenure up` starts "
                "it (applications keep running)")
    return why(diag, down)


def shutting_down(owner: int | None, down: int | None) -> str:
    """Tenure going away: the owner, pid ``owner``, answers that it is shutting down, or
    else a `tenure down`, pid ``down``, is under way (it stops the guardian first)."""
    if owner is not None:
        return (f"the owner (pid {owner}) is shutting down, stopping every application")
    return (f"`tenure down` (pid {down}) is stopping tenure: the guardian, then the owner "
            "and every application")


def why(diag: dict[str, Any] | None, down: dict[str, Any] | None = None) -> str:
    """Why no backend answers: tenure is not running (``down``: everyday.stopped), or
    else what the guardian's diagnostics say."""
    if down is not None:
        return "; tenure is not running (neither the guardian nor the owner is)" + \
            _last_owner(down.get("owner"))
    if diag is None:
        return "; the guardian has written no diagnostics (is it running? `tenure up`)"
    if "unreadable" in diag:
        return (f"; the guardian's diagnostics (runtime/supervisor-state.json) cannot be "
                f"read: {diag['unreadable']}")
    parts = []
    act = diag.get("last_activation") or {}
    if (diag.get("selector") or {"current": ""}).get("current") is None and not act:
        parts.append("no release is selected, so no backend is started (a first `tenure "
                     "up` that was interrupted?): `tenure up` installs and selects one")
    if (stuck := blocked(diag)) is not None:
        parts.append(stuck)
    silent = not_answering(diag.get("backend"))
    if silent is not None:
        pid = diag["backend"].get("pid")
        parts.append(f"backend pid {pid} is alive but {silent}; {why_silent(pid)}")
    if act:
        parts.append(f"last activation {act.get('id')} {act.get('kind')} is "
                     f"{act.get('phase')}{_ended(act)}")
    age = time.time() - diag.get("updated_at", time.time())
    parts.append(f"guardian diagnostics {age:.0f}s old")
    return "; " + "; ".join(parts)


def _ended(act: dict[str, Any]) -> str:
    """`` (OUTCOME: ERROR)`` of an activation: its outcome when the phase does not say it
    (``complete (check-only)``: a `backend upgrade --check`, which changed nothing), and
    its error."""
    said = [str(act["outcome"])] if act.get("outcome") not in (None, act.get("phase")) \
        else []
    said += [str(act["error"])] if act.get("error") else []
    return f" ({': '.join(said)})" if said else ""


def blocked(diag: dict[str, Any] | None) -> str | None:
    """What the guardian's diagnostics say of a recovery that waits for the operator
    (no backend comes back by itself), and what to run; None when it is not blocked."""
    stuck = (diag or {}).get("blocked")
    if not stuck:
        return None
    then = stuck.get("next") or "`tenure backend recover`"   # guardian.cold.next_step
    return f"recovery blocked: {stuck.get('reason')} ({then})"


def _last_owner(rec: dict[str, Any] | None) -> str:
    """How the last owner ended, from its shutdown receipt, and what to do."""
    start = ". `tenure up` starts it"
    if rec is None:
        return start
    state = rec.get("state")
    at = rec.get("at")
    when = time.strftime(" at %Y-%m-%d %H:%M:%S", time.localtime(at)) \
        if isinstance(at, int | float) else ""
    if state == "clean":
        apps = f" (applications: {rec['applications']})" if rec.get("applications") else ""
        return f": the owner shut down cleanly{when}{apps}{start}"
    if state == "failed":
        return (f": the owner's shutdown{when} failed at its {rec.get('failed_stage')} stage "
                f"(execution/owner-receipt.json){start}")
    if state == "running":
        return (": the owner ended without a shutdown (killed or crashed), so its "
                "applications may still run; `tenure up` asks for `tenure owner reconcile` "
                "first if they might (docs/reconcile.md)")
    return f": the owner's shutdown receipt is unreadable ({rec.get('error')}){start}"


def changed(plan: dict[str, Any]) -> int:
    """How many changes a plan makes: apps, job templates and settings."""
    return sum(len(plan.get(k) or []) for k in ("changes", "jobs", "settings"))


def up(r: dict[str, Any]) -> str:
    started = [k for k, v in r["started"].items() if v]
    lines = [f"started: {', '.join(started)}" if started else "owner and guardian were running"]
    if r.get("release_sealed"):
        lines.append(f"sealed and selected release {r['release_sealed'][:12]}")
    ap = r.get("apply")
    if ap:
        op, n = ap["operation"], changed(ap["plan"])
        what = f"{n} change{'' if n == 1 else 's'}"
        if op.get("joined"):   # an operation already applying this config
            lines.append(operation(op))
        elif op.get("outcome") is None and op.get("id"):
            lines.append(f"applying {what} as {op['id']} (still running; "
                         f"`tenure op show {op['id']} --wait` waits for its end)")
        elif op.get("outcome") == "success" or op.get("id") is None:
            lines.append(f"applied {what}: {op.get('outcome')}")
        else:   # what failed, and the id to look it up by
            lines.append(f"applying {what} did not succeed: {operation(op)}")
    return "\n".join(lines)


def up_queued(r: dict[str, Any]) -> str:
    lines = [f"starting: {', '.join(r['starting'])} (in the background, not waited for)"]
    q = r.get("queued")
    if q:
        lines.append(f"config {q['source']} queued as request {q['request_id']}: the "
                     "backend applies it once it is up")
    lines.append("follow with `tenure status` and `tenure op list`")
    return "\n".join(lines)


def down(r: dict[str, Any]) -> str:
    if not r:
        return "nothing was running"
    lines = []
    for name in ("guardian", "backend", "owner"):
        if name in r:
            state = "stopped" if r[name] else \
                f"STILL RUNNING: {r.get(name + '_problem') or 'not stopped in time'}"
            if name == "owner" and not r[name]:
                state += "; its applications still run"
            if name == "backend":   # only one its guardian did not retire is stopped here
                state += (" (it outlived the guardian, stopped above mid-way through a "
                          "start or an upgrade)" if r.get("guardian")
                          else " (it ran without a guardian)")
            lines.append(f"{name}: {state}")
    if "applications_stopped" in r:
        lines.append(f"applications stopped: {r['applications_stopped']}")
    rec = r.get("owner_receipt")
    if rec is not None and rec["state"] != "clean":
        where = f" at stage {rec['failed_stage']}" if rec.get("failed_stage") else ""
        lines.append(f"owner shutdown NOT clean ({rec['state']}{where}): {rec['detail']}")
        lines.append("the next start needs `tenure owner reconcile`; see docs/reconcile.md")
    elif rec is not None:
        lines.append("owner shutdown clean")
    return "\n".join(lines)


def failed_instances(r: dict[str, Any]) -> list[str]:
    """The instances a start, stop or restart answer shows ``failed``, sorted."""
    return sorted(k for k, v in (r.get("instances") or {}).items() if v == "failed")


def instances(r: dict[str, Any]) -> str:
    inst = r.get("instances", {})
    settled = _unsettled(r, inst)
    if r.get("not_restarted"):
        then = ("left as they were: the command that stopped it has them now"
                if r.get("withdrawn") else "run the restart again once it is up")
        settled += (f"\nnot restarted: {', '.join(r['not_restarted'])} (the roll stopped "
                    f"at the instance before them; {then})")
    failed = failed_instances(r)
    if failed:
        settled += (f"\nfailed: {', '.join(failed)} (`tenure inspect {failed[0]}` says "
                    "why; `tenure start` tries again)")
    if not inst:
        return "no instances" + settled
    reasons = r.get("reasons") or {}   # why those not settled are not
    heads = ["INSTANCE", "STATE", *(["DETAIL"] if reasons else [])]
    rows = [[k, v, *([reasons.get(k, "")] if reasons else [])]
            for k, v in sorted(inst.items())]
    return table(rows, heads, [[None, colour_for(row[1]), None][:len(heads)]
                               for row in rows]) + settled


def _unsettled(r: dict[str, Any], inst: dict[str, str]) -> str:
    """The line under a start, stop or restart answer that says why it did not settle
    ('' when it did)."""
    at = str(r.get("stopped_at"))
    if r.get("superseded"):   # a stack command a later one took over (backend.api_stacks)
        return "\n" + superseded(r)
    if r.get("settled", True):
        return ""
    if r.get("handed_over"):
        return ("\n(every instance was restarted; a backend handoff began before the "
                "last was ready, and the roll answers at its start: `tenure status` "
                "shows the last come up, under whichever generation serves)")
    if r.get("withdrawn"):
        return (f"\n(the roll stopped at {at}: a later command stopped it, a stop, a "
                "restart, a stack stop or an apply, which has it now)")
    if inst.get(at) in ("failed", "exited"):
        return f"\n(the roll stopped at {at}: it ended {inst[at]})"
    return "\n(not settled in time)"


def superseded(r: dict[str, Any]) -> str:
    """The line of a ``stack stop`` or ``stack start`` that a later one superseded: its
    wait ended there, and the states above are those of that moment."""
    by = r["superseded"]
    return (f"(superseded by a later `tenure {by['by']} {r['stack']}`: the intent is "
            f"{by['intent']}, revision {by['revision']})")


# inspect: these keys in this order, each as (label, formatter); the rest follow as-is
_INSPECT: list[tuple[str, str, Any]] = [
    ("state", "state", lambda r: paint(_row_state(r), colour_for(_row_state(r)))),
    ("detail", "detail", lambda r: _detail(r, told=False) or "-"),
    ("status_text", "app status", lambda r: _told(r["status_text"]) or "-"),
    ("pid", "pid", lambda r: value(r["pid"])),
    ("launch_key", "launch key", lambda r: value(r["launch_key"])),
    ("unrecorded", "owner's record", lambda r: paint(
        "NOT WRITTEN (storage error; watched all the same)", "red") if r["unrecorded"]
     else "written"),
    ("uptime", "uptime", lambda r: dur(r["uptime"])),
    # the owner lost: how long ago it was last heard (a duration, as everywhere)
    ("last_seen_age", "last seen", lambda r: f"{dur(r['last_seen_age'])} ago"),
    ("restarts", "restarts", lambda r: str(r["restarts"])),
    ("ready", "ready", lambda r: value(r["ready"])),
    ("last_outcome", "last outcome", lambda r: value(r["last_outcome"])),
    ("cpu_percent", "cpu", lambda r: percent(r["cpu_percent"])),
    ("rss", "memory", lambda r: size(r["rss"])),
    ("log_dropped", "log lines dropped", lambda r: value(r["log_dropped"])),
    ("log_retention", "log retention", lambda r: size(r["log_retention"])
     if r["log_retention"] else f"{DEFAULT_LOG_RETENTION} (the default)"),
    ("command", "command", lambda r: _shell_words(r["command"])),
    ("restart", "restart policy", lambda r: value(r["restart"])),
    ("cwd", "working directory", lambda r: r["cwd"] or "the owner's"),
    ("ready_kind", "readiness", lambda r: r.get("readiness") or value(r["ready_kind"])),
    ("health", "health check", lambda r: _health(r["health"])),
    ("stop", "stop", lambda r: _stop(r["stop"])),
    ("identity", "runs as", lambda r: identity(r["identity"])),
    ("limits", "limits", lambda r: value(r["limits"])),
    ("last_error", "last error", lambda r: _said(r["last_error"])),
    ("last_exit", "last exit", lambda r: _said(r["last_exit"])),
    ("last_probe", "last failed probe", lambda r: _said(r["last_probe"])),
    ("sockets", "sockets", lambda r: _held_sockets(r["sockets"])),
    ("stored_fds", "stored fds", lambda r: "unknown" if r["stored_fds"] is None else
     _stored_fds(r["stored_fds"]) or "-"),
]


def _health(h: dict[str, Any] | None) -> str:
    """``GET http://127.0.0.1:8080/health every 10s (timeout 5s), restart after 3
    failures``, or ``none``."""
    if not h:
        return "none"
    grace = f", none in the first {span(h['grace'])}" if h.get("grace") else ""
    return (f"{h['check']} every {span(h['interval'])} (timeout {span(h['timeout'])}), "
            f"restart after {h['failures']} failure{'s' if h['failures'] != 1 else ''}"
            f"{grace}")


def _stored_fds(fds: list[dict[str, Any]]) -> str:
    """``cache (memfd), conn (socket)``."""
    return ", ".join(f"{f['name']} ({f['kind']})" for f in fds)


def _held_sockets(socks: list[dict[str, Any]] | None) -> str:
    """``http 127.0.0.1:8080 (queue 0/4096, inode 123, used by s/a/0/3); local
    unix:/run/a.sock (mode 0660, owner -:www, inode 124); ...``;
    ``unknown`` when the owner could not be asked."""
    if socks is None:
        return "unknown"
    out = []
    for s in socks:
        said = [] if s.get("queued") is None else [f"queue {s['queued']}/{s['queue_limit']}"]
        if s.get("mode") is not None:
            said.append(f"mode {s['mode']:04o}")
        if s.get("user") or s.get("group"):
            said.append(f"owner {s.get('user') or '-'}:{s.get('group') or '-'}")
        said.append(f"inode {s['inode']}")
        if s.get("used_by"):
            said.append(f"used by {', '.join(s['used_by'])}")
        out.append(f"{s['name']} {s['listen']} ({', '.join(said)})")
    return "; ".join(out) or "-"
_SHOWN_ELSEWHERE = {"key", "stack", "app", "instance", "generation", "reason", "readiness",
                    "next_start_in"}
_INSPECT_KEYS = {key for key, _, _ in _INSPECT} | _SHOWN_ELSEWHERE
_PAINTED = {"state", "unrecorded"}   # coloured by paint: tenure's own words


def _said(record: dict[str, Any] | None) -> str:
    """A last_error/last_exit/last_probe record: its text and the launch it was."""
    if not record:
        return "-"
    return f"{record['text']} (generation {record['generation']})"


def _shell_words(argv: list[str]) -> str:
    import shlex  # only inspect shows a command line; status loads nothing it does not use
    return shlex.join(argv)


def inspect(r: dict[str, Any]) -> str:
    out = []
    for i in r["instances"]:
        # a command line, an environment, an app's words: never the terminal's controls
        pairs = [(label, fmt(i) if key in _PAINTED else neutralise(fmt(i)))
                 for key, label, fmt in _INSPECT if key in i]
        pairs += [(k.replace("_", " "), neutralise(value(v))) for k, v in i.items()
                  if k not in _INSPECT_KEYS]
        title = f"{i['key']}  (generation {i.get('generation', '-')})"
        out.append(title + "\n" + fields(pairs, indent="  "))
    text = "\n\n".join(out) if out else "no instances"
    link = r.get("owner_link")
    if link is not None and not link["current"]:
        text = owner_link(link) + "\n\n" + text
    return text


def _stop(stop: dict[str, Any] | None) -> str:
    """``SIGTERM, then SIGKILL after 10s``."""
    if not stop:
        return "-"
    sig = str(stop.get("signal", "TERM"))
    sig = sig if sig.startswith("SIG") else f"SIG{sig}"
    out = f"{sig}, then SIGKILL after {span(stop.get('timeout'))}"
    return out


def plan(p: dict[str, Any]) -> str:
    lines = [f"plan {p['id']} (fingerprint {p['fingerprint'][:16]})"]
    jobs, settings = p.get("jobs") or [], p.get("settings") or []
    if not p["changes"] and not jobs and not settings:
        return "\n".join([*lines, "no changes: nothing to apply"])
    rows = [[c["action"], c["app"], _change(c)] for c in p["changes"]]
    rows += [[c["action"], f"job {c['job']}", ""] for c in jobs]
    rows += [["update", c["setting"], f"{value(c['from'])} → {value(c['to'])}"]
             for c in settings]
    if rows:
        lines += ["  " + ln for ln in table(rows, ["ACTION", "WHAT", ""]).splitlines()[1:]]
    for stack in p.get("stopped_stacks") or ():
        lines.append(f"stack {stack} is stopped: its apps are recorded, not started "
                     f"(until `tenure stack start {stack}`)")
    lines.append(f"apply with: tenure apply {p['id']}")
    return "\n".join(lines)


def _change(c: dict[str, Any]) -> str:
    """``2 instances``, ``1 → 3 instances``, ``(definition changed)``."""
    parts = []
    if "from" in c and "to" in c:
        parts.append(f"{c['from']} → {c['to']} instances")
    elif c.get("only"):
        parts.append(f"instance{'s' if len(c['only']) != 1 else ''} "
                     f"{', '.join(map(str, c['only']))} of {c['instances']}")
    elif "instances" in c:
        parts.append(f"{c['instances']} instance{'s' if c['instances'] != 1 else ''}")
    if c.get("reason"):
        parts.append(f"({c['reason']})")
    if c.get("stay_stopped"):
        n = len(c["stay_stopped"])
        parts.append(f"instance{'s' if n != 1 else ''} "
                     f"{', '.join(map(str, c['stay_stopped']))} stopped: "
                     f"{'take' if n != 1 else 'takes'} it, {'stay' if n != 1 else 'stays'} "
                     "stopped")
    rest = {k: v for k, v in c.items() if k not in   # `changed` is said in the reason
            ("action", "app", "from", "to", "instances", "only", "reason", "stay_stopped",
             "changed")}
    parts += [f"{k}: {value(v)}" for k, v in rest.items()]
    return " ".join(parts)


def operation(op: dict[str, Any]) -> str:
    if op.get("id") is None:
        return f"nothing to do ({op.get('outcome')})"
    outcome = op.get("outcome") or "running"
    line = (f"operation {op['id']} ({op.get('kind')}): {paint(outcome, colour_for(outcome))}"
            f", stage {op.get('stage')}, step {op.get('step')}"
            f"{'; error: ' + op['error'] if op.get('error') else ''}")
    return _joined(op) + line if op.get("joined") else line


def _joined(op: dict[str, Any]) -> str:
    """The line before an operation an apply joined: it already applied the plan's
    config when asked, and nothing new was admitted; waited for, or still running."""
    then = "waited for its end" if op.get("outcome") is not None else \
        f"`tenure op show {op['id']} --wait` waits for its end"
    return f"operation {op['id']} already applies this config (nothing new admitted); {then}:\n"


def operations(ops: list[dict[str, Any]]) -> str:
    if not ops:
        return "no operations"
    rows = [[o["id"], o["kind"], value(o["stacks"]), o["stage"], str(o["step"]),
             value(o["outcome"])] for o in ops]
    return table(rows, ["ID", "KIND", "STACKS", "STAGE", "STEP", "OUTCOME"])


def stack(r: dict[str, Any]) -> str:
    if "will_stop" in r:
        rows = [f"  {x['launch_key']} pid {x['pid']}" for x in r["will_stop"]]
        n = f"{len(rows)} instance{'s' if len(rows) != 1 else ''}"
        return "\n".join([f"stack {r['stack']}: {n} will stop", *rows,
                          f"execute with: tenure stack stop {r['stack']} --digest "
                          f"{r['digest']}"])
    return f"stack {r['stack']}: intent {r['intent']}\n" + instances(r)


