"""``python -m owner reconcile --prepare | --drain DIGEST``: the guided reconcile, with
its output for people and for programs (``--json``)."""

from __future__ import annotations

import json
import os
from typing import Any

from protocol.errors import AlreadyRunning, Conflict, NotFound, ProcessesAlive, TenureError

from .daemon import EXIT
from .evidence import printable
from .paths import OwnerPaths
from .reconcile import counted, reconcile_locked
from .reconcile_plan import drain, prepare

__all__ = ["guided", "proven_gone"]


def guided(paths: OwnerPaths, digest: str | None, as_json: bool) -> int:
    """Prepare (``digest`` None) or drain-then-reconcile. Holds the owner lock."""
    try:
        lock = paths.take_existing_lock()  # refuses while an owner runs
    except AlreadyRunning as exc:
        return _error(exc, as_json, EXIT["running"])
    except TenureError as exc:
        return _error(exc, as_json, EXIT["usage"])
    try:
        if digest is None:
            plan = prepare(paths)
            _print(plan, as_json, _plan_text(plan))
            return 0
        done = drain(paths, digest)
        proven = reconcile_locked(paths)
        out = {"ok": True, **done, "proven_gone": proven}
        _print(out, as_json, _drain_text(done, proven))
        return 0
    except (Conflict, NotFound) as exc:
        return _error(exc, as_json, EXIT["usage"])
    except ProcessesAlive as exc:
        return _error(exc, as_json, EXIT["alive"])
    except TenureError as exc:
        return _error(exc, as_json, EXIT["usage"])
    finally:
        os.close(lock)


def _print(obj: dict[str, Any], as_json: bool, text: str) -> None:
    print(json.dumps(obj) if as_json else text)


def _error(exc: TenureError, as_json: bool, code: int) -> int:
    print(json.dumps({"ok": False, **exc.to_wire()}) if as_json else f"error: {exc}")
    return code


_NOTES = {"exited": " (leader exited)",
          "unrecorded": " (no launch of owner.db: this home in its environment)"}


def _plan_text(plan: dict[str, Any]) -> str:
    prev = plan["previous"] or {}
    lines = [f"previous owner: {prev.get('instance', '-')} (pid {prev.get('pid', '-')}, "
             f"receipt {prev.get('state', 'missing')})"]
    alive = [ln for ln in plan["launches"] if ln["processes"]]
    gone = len(plan["launches"]) - len(alive)
    lines.append(f"{counted(len(plan['launches']), 'launch', 'launches')} of the dead "
                 f"owner: {len(alive)} with processes, {gone} already gone")
    for ln in alive:   # names as owner.db holds them: a damaged one may hold controls
        where = f" cgroup {printable(ln['cgroup'])}" if ln.get("cgroup") else ""
        note = _NOTES.get(ln.get("state"), "")
        lines.append(f"  {printable(ln['app'])}  {printable(ln['launch_key'])}{note}{where}")
        lines += [f"    pid {p['pid']}  ({p['why']})" for p in ln["processes"]]
    if plan["sockets"]:
        lines.append(f"leftover sockets (removed by the next owner): "
                     f"{', '.join(map(printable, plan['sockets']))}")
    lines.append(f"digest: {plan['digest']}")
    if alive:
        lines.append(f"to stop exactly these: tenure owner reconcile --drain {plan['digest']}")
    else:
        lines.append("nothing to stop: run `tenure owner reconcile`")
    return "\n".join(lines)


def _drain_text(done: dict[str, Any], proven: list[str]) -> str:
    killed = f", {len(done['killed'])} needed SIGKILL" if done["killed"] else ""
    refused = [f"cgroup.kill of {f['cgroup']} refused: {f['strerror']} (its sealed "
               "processes were killed one by one)"
               for f in done.get("cgroup_kill_failed", [])]
    joined = [f"and {counted(len(done['joined']), 'process', 'processes')} their still "
              f"running leaders forked since the seal (in the leader's process group): "
              f"{'pid' if len(done['joined']) == 1 else 'pids'} "
              f"{', '.join(map(str, done['joined']))}"] if done.get("joined") else []
    return "\n".join([
        f"stopped {counted(done['stopped'], 'sealed process', 'sealed processes')} "
        f"({done['gone_already']} had exited already{killed})", *joined, *refused,
        f"reconciled: {proven_gone(len(proven))}{_unrecorded(done)}; `tenure up` (or "
        "starting tenure-owner.service) may start the owner once"])


def _unrecorded(done: dict[str, Any]) -> str:
    """What the count of launches proven gone leaves out: the unrecorded launches the
    drain stopped (owner.db does not name them, so no row of it is proven gone)."""
    n = done.get("unrecorded") or 0
    return f" in owner.db, and {counted(n, 'unrecorded launch', 'unrecorded launches')} " \
        "stopped above" if n else ""


def proven_gone(n: int) -> str:
    """'1 launch proven gone', '3 launches proven gone'."""
    return f"{counted(n, 'launch', 'launches')} proven gone"
