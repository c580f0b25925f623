"""``tenure service install [--prepare] | status | uninstall`` (systemd or launchd)."""

from __future__ import annotations

import os
from typing import Any

from .exits import Exit

__all__ = ["service_command"]


def _installation(args: Any) -> Any:
    from units import Installation
    scope = args.scope or ("system" if os.geteuid() == 0 else "user")
    return Installation.for_scope(scope, home=_named_home(args), user=args.user_account)


def _named_home(args: Any) -> Any:
    """The home ``--home`` or ``TENURE_HOME`` names, else None: the scope's own default
    (``/var/lib/tenure`` in system scope), never the invoking user's (root's
    ``~/.local/state/tenure``), which the CLI fills in for every other command."""
    if getattr(args, "home_given", True) or os.environ.get("TENURE_HOME"):
        return args.home
    return None


def separation(inst: Any) -> dict[str, Any]:
    """What ``service status`` says about privileges (docs/service.md, "Who can reach
    what"): in user scope apps share the user's uid, which cannot be separated."""
    if str(inst.scope) == "user":
        return {"apps_share_uid": True,
                "note": "user scope: the owner, guardian, backends and every app run as "
                        "you, so apps can reach tenure's sockets and state as you can; "
                        "tenure cannot separate processes of one uid. Run untrusted apps "
                        "under a system-scope installation."}
    return {"apps_share_uid": False, "owner": "root", "control_plane": inst.user,
            "note": f"system scope: the owner runs as root, the guardian and backends as "
                    f"{inst.user}; each app runs as the user its config names and is "
                    "refused on every socket."}


def running_code(home: Any) -> dict[str, Any]:
    """Which code each daemon of ``home`` runs: a release id, ``installed`` (the code it
    was started with) or None when it does not answer (or does not say)."""
    from protocol.layout import Layout

    from .daemons import ping
    layout = Layout(home)
    owner = ping(layout.owner_sock, home=layout.home) or {}
    guardian = ping(layout.guardian_sock, home=layout.home) or {}
    backend = guardian.get("backend") or {}

    def of(release: dict[str, Any] | None) -> str | None:
        return None if release is None else (release.get("running") or "installed")
    return {"owner": of(owner.get("release")), "guardian": of(guardian.get("guardian_release")),
            "backend": (guardian.get("selector") or {}).get("current")
            if backend.get("alive") else None}


def _code_text(v: str | None) -> str:
    return {None: "unknown (not answering)", "installed": "the installed code"}.get(
        v, f"release {v}")


def service_command(args: Any, out: Any) -> int:
    import units
    inst = _installation(args)
    if args.action == "install" and args.prepare:
        plan = units.prepare(inst)
        out(args, {**plan.to_json(), "digest": plan.digest},
            f"prepared {inst.plan_dir}: review the files there, then run `tenure service "
            f"install --scope {inst.scope} --digest {plan.digest}`")
        return Exit.OK
    if args.action == "install":
        plan = units.install(inst.plan_dir, digest=args.digest, target_dir=inst.target_dir)
        out(args, {**plan.to_json(), "digest": plan.digest}, "installed and enabled; start "
            f"with `systemctl {'--user ' if str(inst.scope) == 'user' else ''}start "
            "tenure-owner tenure`")
        return Exit.OK
    if args.action == "status":
        unit_props = units.status(inst)
        privileges = separation(inst)
        code = running_code(inst.home)
        out(args, {**unit_props, "privileges": privileges, "releases": code},
            "\n".join([*(f"{k}: {v}" for k, v in unit_props.items()),
                       *(f"{k} runs: {_code_text(v)}" for k, v in code.items()),
                       privileges["note"]]))
        return Exit.OK
    removal = units.uninstall(inst)
    out(args, removal.to_json(), "\n".join([
        f"removed {len(removal.removed)} files",
        *(f"left {path}: {why}" for path, why in removal.left)]))
    return Exit.OK
