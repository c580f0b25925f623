"""``tenure service install [--prepare] | status | uninstall`` (systemd or launchd)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["service_command"]


def _installation(args: Any) -> Any:
    from units import Installation
    scope = args.scope or ("system" if os.geteuid() == 0 else "user")
    return Installation.for_scope(scope, home=args.home, user=args.user_account)


def service_command(args: Any, out: Any) -> int:
    import units
    inst = _installation(args)
    if args.action == "install" and args.prepare:
        plan = units.prepare(inst)
        out(args, plan.to_json(), f"prepared {inst.plan_dir}: review the files there, then "
            "run `tenure service install`")
        return 0
    if args.action == "install":
        plan = units.install(inst.plan_dir)
        out(args, plan.to_json(), "installed and enabled; start with `systemctl "
            f"{'--user ' if str(inst.scope) == 'user' else ''}start tenure-owner tenure`")
        return 0
    if args.action == "status":
        st = units.status(inst)
        out(args, st, "\n".join(f"{k}: {v}" for k, v in st.items()))
        return 0
    removed = units.uninstall(inst)
    out(args, {"removed": [str(p) for p in removed]}, f"removed {len(removed)} files")
    return 0
