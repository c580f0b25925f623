"""``tenure owner upgrade [RELEASE|PATH] --dry-run | --digest D | --continue``: the owner
maintenance window.

The owner is the parent of every application, so replacing it stops them; this makes
that a reviewed, resumable procedure. The plan lists every instance that runs, in the
order it is stopped (reverse dependency order, stack by stack) and started again; its
digest is what the operator approves. Performing it walks :data:`STEPS`, recording the
plan and the last step done in ``execution/maintenance.json`` after every step, so a
failure stops with that state and ``--continue`` carries on from it. The steps are one
machine: :data:`WORK` is what leads on from each step done, :data:`TRANSITIONS` the step
done once that work ended with an :class:`Event` (every pair listed; a failure raised
instead stops the window):

============  ==========================================================  ============
step done     the work that leads on (ok; owner-down)                     next
============  ==========================================================  ============
planned       copy the release for the owner if it needs a copy; verify   staged
              every file of the owner's tree against RUNTIME.json, and
              that its owner offers the contracts the backend needs
staged        stop every planned instance through the backend, in order   drained
              (none when the planned owner ended since and none answers)
drained       stop the owner (systemctl, or SIGTERM), or the one started  stopped
              in its place since; its receipt must be clean, or
              reconcile proved its launches gone; record the owner's
              new release
stopped       start the owner (systemctl, or as `tenure up` does)         started;
                                                                          start_failed
start_failed  the new owner did not come up, or did not serve the backend: reverted
              stop it if it runs, record the release it ran before
              again and start that owner
started       wait for the backend on the new owner; start the instances  restored;
              (owner-down: the backend did not attach to it in time)      start_failed
reverted      the same, on the owner of the release it ran before         restored
restored      verify: every planned instance up, the same stacks          done
              stopped, the owner on the planned release (reverted: the
              previous one)
============  ==========================================================  ============

A window that went back ends ``done`` with outcome ``reverted``: the command then fails
with OWNER_UPGRADE_REVERTED, naming the failed owner's log and quoting its last lines
(or, for an owner the backend did not attach to, where to read why).

Stopping through the backend uses each app's own stop policy; the instances are marked
stopped there, so the backend that follows the new owner does not start them by itself
before the window starts them in order. Stacks stopped durably stay stopped: their
intents live in owner.db, which the new owner reads.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from protocol.client import Client
from protocol.durable import atomic_write_json, read_json
from protocol.errors import (
    ConnectFailed,
    Internal,
    MaintenanceIncomplete,
    ReconcileRequired,
    ServiceError,
    StalePlan,
    StateCorrupt,
    TenureError,
)
from protocol.layout import MAINTENANCE_KIND, Layout
from protocol.procfs import running

from .ownerplan import (
    check_contracts_offered,
    check_release,
    mode_of,
    owner_tree,
    plan,
    sound,
)
from .ownerwindow_owner import (
    bring_up_owner,
    end_owner,
    ensure_guardian,
    journal,
    stop_successor,
    successor_ended_clean,
    systemctl,
)
from .unclean import reconciled
from .windowlock import held

__all__ = ["APPS_DOWN", "KIND", "TRANSITIONS", "WORK", "Event", "Outcome", "Step", "Window",
           "begin", "carry_on", "check_release", "check_way_back", "held", "load",
           "mode_of", "name", "plan", "refuse_owner_start", "reverted"]

KIND = MAINTENANCE_KIND


class Step(StrEnum):
    PLANNED = "planned"
    STAGED = "staged"
    DRAINED = "drained"
    STOPPED = "stopped"
    STARTED = "started"
    RESTORED = "restored"
    DONE = "done"
    START_FAILED = "start_failed"   # the new owner did not come up: going back
    REVERTED = "reverted"           # the owner of the release it ran before runs again


class Event(StrEnum):
    """How the work leading on from a step ended (a failure raises instead)."""
    OK = "ok"
    OWNER_DOWN = "owner-down"   # the new owner did not come up; there is one to go back to


class Outcome(StrEnum):
    """How a window that reached ``done`` ended (``maintenance.json``: ``outcome``)."""
    COMPLETED = "completed"     # the owner runs the planned release
    REVERTED = "reverted"       # it could not start: the owner runs the release before


# after these steps some planned instances may be down (a drain may have begun): no new
# window may begin before this one is carried on
APPS_DOWN = frozenset({Step.STAGED, Step.DRAINED, Step.STOPPED, Step.STARTED,
                       Step.START_FAILED, Step.REVERTED})


@dataclass
class Window:
    """What the steps need: the home, clients, the per-wait limit and a progress line."""

    layout: Layout
    api: Callable[..., Client]          # the backend (admin), ``api(timeout=...)``
    timeout: float
    say: Callable[[str], None]

    def owner_status(self) -> dict[str, Any] | None:
        from .daemons import ping
        return ping(self.layout.owner_sock, timeout=5.0, home=self.layout.home)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with self.api(timeout=self.timeout + 30) as c:
            return c.call(method, params or {})

    def wait(self, what: str, probe: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = probe()
            except TenureError as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(0.1)
        raise MaintenanceIncomplete(f"{what} not reached within {self.timeout:.0f} s "
                                    f"(last: {last})", {"waiting_for": what})


# -- the record ----------------------------------------------------------------------------

def load(layout: Layout, *, denied: bool = False) -> dict[str, Any] | None:
    """The window in progress or last done, or None. Raises StateCorrupt, UnsafePath;
    with ``denied``, PermissionError when this account may not read the record (root's,
    in system scope: :func:`protocol.durable.read_private`)."""
    try:
        rec = read_json(layout.maintenance, KIND, denied=denied)
    except FileNotFoundError:
        return None
    step = rec.get("step")
    if not isinstance(step, str) or step not in {s.value for s in Step} or \
            not sound(rec.get("plan")) or type(rec.get("progress")) is not dict:
        raise StateCorrupt(f"{layout.maintenance} has no known step, or no plan or "
                           "progress as a window writes them", {"path": layout.maintenance})
    return rec


_OWNER_REPLACED = frozenset({Step.DRAINED, Step.STOPPED, Step.START_FAILED})
"""Steps after which the window stops the owner and starts the next one itself."""


def refuse_owner_start(layout: Layout) -> None:
    """Raises MaintenanceIncomplete when an unfinished window is between stopping the
    owner and starting the next one: an owner started outside it (`tenure up`) would run
    the release it leaves, with the apps it stopped left stopped, and the window could
    no longer tell how the planned owner ended. Nothing of a window, or one elsewhere:
    returns. Raises StateCorrupt, UnsafePath (maintenance.json unreadable)."""
    try:
        rec = load(layout, denied=True)
    except PermissionError:
        return   # not ours to read (a viewer): the owner's own start decides
    if rec is None or rec["step"] not in _OWNER_REPLACED:
        return
    from protocol.window import refuse_in_window
    refuse_in_window(layout.home, "`tenure up`")   # still under way: not for --continue
    raise MaintenanceIncomplete(
        f"an owner maintenance window is unfinished (stopped after step {rec['step']}, "
        f"{rec['plan'].get('instances', 0)} instances stopped): `tenure owner upgrade "
        "--continue` starts the owner it plans and the apps again",
        {"step": rec["step"]})


def _save(layout: Layout, rec: dict[str, Any]) -> None:
    atomic_write_json(layout.maintenance, {**rec, "kind": KIND, "format": 1,
                                           "updated_at": time.time()})


def begin(w: Window, p: dict[str, Any], digest: str) -> dict[str, Any]:
    """Record the reviewed plan (step ``planned``). Raises StalePlan when ``digest`` is not
    the plan's, MaintenanceIncomplete while another window is unfinished."""
    old = load(w.layout)
    if old is not None and old["step"] in APPS_DOWN:
        raise MaintenanceIncomplete(
            f"a maintenance window stopped after step {old['step']}, perhaps with "
            "applications stopped; finish it first: tenure owner upgrade --continue",
            {"step": old["step"]})
    if digest != p["digest"]:
        raise StalePlan("the owner, its apps or the release changed since the plan was "
                        "reviewed; run --dry-run again", {"reviewed": digest,
                                                          "current": p["digest"]})
    rec = {"plan": p, "step": str(Step.PLANNED), "progress": {}, "error": None,
           "started_at": time.time()}
    _save(w.layout, rec)
    return rec


def carry_on(w: Window, rec: dict[str, Any]) -> dict[str, Any]:
    """Perform the work after ``rec['step']`` until ``done`` (:data:`WORK`,
    :data:`TRANSITIONS`). Raises MaintenanceIncomplete naming the last step done and why
    the work after it failed."""
    while rec["step"] != Step.DONE:
        done = Step(rec["step"])
        try:
            nxt = _transition(done, WORK[done](w, rec))
        except (TenureError, OSError, subprocess.SubprocessError) as exc:
            err = exc.to_wire() if isinstance(exc, TenureError) else \
                {"code": "INTERNAL", "msg": str(exc)}
            _save(w.layout, {**rec, "error": err})
            raise MaintenanceIncomplete(
                f"the maintenance window stopped after step {done}: "
                f"{err['msg'].rstrip()}; fix that, then: tenure owner upgrade --continue",
                {"step": str(done), "failed": str(TRANSITIONS[done, Event.OK]),
                 "error": err}) from None
        rec = {**rec, "step": str(nxt), "error": None}
        if nxt == Step.DONE:
            rec["outcome"] = str(Outcome.REVERTED if reverted(rec) else Outcome.COMPLETED)
        _save(w.layout, rec)
        w.say(f"{nxt}")
    return rec


def _transition(done: Step, event: Event) -> Step:
    nxt = TRANSITIONS[done, event]
    if nxt is None:
        raise Internal(f"the work after step {done} cannot end with {event}",
                       {"step": str(done), "event": str(event)})
    return nxt


def reverted(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The new owner's failure to start when the window went back (else None)."""
    failure: dict[str, Any] | None = rec["progress"].get("start_failure")
    return failure


def _target(rec: dict[str, Any]) -> str | None:
    """The release the owner is to run: the planned one, or the one before after a
    revert."""
    p = rec["plan"]
    target: str | None = p["from"] if reverted(rec) else p["release"]
    return target


def name(release: str | None) -> str:
    return f"release {release[:12]}" if release else "the installed code"


# -- the steps -------------------------------------------------------------------------------

def _stage(w: Window, rec: dict[str, Any]) -> Event:
    """Copy the release for the owner unless it may run the guardian's copy, then verify
    the tree it will run, before anything is stopped. Copies earlier windows staged that
    no owner will run go first (:func:`_sweep_staged`)."""
    p = rec["plan"]
    _sweep_staged(w, p)
    if p["release"] is None:
        return Event.OK
    if not owner_tree(w.layout, p["release"], p["owner_uid"]) and \
            (w.layout.releases / p["release"]).is_dir():
        from guardian.paths import GuardianPaths
        from guardian.trust import install_trusted
        from protocol.sockets import ensure_private_dir
        ensure_private_dir(w.layout.owner_releases, root=w.layout.execution, above=False)
        install_trusted(GuardianPaths(w.layout.home), w.layout.releases / p["release"],
                        into=w.layout.owner_releases)
    candidate = check_release(w.layout, p["release"], p["owner_uid"])
    check_way_back(w.layout, p)
    check_contracts_offered(w.layout, p, candidate)
    return Event.OK


def _sweep_staged(w: Window, p: dict[str, Any]) -> None:
    """Remove what earlier windows staged in ``execution/releases/`` that neither this
    window nor a way back runs: every copy but the planned release's, the one the owner
    runs and the one its record goes back to, and what an interrupted copy left. An
    entry not named by a release id is not ours and stays; one that cannot be removed
    is said, and the window goes on. Raises what reading the owner's record raises."""
    from guardian.manifest import is_release_id
    from guardian.treefiles import remove_tree
    from owner.release import load
    staged = w.layout.owner_releases
    try:
        names = sorted(os.listdir(staged))
    except FileNotFoundError:
        return
    rec = load(w.layout.owner_release)
    keep = {p["release"], p["from"], rec.release, rec.previous}
    for name in names:
        rid = name.partition(".tmp-")[0]
        if name in keep or not is_release_id(rid):
            continue
        try:
            remove_tree(staged / name)
        except OSError as exc:
            w.say(f"could not remove the owner's copy {name} ({exc.strerror or exc}); "
                  "it stays")
            continue
        w.say(f"removed the owner's copy of release {rid[:12]}, which no window runs"
              if name == rid else f"removed {name}, left by an interrupted copy")


def check_way_back(layout: Layout, p: dict[str, Any]) -> None:
    """The release the owner runs now, which the window goes back to when the new owner
    cannot start, must verify for the owner as well: else the way back would end on the
    installed code. Raises what :func:`check_release` raises, saying so."""
    back = p["from"]
    if back is None or back == p["release"]:
        return
    try:
        check_release(layout, back, p["owner_uid"])
    except TenureError as exc:
        raise type(exc)(f"the owner's current release {back[:12]}, which the window goes "
                        "back to if the new owner cannot start, is not usable: "
                        f"{exc.msg}; `tenure release install` it again first",
                        {**exc.data, "way_back": back}) from None


def _drain(w: Window, rec: dict[str, Any]) -> Event:
    """Stop every planned instance through the backend, level by level. When no owner
    answers and the planned one ended since (a `tenure down` after an interruption),
    its applications ended with it: there is nothing to stop, and the receipt the next
    step reads says how it ended. Standalone, a guardian that a `tenure down` stopped is
    started again (the backend it runs stops the instances). Raises
    MaintenanceIncomplete (an instance did not stop), ConnectFailed."""
    p = rec["plan"]
    owner = p["owner"]
    if w.owner_status() is None and not running(owner["pid"], owner["start_ticks"]):
        w.say("the owner ended since, and its applications with it")
        return Event.OK
    if p["mode"] == "standalone":
        ensure_guardian(w)
    for level in p["stop"]:
        for key in level:
            w.say(f"stopping {key}")
            r = w.call("stop", {"target": key, "timeout": w.timeout, "window": True})
            if not r.get("settled"):
                raise MaintenanceIncomplete(f"{key} did not stop within {w.timeout:.0f} s",
                                            {"instance": key, "state": r.get("instances")})
    return Event.OK


def _stop_owner(w: Window, rec: dict[str, Any]) -> Event:
    """Stop the planned owner, or the owner started in its place since
    (backend.cli.ownerwindow_owner.stop_successor); the receipt must say it stopped
    clean, or reconcile must have proven its launches gone. Records the owner's new release. Raises
    ReconcileRequired, Conflict, MaintenanceIncomplete (it did not exit in time)."""
    p = rec["plan"]
    owner = p["owner"]
    end_owner(w, owner, p["mode"])
    stop_successor(w, owner)
    from .down import shutdown_receipt
    state = shutdown_receipt(w.layout, owner["instance"])["state"]
    if state == "missing" and successor_ended_clean(w.layout, owner):
        state = "clean"
    if state not in ("clean", "missing", "unreadable") and \
            reconciled(w.layout, owner["instance"]):
        # reconcile proved its launches gone and wrote the acknowledgement the next
        # owner consumes as it starts; the receipt itself stays as it was written
        w.say(f"the owner's shutdown receipt is {state!r}; reconcile proved its "
              "applications gone")
        state = "clean"
    if state != "clean":
        raise ReconcileRequired(f"the owner's shutdown receipt is {state!r}, not clean; "
                                "`tenure owner reconcile` proves what is left, then "
                                "`tenure owner upgrade --continue` goes on",
                                {"receipt": state})
    if p["release"] != p["from"]:
        from owner.release import OwnerRelease, save
        save(w.layout.owner_release, OwnerRelease(p["release"], p["from"]))
    return Event.OK


def _start_owner(w: Window, rec: dict[str, Any]) -> Event:
    """Start the new owner. OWNER_DOWN when it did not come up and the owner ran another
    release before (what it said and where its log is are recorded for the revert)."""
    p = rec["plan"]
    try:
        bring_up_owner(w, rec)
    except (ConnectFailed, ServiceError) as exc:
        if p["release"] == p["from"]:
            raise   # the same code as before: there is nothing to go back to
        rec["progress"]["start_failure"] = {   # the log's lines once, not in the error
            "release": p["release"],
            "error": {"code": exc.code_str, "msg": exc.msg.partition("\n")[0]},
            "log": exc.data.get("log") or journal(p["mode"]),
            "last_lines": exc.data.get("last_lines", "")}
        w.say(f"the owner of {name(p['release'])} did not come up")
        return Event.OWNER_DOWN
    return Event.OK


def _revert(w: Window, rec: dict[str, Any]) -> Event:
    """Record the release the owner ran before the window again and start its owner (a
    failed unit is stopped first, and so is a new owner the backend did not attach to:
    it runs nothing). Raises MaintenanceIncomplete saying what to do when that owner
    does not come up either."""
    p = rec["plan"]
    if rec["progress"]["start_failure"].get("unserved"):
        end_owner(w, rec["progress"]["owner"], p["mode"])
    elif p["mode"] != "standalone":
        systemctl(p["mode"], "stop")
    from owner.release import OwnerRelease, save
    save(w.layout.owner_release, OwnerRelease(p["from"], p["release"]))
    w.say(f"going back to {name(p['from'])}")
    try:
        bring_up_owner(w, rec)
    except (ConnectFailed, ServiceError, MaintenanceIncomplete) as exc:
        raise MaintenanceIncomplete(_revert_failed(rec, exc.msg), exc.data) from None
    return Event.OK


def _revert_failed(rec: dict[str, Any], why: str) -> str:
    p, failure = rec["plan"], rec["progress"]["start_failure"]
    return (f"the owner of {name(p['release'])} {failed_how(failure)}, and going back to "
            f"{name(p['from'])} failed too, so no owner runs and {p['instances']} planned "
            f"instances are down. Both owners' output: {failure['log']} (a "
            "RECONCILE_REQUIRED there needs `tenure owner reconcile` first); "
            f"--continue starts the owner of {name(p['from'])} and the instances again. "
            f"Going back failed with: {why.rstrip()}")


def _restore(w: Window, rec: dict[str, Any]) -> Event:
    """Wait for the backend on the owner now running, then start the planned instances
    in order. OWNER_DOWN when the backend does not attach to a new owner of another
    release in time (it is stopped and the window goes back: :func:`_revert`); raises
    otherwise (an instance that does not come up is not the owner's doing)."""
    # the owner the window started may be gone since an interruption (a `tenure down`,
    # a crash and a restart by its service manager): the one that answers now, started
    # if none does, is the new owner (the release it runs is checked by _verify)
    bring_up_owner(w, rec)
    new = rec["progress"]["owner"]["instance"]
    if rec["plan"]["mode"] == "standalone":   # a `tenure down` since an interruption
        ensure_guardian(w)
    try:
        w.wait("the backend on the new owner", lambda: (
            w.call("status").get("owner") or {}).get("instance") == new)
    except MaintenanceIncomplete as exc:
        p = rec["plan"]
        if reverted(rec) or p["release"] == p["from"]:
            raise   # the owner it ran before, or the same code: nothing to go back to
        _unserved(w, rec, exc.msg)
        return Event.OWNER_DOWN
    for level in rec["plan"]["start"]:
        for key in level:
            w.say(f"starting {key}")
            r = w.call("start", {"target": key, "timeout": w.timeout, "window": True})
            why = _not_up(key, r, w.timeout)
            if why is not None:
                raise MaintenanceIncomplete(why, {"instance": key,
                                                  "state": r.get("instances")})
    return Event.OK


def _unserved(w: Window, rec: dict[str, Any], why: str) -> None:
    """Record that the backend did not attach to the new owner (``why``: the wait's
    error), for the revert and the error that follows it; where to read why."""
    p = rec["plan"]
    logs = (f"{w.layout.logs / 'guardian.log'} and {w.layout.logs / 'owner.log'}"
            if p["mode"] == "standalone" else journal(p["mode"]))
    rec["progress"]["start_failure"] = {
        "release": p["release"], "unserved": True,
        "error": {"code": "MAINTENANCE_INCOMPLETE", "msg": why.partition("\n")[0]},
        "log": logs, "last_lines": ""}
    w.say(f"the backend did not attach to the owner of {name(p['release'])}")


def failed_how(failure: dict[str, Any]) -> str:
    """How the new owner of a window that went back failed, as the errors say it."""
    return "did not serve the backend (it never attached to it)" \
        if failure.get("unserved") else "could not start"


def _not_up(key: str, r: dict[str, Any], timeout: float) -> str | None:
    """Why instance ``key`` did not come up, by the answer ``r`` to its start; None when
    it did. A start that ended with the instance failed is settled: it did not come up
    all the same."""
    state = (r.get("instances") or {}).get(key)
    if state in ("failed", "exited"):
        return f"{key} did not come up: it {state} (`tenure inspect {key}` says why)"
    if r.get("settled"):
        return None
    if r.get("withdrawn"):
        return f"{key} did not come up: a later command stopped it"
    if r.get("handed_over"):
        return (f"{key} did not come up before the backend handed over to its next "
                "generation (`tenure status` shows it)")
    return f"{key} did not come up within {timeout:.0f} s (it is {state or 'unknown'})"


def _verify(w: Window, rec: dict[str, Any]) -> Event:
    p = rec["plan"]
    st, order = w.call("status"), w.call("order")
    apps = {a["key"]: a for a in st["apps"]}
    down = [f"{k} ({apps[k]['state']})" if k in apps else f"{k} (gone)"
            for level in p["start"] for k in level
            if apps.get(k, {}).get("state") not in ("ready", "running")]
    problems = [f"not up: {', '.join(down)}"] if down else []
    if order["stopped_stacks"] != p["stopped_stacks"]:
        problems.append(f"stopped stacks are {order['stopped_stacks']}, were "
                        f"{p['stopped_stacks']}")
    runs = (rec["progress"].get("owner_release") or {})
    if runs.get("running") != _target(rec):
        why = (runs.get("error") or {}).get("msg", "see the owner's log")
        problems.append(f"the owner runs {runs.get('running') or 'the installed code'}, "
                        f"not {_target(rec)}: {why}")
    if problems:
        raise MaintenanceIncomplete("; ".join(problems), {"problems": problems})
    rec["progress"]["pids"] = {k: apps[k].get("pid") for level in p["start"] for k in level}
    return Event.OK


Work = Callable[[Window, dict[str, Any]], Event]

# the work that leads on from each step done (``done`` has none)
WORK: dict[Step, Work] = {
    Step.PLANNED: _stage,
    Step.STAGED: _drain,
    Step.DRAINED: _stop_owner,
    Step.STOPPED: _start_owner,
    Step.START_FAILED: _revert,
    Step.STARTED: _restore,
    Step.REVERTED: _restore,
    Step.RESTORED: _verify,
}

# (step done, how the work after it ended) -> the step done now; None: that work cannot
# end so (only the new owner's start can find it down; ``done`` has no work)
TRANSITIONS: dict[tuple[Step, Event], Step | None] = {
    (Step.PLANNED, Event.OK): Step.STAGED,
    (Step.PLANNED, Event.OWNER_DOWN): None,
    (Step.STAGED, Event.OK): Step.DRAINED,
    (Step.STAGED, Event.OWNER_DOWN): None,
    (Step.DRAINED, Event.OK): Step.STOPPED,
    (Step.DRAINED, Event.OWNER_DOWN): None,
    (Step.STOPPED, Event.OK): Step.STARTED,
    (Step.STOPPED, Event.OWNER_DOWN): Step.START_FAILED,
    (Step.START_FAILED, Event.OK): Step.REVERTED,
    (Step.START_FAILED, Event.OWNER_DOWN): None,
    (Step.STARTED, Event.OK): Step.RESTORED,
    (Step.STARTED, Event.OWNER_DOWN): Step.START_FAILED,
    (Step.REVERTED, Event.OK): Step.RESTORED,
    (Step.REVERTED, Event.OWNER_DOWN): None,
    (Step.RESTORED, Event.OK): Step.DONE,
    (Step.RESTORED, Event.OWNER_DOWN): None,
    (Step.DONE, Event.OK): None,
    (Step.DONE, Event.OWNER_DOWN): None,
}
assert set(TRANSITIONS) == {(s, e) for s in Step for e in Event}, "incomplete TRANSITIONS"
assert set(WORK) == set(Step) - {Step.DONE}, "a step without work"
