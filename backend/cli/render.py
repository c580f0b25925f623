"""Human-readable output of the CLI (``--json`` prints the raw answers instead)."""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["backend", "down", "inspect", "instances", "operation", "operations", "plan",
           "recovery_state", "stack", "status", "up", "why"]

# activation phases after which nothing more happens (guardian/phases.py FINAL)
_FINAL_PHASES = frozenset({"complete", "aborted", "rolled_back", "failed", "uncertain",
                           "blocked"})


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
             for r in [header, *rows]]
    return "\n".join(lines)


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _mem(rss: int | None) -> str:
    return "-" if rss is None else f"{rss / 2**20:.1f}M"


def status(st: dict[str, Any]) -> str:
    b = st["backend"]
    head = (f"backend {b['activation']} epoch {b['epoch']} pid {b['pid']}"
            f"{' (draining)' if b['draining'] else ''}; config {b['config'] or '-'}")
    link = st.get("owner_link")
    if link is not None:
        head += "\n" + owner_link(link)
    rows = [[r["key"], _row_state(r), str(r["pid"] or "-"), _dur(r["uptime"]),
             str(r["restarts"]), {True: "yes", False: "no"}.get(r["ready"], "-"),
             "-" if r["cpu_percent"] is None else f"{r['cpu_percent']:.1f}%", _mem(r["rss"])]
            for r in st["apps"]]
    stopped = [s for s, v in st.get("intents", {}).items() if v.get("intent") == "stopped"]
    tail = f"\nstopped stacks: {', '.join(sorted(stopped))}" if stopped else ""
    dropped = {f"{r['stack']}/{r['app']}": r["log_dropped"] for r in st["apps"]
               if r.get("log_dropped")}
    if dropped:
        tail += "\nlog lines dropped (the owner's journal queue was full): " + \
            ", ".join(f"{app} {n}" for app, n in sorted(dropped.items()))
    tail += _jobs_line(st.get("jobs") or {})
    tail += _sockets_lines(st.get("sockets") or [], st.get("fd_store") or [])
    if not rows:
        return head + "\nno applications" + tail
    return head + "\n" + _table(rows, ["APP", "STATE", "PID", "UPTIME", "RESTARTS", "READY",
                                      "CPU", "MEM"]) + tail


def _sockets_lines(socks: list[dict[str, Any]], stores: list[dict[str, Any]]) -> str:
    """Held sockets (address, inode, accept queue/limit where the kernel reports it) and
    stored fds, after the apps."""
    lines = []
    for s in socks:
        queue = "" if s.get("queued") is None else f" queue {s['queued']}/{s['queue_limit']}"
        lines.append(f"  {s['stack']}/{s['app']} {s['name']} {s['listen']} "
                     f"inode {s['inode']}{queue}")
    for st in stores:
        names = ", ".join(f"{f['name']} ({f['kind']})" for f in st["fds"])
        lines.append(f"  {st['stack']}/{st['app']}/{st['instance']} stored: {names}")
    return "\nsockets held by the owner:\n" + "\n".join(lines) if lines else ""


def owner_link(link: dict[str, Any]) -> str:
    """The status header's second line: how current this view of the owner is."""
    age = f"last word {link['age']:.1f}s ago"
    state = link["state"]
    if state == "connected":
        text = f"owner: connected, {age}"
    else:
        since = time.strftime("%H:%M:%S", time.localtime(link["since"]))
        why = f": {link['reason']}" if link.get("reason") else ""
        text = f"owner: {state.upper()} since {since}{why}; {age}"
    if not link["current"]:
        text += " — the states below are what was last seen, not the present"
    return text


def _row_state(r: dict[str, Any]) -> str:
    if r["state"] != "unknown":
        return str(r["state"])
    return f"unknown (last seen {r['last_state']} {_dur(r['last_seen_age'])} ago)"


def _jobs_line(jobs: dict[str, int]) -> str:
    """``jobs: 2 running, 1 admitted`` and, loudly, records that wait for the operator."""
    parts = [f"{jobs[s]} {s}" for s in ("running", "starting", "admitted") if jobs.get(s)]
    line = f"\njobs: {', '.join(parts)}" if parts else ""
    if jobs.get("recovery_required"):
        line += (f"\njobs: {jobs['recovery_required']} recovery_required: see `tenure job "
                 "list --state recovery_required` and docs/jobs.md")
    return line


def why(diag: dict[str, Any] | None) -> str:
    if diag is None:
        return "; the guardian has written no diagnostics (is it running? `tenure up`)"
    parts = []
    act = diag.get("last_activation") or {}
    if diag.get("blocked"):
        parts.append(f"recovery blocked: {diag['blocked'].get('reason')} "
                     "(`tenure backend recover`)")
    if act:
        parts.append(f"last activation {act.get('id')} {act.get('kind')} is "
                     f"{act.get('phase')}{' (' + act['error'] + ')' if act.get('error') else ''}")
    age = time.time() - diag.get("updated_at", time.time())
    parts.append(f"guardian diagnostics {age:.0f}s old")
    return "; " + "; ".join(parts)


def up(r: dict[str, Any]) -> str:
    started = [k for k, v in r["started"].items() if v]
    lines = [f"started: {', '.join(started)}" if started else "owner and guardian were running"]
    if r.get("release_sealed"):
        lines.append(f"sealed and selected release {r['release_sealed'][:12]}")
    ap = r.get("apply")
    if ap:
        op = ap["operation"]
        lines.append(f"applied {len(ap['plan']['changes'])} changes: "
                     f"{op.get('outcome') or 'running'}")
    return "\n".join(lines)


def down(r: dict[str, Any]) -> str:
    if not r:
        return "nothing was running"
    lines = []
    for name in ("guardian", "owner"):
        if name in r:
            state = "stopped" if r[name] else "STILL RUNNING (not stopped in time)"
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


def instances(r: dict[str, Any]) -> str:
    inst = r.get("instances", {})
    settled = "" if r.get("settled", True) else " (not settled in time)"
    return "\n".join(f"{k}: {v}" for k, v in sorted(inst.items())) + settled


def inspect(r: dict[str, Any]) -> str:
    out = []
    for i in r["instances"]:
        out.append("\n".join(f"{k}: {v}" for k, v in i.items()))
    return "\n\n".join(out)


def plan(p: dict[str, Any]) -> str:
    lines = [f"plan {p['id']} (fingerprint {p['fingerprint'][:16]})"]
    jobs = p.get("jobs") or []
    if not p["changes"] and not jobs:
        lines.append("no changes")
    for c in p["changes"]:
        extra = {k: v for k, v in c.items() if k not in ("action", "app")}
        lines.append(f"  {c['action']:8} {c['app']}  {extra if extra else ''}".rstrip())
    for c in jobs:
        lines.append(f"  {c['action']:8} job {c['job']}")
    lines.append(f"apply with: tenure apply {p['id']}")
    return "\n".join(lines)


def operation(op: dict[str, Any]) -> str:
    if op.get("id") is None:
        return f"nothing to do ({op.get('outcome')})"
    return (f"operation {op['id']} {op.get('kind')} stage {op.get('stage')} step "
            f"{op.get('step')} outcome {op.get('outcome') or '-'}"
            f"{' error: ' + op['error'] if op.get('error') else ''}")


def operations(ops: list[dict[str, Any]]) -> str:
    if not ops:
        return "no operations"
    return _table([[o["id"], o["kind"], ",".join(o["stacks"]), o["stage"], str(o["step"]),
                    o["outcome"] or "-"] for o in ops],
                  ["ID", "KIND", "STACKS", "STAGE", "STEP", "OUTCOME"])


def stack(r: dict[str, Any]) -> str:
    if "will_stop" in r:
        rows = [f"  {x['launch_key']} pid {x['pid']}" for x in r["will_stop"]]
        return "\n".join([f"stack {r['stack']}: {len(rows)} instances will stop", *rows,
                          f"execute with: tenure stack stop {r['stack']} --digest "
                          f"{r['digest']}"])
    return f"stack {r['stack']}: intent {r['intent']}\n" + instances(r)


def backend(action: str, r: dict[str, Any]) -> str:
    if action != "status":
        act = r.get("activation", r)
        lines = [f"activation {act.get('id')} {act.get('kind')}: {act.get('phase')} "
                 f"({act.get('outcome') or '-'})"]
        if act.get("error"):
            lines.append(f"error {act.get('code')}: {act['error']}")
        lines += [f"  {x['phase']}" for x in r.get("receipts", [])]
        return "\n".join(lines)
    sel, b, cert = r["selector"], r.get("backend") or {}, r.get("certificate") or {}
    last = r.get("last_activation") or {}
    lines = [f"owner: {(r.get('owner') or {}).get('instance', '-')}  epoch: {r['epoch']}",
             f"release: {sel['current'] or '-'}  previous: {sel['previous'] or '-'}",
             f"backend: pid {b.get('pid', '-')} activation {b.get('activation', '-')} "
             f"alive {b.get('alive', False)}",
             f"last activation: {last.get('id', '-')} {last.get('kind', '')} "
             f"{last.get('phase', '')} {last.get('outcome') or ''}".rstrip(),
             f"certificate: {'valid' if cert.get('valid') else 'invalid'} age "
             f"{cert.get('age', '-')}s launches {cert.get('launches', '-')}",
             _recovery_line(recovery_state(r))]
    if r.get("owner_link"):
        lines.insert(1, "guardian's " + owner_link(r["owner_link"]))
    if r.get("blocked"):
        lines.append(f"BLOCKED: {r['blocked'].get('reason')}")
    if r.get("unhealthy"):
        u = r["unhealthy"]
        lines.append(f"UNHEALTHY: guardian task {u.get('task')} failed: {u.get('reason')} "
                     "(see the guardian's log)")
    return "\n".join(lines)


def recover_plan(p: dict[str, Any]) -> str:
    """`tenure backend recover --dry-run`: why recovery is blocked and what a forced
    recovery would adopt."""
    cert, owner, diff = p["certificate"], p["owner"], p["differences"]
    lines = [("the certificate covers the world: `tenure backend recover` needs no force"
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
                     f"{diff['certificate_digest'] != diff['live_digest']})")
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
    recovery is blocked, uncertain, or there is no certificate and no backend to make one.
    """
    cert, backend = r.get("certificate") or {}, r.get("backend") or {}
    act = r.get("last_activation") or {}
    if r.get("blocked"):
        return _state("unavailable", f"recovery blocked: {r['blocked'].get('reason')}; "
                      "run `tenure backend recover`")
    if act.get("phase") == "uncertain":
        return _state("unavailable", f"activation {act.get('id')} is uncertain: reconcile, "
                      "then `tenure backend recover`")
    if act and act.get("phase") not in _FINAL_PHASES:
        return _state("pending", f"{act.get('kind')} {act.get('id')} is in progress "
                      f"({act.get('phase')})")
    if cert.get("valid"):
        return _state("ready", None)
    if cert.get("error"):
        return _state("unavailable", f"the recovery certificate is {cert['error']}")
    if backend.get("alive"):
        if cert.get("invalidated"):
            since = _dur(time.time() - cert["changed_at"]) if cert.get("changed_at") else "?"
            return _state("pending", f"{cert['invalidated']} in progress for {since}; the "
                          "backend certifies again within 5 s once nothing is changing")
        if cert.get("age") is None:
            return _state("pending", "no certificate yet; the backend certifies within 5 s "
                          "once nothing is changing")
        return _state("pending", "a change is in progress or just ended; the backend "
                      "certifies again within 5 s once nothing is changing")
    return _state("unavailable", "no valid certificate and no backend running: with "
                  "applications running, recovery waits for `tenure backend recover`")


def _state(state: str, reason: str | None) -> dict[str, Any]:
    return {"state": state, "reason": reason}


def _recovery_line(rec: dict[str, Any]) -> str:
    reason = rec.get("reason")
    return f"recovery: {rec.get('state')}" + (f" ({reason})" if reason else "")
