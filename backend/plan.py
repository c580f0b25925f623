"""Plans: the exact changes an operation will make, bound to a fingerprint.

A plan compares a candidate config with the applied one, and with what the instances
run (an operation that failed or was abandoned leaves the applied config ahead of
them). Its fingerprint covers the candidate's revision, the live-state revision it was
computed against (:func:`live_revision`: everything besides the candidate a plan is
made from) and the parameters; apply refuses with ``STALE_PLAN`` when either revision
moved since.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from .config import order_apps
from .instance_types import PUBLIC_STATE, PublicState
from .model import DEFINITION, App, Config, canonical_digest, plain

__all__ = ["compute_changes", "live_revision", "new_plan", "rolling_out",
           "running_definitions", "setting_changes", "shown_stopped", "steps_for"]


def live_revision(applied: Config, intents: dict[str, Any], instance_keys: list[str],
                  running: Running | None = None, stopped: Stopped | None = None,
                  rolling: Stopped | None = None) -> str:
    """Digest of what a plan is made from besides its config: the applied config, the
    stack intents, the set of instances, and the three inputs of :func:`compute_changes`
    that read the instances (``running``, ``stopped``, ``rolling``). Two plans of one
    config with the same digest list the same changes. (Was: the first three only, so a
    plan made while a roll ran stayed applicable once it ended, listing restarts of
    instances that then ran the new definition.)"""
    return canonical_digest({"config": applied.revision,
                             "intents": {k: v.get("revision") for k, v in intents.items()},
                             "instances": sorted(instance_keys),
                             "running": {k: {str(i): d for i, d in v.items()}
                                         for k, v in (running or {}).items()},
                             "stopped": dict(stopped or {}),
                             "rolling": dict(rolling or {})})


def _policy(app: App) -> dict[str, Any]:
    d: dict[str, Any] = plain(app)
    for k in (*DEFINITION, "instances"):   # the definition, and the count
        d.pop(k, None)
    return d


Running = Mapping[str, Mapping[int, str]]
"""What runs: app key -> {instance index: the digest of the definition it runs}."""

Stopped = Mapping[str, list[int]]
"""App key -> indexes of its instances, sorted (:func:`shown_stopped`,
:func:`rolling_out`)."""

STALE = "running an older definition"


def running_definitions(instances: Iterable[Any], held: Iterable[str] = ()
                        ) -> dict[str, dict[int, str]]:
    """:data:`Running` of the backend's instances (each with ``app``, ``index`` and
    ``started``: whether it was ever launched; one never started is not counted, so the
    plan still starts it, unless its stack is one of ``held``, the stopped stacks: it is
    recorded there, to start with the stack); an App shared by instances is digested
    once."""
    out: dict[str, dict[int, str]] = {}
    digests: dict[int, str] = {}
    held = frozenset(held)
    for inst in instances:
        if not inst.started and inst.app.stack not in held:
            continue
        app = inst.app
        digest = digests.get(id(app)) or digests.setdefault(id(app), app.definition_digest())
        out.setdefault(app.key, {})[inst.index] = digest
    return out


def shown_stopped(instances: Iterable[Any]) -> dict[str, list[int]]:
    """App key -> the indexes of its instances shown ``stopped``: stopped by an operator
    (`tenure stop`), or ended on their own and left down by their restart policy
    (``exited``). A restart of the app gives them the new definition and leaves them
    down (backend.operations). (Was: ``stopped`` only; the step started an exited one,
    and the plan did not say so.)"""
    out: dict[str, list[int]] = {}
    for inst in instances:
        if PUBLIC_STATE[inst.state] is PublicState.STOPPED:
            out.setdefault(inst.app.key, []).append(inst.index)
    return {k: sorted(v) for k, v in out.items()}


def rolling_out(steps: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """App key -> the instances that ``steps`` (those an open operation has still to
    run) restart: the operation rolls the applied definition out to them, so a plan
    made meanwhile does not list them as running an older one."""
    out: dict[str, set[int]] = {}
    for s in steps:
        if s["do"] == "restart_instance":
            out.setdefault(s["app"], set()).add(s["instance"])
    return {k: sorted(v) for k, v in sorted(out.items())}


Retune = Mapping[str, list[str]]
"""App key -> its held sockets whose backlog, mode or owner the config changes
(backend.activation.retuned); None where the owner cannot change them in place."""


def compute_changes(old: Config, new: Config, running: Running | None = None,
                    stopped: Stopped | None = None, retune: Retune | None = None,
                    rolling: Stopped | None = None) -> list[dict[str, Any]]:
    """Every difference per app, in a stable order: start, restart, scale, update per
    app in name order, then the stops in the order they are made (:func:`_stop_order`).
    With ``running``, also what an operation that failed or was abandoned left undone:
    the applied config names it, the instances do not run it (a definition not rolled
    out, an app not started or not stopped, a scale not made); but not the instances
    ``rolling`` (:func:`rolling_out`) names, which an open operation still restarts.
    ``stopped`` (:func:`shown_stopped`) adds to a restart the instances it leaves
    stopped (``stay_stopped``). ``retune`` (:data:`Retune`) adds the held sockets an
    update changes in place; without it, a changed socket setting restarts the app."""
    changes = _changes(old, new, running, retune, rolling or {})
    for c in changes:
        if c["action"] != "restart":
            continue
        reach = c.get("only", range(c["instances"]))
        held = [i for i in (stopped or {}).get(c["app"], ()) if i in reach]
        if held:
            c["stay_stopped"] = held
    return changes


def _changes(old: Config, new: Config, running: Running | None, retune: Retune | None,
             rolling: Stopped) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    old_apps = {a.key: a for a in old.apps()}
    new_apps = {a.key: a for a in new.apps()}
    for key in sorted(new_apps):
        n, o = new_apps[key], old_apps.get(key)
        r = None if running is None else running.get(key, {})
        if o is None or (r == {} and n.instances):
            changes.append({"action": "start", "app": key, "instances": n.instances})
            continue
        defined = n.definition_digest() != o.definition_digest()
        # an owner that cannot change a held socket in place applies it at a launch
        sockets = retune is None and n.socket_settings() != o.socket_settings()
        if defined or sockets:
            # only the instances that ran the old one: one that scaling adds starts on
            # the new definition (and one it removes is not restarted first)
            kept = min(n.instances, o.instances)
            if kept:
                keys = _differ(n.definition(), o.definition()) if defined else []
                changes.append({"action": "restart", "app": key, "instances": kept,
                                "reason": _said("definition", keys) if defined else
                                "socket settings changed",
                                **({"changed": keys} if keys else {})})
        elif r is not None:
            changes += _stale(n, r, rolling.get(key, ()))
        if n.instances != o.instances:
            changes.append({"action": "scale", "app": key, "from": o.instances,
                            "to": n.instances})
        elif r is not None and set(r) != set(range(n.instances)):
            changes.append({"action": "scale", "app": key, "from": len(r),
                            "to": n.instances})
        changes += _updates(key, _differ(_policy(n), _policy(o)),
                            (retune or {}).get(key, []))
    gone = set(old_apps) | set(running or {})
    for key in _stop_order(old, gone - set(new_apps)):
        count = len(running[key]) if running and key in running else old_apps[key].instances
        changes.append({"action": "stop", "app": key, "instances": count})
    return changes


def _stop_order(old: Config, keys: set[str]) -> list[str]:
    """``keys`` (apps to stop) in the order they stop: ``after`` orders a start and, as
    in systemd, the reverse stop, so an app stops before the apps it waits for. Stack by
    stack in name order, the levels of ``old``'s start order last first, names sorted
    within a level, as an owner maintenance window stops them. An app ``old`` does not
    name (left running by an operation that did not finish) goes first in its stack: no
    app of ``old`` can wait for it."""
    rank = {f"{stack.name}/{name}": i for stack in old.stacks.values()
            for i, name in enumerate(n for level in reversed(order_apps(stack))
                                     for n in level)}
    return sorted(keys, key=lambda k: (k.split("/")[0], rank.get(k, -1), k))


def _updates(key: str, policy: list[str], sockets: list[str]) -> list[dict[str, Any]]:
    """The update of app ``key``: the keys of its policy that changed, and held sockets
    changed in place."""
    if not policy and not sockets:
        return []
    reason = "; ".join(said for said, yes in ((_said("policy", policy), policy),
                                              ("socket settings changed", sockets)) if yes)
    out: dict[str, Any] = {"action": "update", "app": key, "reason": reason}
    if policy:
        out["changed"] = policy
    if sockets:
        out["sockets"] = sorted(sockets)
    return [out]


def _differ(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The config keys whose values differ between two apps' ``new`` and ``old`` (their
    names only: an env value may be a secret)."""
    return sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k))


def _said(what: str, keys: list[str]) -> str:
    """``definition changed: command, env``."""
    return f"{what} changed" + (f": {', '.join(keys)}" if keys else "")


SETTINGS = ("settings", "metrics", "retention")
"""The config's tables besides its stacks: what they set applies at once with the plan."""


def setting_changes(old: Config, new: Config) -> list[dict[str, Any]]:
    """The settings a plan changes besides apps and jobs (the metrics listener, the
    viewer group, retention counts), as ``{setting, from, to}``, sorted."""
    out = []
    for table in SETTINGS:
        before, after = plain(getattr(old, table)), plain(getattr(new, table))
        out += [{"setting": f"{table}.{k}" if table != "settings" else k,
                 "from": before.get(k), "to": after.get(k)}
                for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    return out


def _stale(app: App, running: Mapping[int, str], rolling: Iterable[int]
           ) -> list[dict[str, Any]]:
    """A restart of the instances of ``app`` that run another definition than it, but
    those an open operation still restarts (``rolling``)."""
    digest, rolled = app.definition_digest(), frozenset(rolling)
    only = sorted(i for i, d in running.items()
                  if i < app.instances and d != digest and i not in rolled)
    return [{"action": "restart", "app": app.key, "instances": app.instances,
             "only": only, "reason": STALE}] if only else []


def steps_for(new: Config, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ordered steps of applying ``changes``: stops first, one app after the other in
    the order ``changes`` lists them (:func:`compute_changes`: an app before the apps it
    waits for, the reverse of their start), then starts level by level
    along ``after`` (each level at once), then scaling, then rolling restarts one
    instance at a time, an app after the apps it waits for (``after``), then held
    sockets changed in place."""
    by = {c["app"]: c for c in changes}
    steps: list[dict[str, Any]] = [{"do": "stop_app", "app": c["app"]}
                                   for c in changes if c["action"] == "stop"]
    order: list[str] = []   # every app of ``new``, stack by stack, level by level
    for stack in new.stacks.values():
        for level in order_apps(stack):
            keys = [f"{stack.name}/{n}" for n in level]
            order += keys
            starts = [k for k in keys if by.get(k, {}).get("action") == "start"]
            if starts:  # one level starts together; the next waits for it to be ready
                steps.append({"do": "start_apps", "apps": starts})
    for c in changes:
        if c["action"] == "scale":
            steps.append({"do": "scale_app", "app": c["app"], "to": c["to"]})
    rank = {k: i for i, k in enumerate(order)}
    for c in sorted((c for c in changes if c["action"] == "restart"),
                    key=lambda c: rank.get(c["app"], len(rank))):
        steps += [{"do": "restart_instance", "app": c["app"], "instance": i}
                  for i in c.get("only", range(c["instances"]))]
    # last: an operation resumed by a release that predates these steps finds the ones
    # before at the same indexes (a restart's launch hands the settings over anyway)
    steps += [{"do": "update_sockets", "app": c["app"], "sockets": c["sockets"]}
              for c in changes if c["action"] == "update" and c.get("sockets")]
    return steps


def new_plan(old: Config, new: Config, text: str, source: str, live: str,
             kind: str = "apply", running: Running | None = None,
             stopped: Stopped | None = None, retune: Retune | None = None,
             rolling: Stopped | None = None) -> dict[str, Any]:
    changes = compute_changes(old, new, running, stopped, retune, rolling)
    fingerprint = canonical_digest({"config": new.revision, "live": live, "kind": kind})
    return {"id": f"plan-{uuid.uuid4().hex[:12]}", "config_text": text, "config_source": source,
            "config_revision": new.revision, "live_revision": live,
            "fingerprint": fingerprint, "changes": changes, "kind": kind,
            "stacks": sorted({c["app"].split("/")[0] for c in changes})}
