"""Human-readable answers of the commands that change what runs, and of their
operations: ``up`` and ``down``; ``start``, ``stop`` and ``restart``; ``stack``;
``plan``, ``apply`` and ``op``."""

from __future__ import annotations

from .present import colour_for, paint, table, value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["changed", "down", "failed_instances", "instances", "operation", "operations",
           "plan", "stack", "superseded", "up", "up_queued"]


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
    if r.get("probes_ended"):
        lines.append(f"exec probes a dead backend left running, ended: {r['probes_ended']}")
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
