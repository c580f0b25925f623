"""Human-readable output of the guardian-side commands: ``backend status``, activation
answers, ``backend recover --dry-run``, and ``owner status``."""

from __future__ import annotations

import time

from .present import colour_for, dur, fields, paint, value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["backend", "not_answering", "owner", "owner_link", "pruned", "recover_plan",
           "recovery_state", "release_line", "uncertifiable"]

# activation phases after which nothing more happens (guardian/phases.py FINAL)
_FINAL_PHASES = frozenset({"complete", "aborted", "rolled_back", "failed", "uncertain",
                           "blocked"})


def recovery_failing(failing: dict[str, Any]) -> str:
    """The guardian's streak of failed recoveries (its ``recovery_failing``) in words:
    'recovery is failing: attempt 2 of 7 ended …; the guardian tries again in 4s and
    blocks after the last'."""
    due = float(failing.get("retry_at") or 0) - time.time()
    return (f"recovery is failing: attempt {failing.get('attempt')} of "
            f"{failing.get('attempts')} ended {failing.get('error')}; the guardian tries "
            f"again {'in ' + dur(due) if due >= 1 else 'now'} and blocks after the last")


def not_answering(b: dict[str, Any] | None) -> str | None:
    """'NOT ANSWERING for 12s (why)' when the guardian's last probe of the living
    generation ``b`` (diagnostics' ``backend``) got no answer; else None."""
    if not b or not b.get("alive") or b.get("answering") is not False:
        return None
    since = b.get("unanswered_since")
    return (f"NOT ANSWERING for {dur(time.time() - since) if since else '?'} "
            f"({b.get('unanswered_why') or 'no answer'})")


def why_silent(pid: Any) -> str:
    """Why a living backend ``pid`` does not answer, as far as /proc tells: stopped
    (SIGSTOP, a debugger: with the kill -CONT that continues it, as a stopped owner or
    guardian is named), else that it may be hung."""
    return _stopped(pid) or "it may be hung (docs/recover.md)"


def stopped_backend(view: Any) -> str | None:
    """What /proc says of the guardian's living backend (``view``: the guardian's
    status or diagnostics) when it is stopped (``pid N is stopped …; kill -CONT N
    continues it``), else None: alive, the guardian does not replace it, so nothing
    comes until it is continued."""
    backend = view.get("backend") if isinstance(view, dict) else None
    if not isinstance(backend, dict) or not backend.get("alive"):
        return None
    return _stopped(backend.get("pid"), backend.get("start_ticks"))


def _stopped(pid: Any, ticks: Any = None) -> str | None:
    """``pid N is stopped …; kill -CONT N continues it`` when process ``pid`` (with
    ``ticks`` its start time, when given: a pid another process holds now is not it)
    is stopped, else None."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    from protocol.procfs import described, read_stat
    st = read_stat(pid)
    if st is None or not st.stopped or (isinstance(ticks, int) and st.start_ticks != ticks):
        return None
    return described(pid, st)


def _liveness(b: dict[str, Any]) -> str:
    if not b.get("alive"):
        return "NOT ALIVE"
    silent = not_answering(b)
    if silent is None:
        return "alive"
    why = b.get("process") or "hung or overloaded, see docs/recover.md"
    return paint(f"alive, {silent}: {why}", "red")


def _owner_line(r: dict[str, Any]) -> str:
    """The owner's instance and epoch: its own when it answered, and the guardian's
    last grant beside it when that is another (a new state.db starts from none)."""
    instance = (r.get("owner") or {}).get("instance", "-")
    own, granted = r.get("owner_epoch"), r["epoch"]
    if not isinstance(own, int) or own == granted:
        return f"{instance}, epoch {granted}"
    return f"{instance}, epoch {own} (the guardian's last grant: epoch {granted})"


def backend(action: str, r: dict[str, Any]) -> str:
    if action == "abort":
        return ("abort requested: the running handoff stops at its next abort point; "
                "`tenure backend status` shows how it ended")
    if action != "status":
        return _activation(r)
    sel, b, cert = r["selector"], r.get("backend") or {}, r.get("certificate") or {}
    last = r.get("last_activation") or {}
    pairs: list[tuple[str, Any]] = [("owner", _owner_line(r))]
    if r.get("owner_link"):
        pairs.append(("owner link", owner_link(r["owner_link"], prefix="",
                                               states_below=False)))
    g = r.get("guardian") or {}
    silent = not r.get("owner_release") and (r.get("owner_link") or {}).get("current") is False
    pairs += [
        ("owner runs", "unknown: the owner does not answer" if silent
         else release_line(r.get("owner_release"), "owner")),
        ("guardian", f"pid {g.get('pid', '-')}, runs "
                     f"{release_line(r.get('guardian_release'))}"),
        ("release", _selected(sel, "current")),
        ("previous", _selected(sel, "previous")),
        ("backend", f"pid {b['pid']}, activation {b.get('activation', '-')}, "
                    f"{_liveness(b)}" if b else "none running"),
        ("last activation", f"{last.get('id')} {last.get('kind')}: {last.get('phase')}"
                            f"{_doing(last)}"
                            f"{' (' + last['outcome'] + ')' if last.get('outcome') else ''}"
         if last else "-"),
        ("certificate", _certificate(cert)),
        # the command's own (it may have asked the backend), else the guardian's view
        ("recovery", _recovery(r.get("recovery") or recovery_state(r)))]
    lines = [fields(pairs)]
    cli = r.get("cli") or {}
    if cli.get("older"):
        lines.append(paint(f"note: this tenure command line is {cli['version']}, older than "
                           f"the release the backend runs ({cli['backend_version']}); use "
                           "the command line of that release, or update the installed "
                           "tenure", "yellow"))
    if r.get("blocked"):
        lines.append(paint(f"BLOCKED: {r['blocked'].get('reason')}", "red"))
    if r.get("unhealthy"):
        u = r["unhealthy"]
        lines.append(paint(f"UNHEALTHY: guardian task {u.get('task')} failed: "
                           f"{u.get('reason')} (see the guardian's log)", "red"))
    return "\n".join(lines)


def _selected(sel: dict[str, Any], which: str) -> Any:
    """The selector's ``current`` or ``previous`` release, marked when the guardian says
    it is not installed (``<which>_installed`` false; a guardian that does not say is
    not contradicted)."""
    rid = sel.get(which)
    if rid is None or sel.get(f"{which}_installed") is not False:
        return rid
    return f"{rid} " + paint("(NOT INSTALLED)", "red")


# What an open activation does after the phase it recorded last (a phase is recorded
# once done: an upgrade waiting for its incumbent to drain still says admitted).
_NEXT = {"created": "checking", "checked": "admitting", "admitted": "draining",
         "draining": "checkpointing", "checkpointed": "fencing", "fenced": "retiring or "
         "starting", "retired": "starting the new generation", "started": "verifying",
         "verified": "completing"}


def _doing(act: dict[str, Any]) -> str:
    """`` (now: draining)`` for an activation still in progress, else ''."""
    phase = act.get("phase")
    if phase not in _NEXT or act.get("outcome"):   # final phases have no next
        return ""
    return f" (now: {_NEXT[phase]})"


def release_line(own: dict[str, Any] | None, who: str = "guardian") -> str:
    """``release 1f2e3d4c…`` or ``the installed code`` that a daemon (``who``) runs, with
    a trial, a recorded release it cannot run, or a move it went back from noted."""
    if not own:
        return f"unknown (this {who} does not say)"
    running = own.get("running")
    text = f"release {running}" if running else "the installed code"
    if own.get("state") == "trial":
        text += " (on trial: not confirmed yet)"
    if own.get("error"):
        what = (f"could not run release {str(own['release'])[:12]}" if "release" in own
                else "the recorded release cannot run")
        text += f"; {what}: {own['error'].get('msg')}"
    elif own.get("reverted"):
        r = own["reverted"]
        text += f"; went back from release {str(r.get('release'))[:12]}: {r.get('reason')}"
    return text


def _activation(r: dict[str, Any]) -> str:
    act = r.get("activation", r)
    lines = [f"activation {act.get('id')} {act.get('kind')}: {act.get('phase')} "
             f"({act.get('outcome') or '-'})"]
    if act.get("error"):
        lines.append(f"error {act.get('code')}: {act['error']}")
    lines += [f"  {x['phase']}" for x in r.get("receipts", [])]
    return "\n".join(lines)


# the change that invalidates a certificate (backend: Generation.invalidate), for people
_CHANGE = {"apply": "an apply", "stack intent": "a stack stop or start",
           "launch": "a launch", "stop": "a stop"}


def _certificate(cert: dict[str, Any]) -> str:
    """``valid, written 3s ago, 12 launches`` / ``none yet`` / ``invalid (…)``."""
    if cert.get("valid"):
        return (f"valid, written {dur(cert.get('age'))} ago, {value(cert.get('launches'))}"
                " launches")
    if cert.get("error"):
        return f"unusable ({cert['error']})"
    if cert.get("refused"):
        return f"refused ({cert['refused']})"
    if cert.get("invalidated"):   # what changed first since it was written
        return f"invalidated by {_CHANGE.get(cert['invalidated'], cert['invalidated'])} " \
               "(not certified since)"
    if cert.get("age") is None:
        return "none yet"
    return f"invalid, written {dur(cert.get('age'))} ago"


def owner_link(link: dict[str, Any], prefix: str = "owner: ",
               states_below: bool = True) -> str:
    """How current this view of the owner is (the status header's second line); with
    ``states_below``, that the app states under it are the past while it is not."""
    age = f"last word {link['age']:.1f}s ago"
    state = link["state"]
    if state == "connected":
        text = f"{prefix}connected, {age}"
        if link.get("process"):   # connected, and silent all the same
            text += f"; {link['process']}"
    else:
        since = time.strftime("%H:%M:%S", time.localtime(link["since"]))
        why = f": {link['reason']}" if link.get("reason") else ""
        for said in ("process", "next"):   # next: what to do (an owner gone)
            if link.get(said):
                why += f"; {link[said]}"
        text = paint(f"{prefix}{state.upper()} since {since}{why}", "red") + f"; {age}"
    if not link["current"] and states_below:
        text += " — the states below are what was last seen, not the present"
    return text


def owner(r: dict[str, Any]) -> str:
    """``tenure owner status``."""
    ident, grant = r.get("owner") or {}, r.get("grant") or {}
    caps = r.get("capabilities") or {}
    dropped = r.get("log_dropped") or {}
    notify = r.get("notify") or {}
    pairs: list[tuple[str, Any]] = [
        ("owner", f"{ident.get('instance')}, pid {ident.get('pid')}"),
        ("runs", release_line(r.get("release"), "owner")),
        ("home", r.get("home")),
        ("epoch", f"{r.get('epoch')} (granted to activation {grant.get('activation', '-')})"),
        ("draining", r.get("draining")),
        ("live launches", r.get("live")),
        ("uncertain launches", r.get("uncertain") or "-"),
        ("exit detection", r.get("exit_mode")),
        ("isolation", r.get("isolation")),
        ("cgroup controllers", r.get("cgroup_controllers")),
        ("runs as uid", r.get("uid")),
        ("switches users", r.get("switch_users")),
        ("observations", f"cursor {r.get('cursor')}, acknowledged {r.get('acked')}"),
        ("log journal", f"last id {r.get('log_last_id')}, lines dropped "
                        f"{r.get('log_overflow_total', 0)}"
                        + (f" ({value(dropped)})" if dropped else "")),
        ("notify messages", f"{notify.get('received', 0)} received, "
                            f"{notify.get('delivered', 0)} delivered, "
                            f"{notify.get('ignored', 0)} ignored, "
                            f"{notify.get('malformed', 0)} malformed"),
        ("capabilities", ", ".join(f"{k}@{v}" for k, v in sorted(caps.items()))),
    ]
    return fields(pairs)


def _covered(plan: dict[str, Any]) -> str:
    """Why a recovery needs no force: the certificate covers the world, or no
    application runs (then whatever the certificate says, there is nothing to adopt)."""
    if plan.get("nothing_runs"):   # an older guardian's plan does not say: covered
        return "no application runs, so there is nothing a recovery could adopt wrongly"
    return "the certificate covers the world"


def recover_plan(p: dict[str, Any]) -> str:
    """`tenure backend recover --dry-run`: why recovery is blocked and what a forced
    recovery would adopt."""
    cert, owner, diff = p["certificate"], p["owner"], p["differences"]
    blocked = p.get("blocked") or {}   # an older guardian does not say
    lines = [(f"{_covered(p)}: `tenure backend recover` needs no force"
              + (f", but more than that: {blocked['reason']}" if blocked.get("needs")
                 else "")
              if p["covered"] else f"not covered by the certificate: {p['reason']}"),
             f"owner: {owner['identity'].get('instance')}  epoch {owner['epoch']}  "
             f"release: {p['release'] or '-'}",
             f"certificate: {'valid' if cert['valid'] else 'invalid'}  written by "
             f"{cert.get('activation') or '-'} (epoch {cert.get('epoch') or '-'}, "
             f"{cert.get('launches') if cert.get('launches') is not None else '-'} launches)"]
    for key in ("gone", "unexpected", "replaced"):
        if diff.get(key):
            lines.append(f"{key}: {', '.join(diff[key])}")
    if "detail" in diff:
        lines.append(f"differences: {diff['detail']} (inventory digests differ: "
                     f"{value(diff['certificate_digest'] != diff['live_digest'])})")
    lines.append(f"a forced recovery adopts {len(p['adopt'])} live processes as they are:")
    lines += [f"  {a['stack']}/{a['app']}/{a['instance']}  pid {a['pid']}  "
              f"{a['launch_key']}" for a in p["adopt"]]
    lines.append(f"digest: {p['digest']}")
    lines.append(f"to perform exactly this: tenure backend recover --digest {p['digest']}")
    return "\n".join(lines)


def recovery_state(r: dict[str, Any]) -> dict[str, Any]:
    """Whether the guardian could restart a crashed backend now, from its status answer:
    ``{"state": "ready" | "pending" | "unavailable", "reason": str | None}``.

    ready: a valid certificate vouches for the applications. pending: none does right now,
    but the backend (or a running activation) will settle and certify. unavailable:
    recovery is blocked, uncertain, the owner is lost to the guardian, the selected
    release is not installed (nothing to start), or there is no certificate and no
    backend to make one.
    """
    cert, backend = r.get("certificate") or {}, r.get("backend") or {}
    act = r.get("last_activation") or {}
    missing = _not_installed(r.get("selector") or {})
    if missing is not None:
        return missing
    if r.get("blocked"):
        then = r["blocked"].get("next") or "run `tenure backend recover`"
        return _state("unavailable", f"recovery blocked: {r['blocked'].get('reason')}; "
                      f"{then}")
    if act.get("phase") == "uncertain":
        why = f" ({act['error']})" if act.get("error") else ""
        return _state("unavailable", f"activation {act.get('id')} is uncertain{why}: fix "
                      "what it names first (a restore that failed: its release), then "
                      "`tenure backend recover` (docs/upgrade.md, \"Uncertain\")")
    failing = r.get("recovery_failing")
    if failing and not backend.get("alive"):
        return _state("unavailable", recovery_failing(failing))
    link = r.get("owner_link") or {}
    if link.get("state") in ("lost", "owner-changed"):
        # a certificate vouches under the owner it names: without it nothing can adopt
        # what it lists, and a backend cannot certify
        what = "another owner instance answers the guardian" \
            if link["state"] == "owner-changed" else "the guardian has lost the owner" + \
            (f": {link['reason']}" if link.get("reason") else "")
        return _state("unavailable", f"{what}; a recovery needs the owner the certificate "
                      "names")
    if act and act.get("phase") not in _FINAL_PHASES:
        return _state("pending", f"{act.get('kind')} {act.get('id')} is in progress "
                      f"({act.get('phase')})")
    if cert.get("valid"):
        return _state("ready", None)
    if cert.get("error"):
        return _state("unavailable", f"the recovery certificate is {cert['error']}")
    if cert.get("refused") and not backend.get("alive"):
        return _state("unavailable", f"recovery would refuse the certificate: "
                      f"{cert['refused']}")
    silent = not_answering(backend)
    if silent is not None:   # stopped or hung: it certifies nothing until it answers
        return _state("unavailable", f"no valid certificate, and the backend is alive but "
                      f"{silent}: it certifies nothing until it answers; a recovery now "
                      "would wait for `tenure backend recover`")
    if backend.get("alive"):
        if cert.get("refused") and cert.get("activation") is not None and \
                cert.get("activation") == backend.get("activation"):
            # its own: what it writes next is refused the same way (after a new
            # state.db, its grant is one this guardian never issued)
            return _state("unavailable", f"the running generation's own certificate is "
                          f"refused ({cert['refused']}): until a hot upgrade or a recovery "
                          "puts a generation in control under a grant of this guardian, a "
                          "recovery would be forced (docs/recover.md)")
        if cert.get("refused"):
            return _state("pending", f"the certificate is refused ({cert['refused']}); "
                          "the backend writes its own within seconds")
        if cert.get("invalidated"):
            since = dur(time.time() - cert["changed_at"]) if cert.get("changed_at") else "?"
            return _state("pending", f"{cert['invalidated']} in progress for {since}; the "
                          "backend certifies again within 5 s once nothing is changing")
        if cert.get("age") is None:
            return _state("pending", "no certificate yet; the backend certifies within 5 s "
                          "once nothing is changing")
        return _state("pending", "a change is in progress or just ended; the backend "
                      "certifies again within 5 s once nothing is changing")
    return _state("unavailable", "no valid certificate and no backend running: with "
                  "applications running, recovery waits for `tenure backend recover`")


def _not_installed(sel: dict[str, Any]) -> dict[str, Any] | None:
    """``unavailable`` when the guardian says the selected release is not installed
    (``current_installed`` false): whatever else holds, a recovery would have nothing
    to start. None otherwise (also when the guardian does not say)."""
    if sel.get("current") is None or sel.get("current_installed") is not False:
        return None
    return _state("unavailable", f"the selected release {sel['current']} is not "
                  "installed: `tenure release install` it or `tenure release select` "
                  "another")


def uncertifiable(failing: dict[str, Any]) -> dict[str, Any]:
    """Recovery when the backend's storage refuses its certificate since
    ``failing['since']`` (``{error, since}``)."""
    return _state("unavailable", f"the backend cannot write its recovery certificate "
                  f"(for {dur(time.time() - failing['since'])}: {failing['error']}); the "
                  "last one written stays on disk and no longer vouches for what runs: a "
                  "crash now would wait for `tenure backend recover`")


def _state(state: str, reason: str | None) -> dict[str, Any]:
    return {"state": state, "reason": reason}


def _recovery(rec: dict[str, Any]) -> str:
    reason = rec.get("reason")
    word = paint(str(rec.get("state")), colour_for(str(rec.get("state"))))
    return word + (f" ({reason})" if reason else "")


def pruned(deleted: dict[str, int], policy: dict[str, int], missed: dict[str, str]) -> str:
    """What `tenure backend prune` deleted, the policy in force and what it could not
    prune, why (keys an older backend does not send are left out)."""
    done = dict(deleted)
    apps, lines = done.pop("log_apps", None), done.pop("log_lines", 0)
    left = done.pop("log_apps_left", 0)
    parts = [f"{n} {what}" for what, n in done.items()]
    if apps is not None:
        parts.append(f"the journal lines of {apps} removed app{'' if apps == 1 else 's'} "
                     f"({lines:,} line{'' if lines == 1 else 's'}"
                     + (f"; {left} more next round" if left else "") + ")")
    keep = dict(policy)
    days = keep.pop("removed_app_logs_days", None)
    kept = [f"{what} {n}" for what, n in keep.items()]
    if days is not None:
        kept.append(f"a removed app's lines {days} day{'' if days == 1 else 's'}")
    return ("pruned " + ", ".join(parts) + "; keeping " + ", ".join(kept)
            + "".join(f"\n{_NOT_PRUNED.get(what, what)} not pruned: {why}"
                      for what, why in missed.items()))


_NOT_PRUNED = {"log_apps": "removed apps' journal lines"}
