"""The first release of a home: placed before the owner and the guardian first start, so
that they run it from the start (:func:`place_first_release`), or, once the guardian
answers, installed and selected, which starts the first backend generation
(:func:`ensure_release`).

Daemons started before it existed (systemd starts them from the installed code; then
`tenure up` installs and selects the first release) are moved onto it, so that what runs
is that release everywhere (:func:`move_to_first_release`). The guardian moves in place
(`guardian.upgrade`: exec, the backend kept). The owner moves through a maintenance
window with nothing to stop, only while no application runs (the case on a first run)
and only when systemd runs it: an owner somebody started by hand may carry an
environment a restart by tenure would not give it. Otherwise it is left for
`tenure owner upgrade`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.client import Client
from protocol.errors import BadRequest, OperationInProgress, RequestTimedOut
from protocol.layout import Layout
from protocol.sockets import ensure_private_dir

from .daemons import ping
from .sealtmp import sealed_here, sweep

__all__ = ["ensure_release", "move_to_first_release", "place_first_release"]


def place_first_release(layout: Layout, sealed: Path | None) -> Path | None:
    """On a fresh home (no guardian state, no daemon answering): install the first
    release (``sealed``, or one sealed from the installed tenure) into runtime/releases
    and record it as the code the owner and the guardian run, before they start, so
    that both start from it. Returns the installed release's path, or None when the
    home is not fresh. Raises what sealing and installing raise."""
    if os.path.exists(layout.guardian_db) or ping(layout.owner_sock, home=layout.home) \
            or ping(layout.guardian_sock, home=layout.home):
        return None
    from guardian.own import Pointer
    from guardian.own import save as save_guardian_release
    from guardian.paths import GuardianPaths
    from guardian.trust import install_trusted
    from owner.release import OwnerRelease
    from owner.release import save as save_owner_release
    paths = GuardianPaths(layout.home)
    for d in (layout.execution, layout.releases):
        ensure_private_dir(d, root=layout.home)
    sweep(layout)
    if sealed is not None:
        path = install_trusted(paths, sealed.absolute()).path
    else:
        with sealed_here(layout) as src:
            path = install_trusted(paths, src).path
    save_guardian_release(paths.guardian_release, Pointer(path.name))
    save_owner_release(layout.owner_release, OwnerRelease(path.name))
    return path


def ensure_release(layout: Layout, guardian: Client, sealed: Path | None = None,
                   timeout: float = 120.0) -> str | None:
    """When no release is selected (first run): install ``sealed``, or seal the installed
    tenure, and select it, which starts the first backend generation: waited for up to
    ``timeout`` (the guardian retries a start that fails, with backoff; a start still
    under way is then backend.cli.backendwait.ensure_backend's to wait for, or to
    explain). Returns the release this call selected, None when it selected none (one
    was selected, by another `up` at the same time too, or by the guardian's boot for
    the generation it adopted). Selects nothing while the guardian holds a living generation, or may
    still adopt one (:func:`_settled`): a select is refused beside it."""
    sweep(layout)   # every `up`: a seal tree an interrupted one left (11 MB) goes
    deadline = time.monotonic() + timeout
    st = _settled(layout, guardian, deadline)
    if st["selector"]["current"] is not None or _holds_live(st):
        return None   # a generation it holds runs: a select would be refused beside it
    if sealed is not None:
        rid = guardian.call("release.install", {"path": str(sealed.absolute())},
                            timeout=300)["release"]
    else:
        with sealed_here(layout) as src:
            rid = guardian.call("release.install", {"path": str(src)}, timeout=300)["release"]
    try:
        answer = _select_first(guardian, str(rid), timeout)
    except RequestTimedOut:
        return str(rid)   # selected; the start goes on in the guardian
    except BadRequest:
        st = guardian.call("status")   # a generation came meanwhile, or its release
        if st["selector"]["current"] is not None or _holds_live(st):
            return None
        raise
    # another `up` at the same time selected it first, and its backend runs
    return None if answer.get("started") is False else str(rid)


def _settled(layout: Layout, guardian: Client, deadline: float) -> dict[str, Any]:
    """The guardian's status once no release is selected only because none is: a
    guardian that has just started answers before it boots, and its boot adopts a
    generation that outlived the guardian before it and, when its record selects
    nothing (a new state.db beside a damaged one set aside), selects the release that
    generation runs, which is often not the installed code (any home upgraded since).
    So while it boots or another command runs (it holds its command lock), or while a
    generation answers on api.sock that it does not hold, it is asked again every 50 ms
    until ``deadline``; the status it gave last then. Raises what asking it raises."""
    while True:
        st: dict[str, Any] = guardian.call("status")
        if st["selector"]["current"] is not None or time.monotonic() >= deadline or \
                not _may_adopt(layout, st):
            return st
        time.sleep(0.05)


def _may_adopt(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the guardian whose status is ``st`` may still take up a generation (and
    select its release): it holds its command lock (its boot, or a start under way), or
    a generation answers on api.sock that it does not hold (it has not booted yet)."""
    if st.get("handoff_in_progress"):
        return True
    live = ping(layout.api_sock, home=layout.home)
    if live is None:
        return False
    held = (st.get("backend") or {}).get("pid")
    return held is None or held != (live.get("backend") or {}).get("pid")


def _holds_live(st: dict[str, Any]) -> bool:
    """Whether the guardian whose status is ``st`` holds a living generation."""
    return bool((st.get("backend") or {}).get("alive"))


def _select_first(guardian: Client, rid: str, timeout: float) -> dict[str, Any]:
    """Select the first release, once the guardian's own start lets it: it answers on
    its socket before it has connected to the owner and booted, and holds its command
    lock while it boots, refusing a select meanwhile (OPERATION_IN_PROGRESS), for a
    moment or, on a busy machine, longer. Asked again every 50 ms within ``timeout``.
    Returns its answer. Raises what the select raises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer: dict[str, Any] = guardian.call(
                "release.select", {"release": rid, "start": True},
                timeout=max(deadline - time.monotonic(), 0.001))
            return answer
        except OperationInProgress:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def move_to_first_release(layout: Layout, rid: str, guardian: Callable[[], Client],
                          api: Callable[..., Client], timeout: float) -> dict[str, Any]:
    """Move the guardian, then the owner (when idle), onto release ``rid``. Returns what
    moved: ``{guardian: bool, owner: bool}``. Raises GuardianUpgradeFailed,
    MaintenanceIncomplete, OwnerUpgradeReverted (the owner of ``rid`` could not start:
    it runs the release before) and what they raise."""
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
