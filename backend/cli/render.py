"""Human-readable output of ``tenure status``, and why no backend answers (what
``status`` says then, and the message of every command's BACKEND_UNAVAILABLE). The other
commands' renderers are beside it: render_backend (the guardian-side commands, whose
renderers this module also exports), render_inspect (``inspect``) and render_changes
(the answers of up, down, start, stop, restart, stack, plan, apply and op); ``--json``
prints the raw answers instead.

Kept to what ``status`` uses: ``tenure status`` imports this module and render_backend,
never render_inspect or render_changes (tests/integration/stack/test_status_imports.py
holds it to the modules it loads)."""

from __future__ import annotations

import time

from .present import (
    colour_for,
    dur,
    paint,
    percent,
    size,
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

__all__ = ["DEFAULT_LOG_RETENTION", "app_status", "backend", "blocked", "no_backend",
           "no_backend_of", "owner", "owner_link", "pruned", "recover_plan",
           "recovery_state", "row_detail", "row_state", "shutting_down", "status",
           "stored_fds", "unavailable", "uncertifiable", "unfinished_window", "why",
           "why_none"]


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
        state = row_state(r)
        rows.append([r["key"], state, value(r["pid"]), dur(r["uptime"]), str(r["restarts"]),
                     value(r["ready"]), percent(r["cpu_percent"]), size(r["rss"]), row_detail(r)])
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


def row_detail(r: dict[str, Any], told: bool = True) -> str:
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
    return app_status(r.get("status_text"), STATUS_TEXT_CUT) if told else ""


STATUS_TEXT_CUT = 60
"""Characters of an app's ``STATUS=`` status's DETAIL shows (inspect: all of it)."""


def app_status(text: Any, cut: int | None = None) -> str:
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
                f"{stored_fds(st['fds'])}")
    return out


def stored_fds(fds: list[dict[str, Any]]) -> str:
    """``cache (memfd), conn (socket)``."""
    return ", ".join(f"{f['name']} ({f['kind']})" for f in fds)


def row_state(r: dict[str, Any]) -> str:
    """An instance's STATE as status and inspect show it: for one whose owner is lost,
    the state it was last seen in, and how long ago."""
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
