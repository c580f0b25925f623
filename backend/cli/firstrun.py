"""The first release of a home whose owner and guardian were started before it existed
(systemd starts them from the installed code; then `tenure up` installs and selects the
first release): move both onto it, so that what runs is that release everywhere.

The guardian moves in place (`guardian.upgrade`: exec, the backend kept). The owner moves
through a maintenance window with nothing to stop, only while no application runs (the
case on a first run) and only when systemd runs it: an owner somebody started by hand
may carry an environment a restart by tenure would not give it. Otherwise it is left
for `tenure owner upgrade`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.client import Client
from protocol.layout import Layout

__all__ = ["move_to_first_release"]


def move_to_first_release(layout: Layout, rid: str, guardian: Callable[[], Client],
                          api: Callable[..., Client], timeout: float) -> dict[str, Any]:
    """Move the guardian, then the owner (when idle), onto release ``rid``. Returns what
    moved: ``{guardian: bool, owner: bool}``. Raises GuardianUpgradeFailed,
    MaintenanceIncomplete, OwnerUpgradeReverted (the owner of ``rid`` could not start:
    it runs the release before) and what they raise."""
    from .daemons import ping
    from .guardiancmd import wait_moved
    from .ownerwindow import Window, begin, carry_on, held, mode_of, plan
    from .ownerwindow_cli import check_not_reverted
    moved = {"guardian": False, "owner": False}
    with guardian() as g:
        runs = (g.call("status").get("guardian_release") or {}).get("running")
        step = None if runs == rid else g.call(
            "guardian.upgrade", {"release": rid, "check": False}, timeout=timeout + 60)
    if step is not None and step["restarting"]:
        wait_moved(layout, step, timeout)
        moved["guardian"] = True
    owner = ping(layout.owner_sock, home=layout.home) or {}
    managed = owner and mode_of(owner["owner"]["pid"]) != "standalone"
    if managed and (owner.get("release") or {}).get("running") != rid and \
            owner.get("live") == 0:
        w = Window(layout, api, timeout, lambda line: None)
        with held(layout, "moving the owner to the first release"):
            p = plan(w, rid)
            check_not_reverted(carry_on(w, begin(w, p, p["digest"])))
        moved["owner"] = True
    return moved
