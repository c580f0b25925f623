"""Why no backend generation answers, found once for every command: `tenure status`
("backend: not available; …"), every command's BACKEND_UNAVAILABLE, and the waits of
`job run` and `apply --wait`, which end at once when none is coming.

The facts are learnt from the kernel and /proc (who accepts on a socket, who holds a
lock, who is stopped), not from the guardian's diagnostics file: that file outlives
the guardian, and once the guardian is not running what it says of the backend and of
the owner link is of daemons that are gone, so it is not read then. Loaded only when no
backend answered: `tenure status` of a running tenure never imports it.
"""

from __future__ import annotations

from . import everyday, holders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["facts", "none_coming"]


def facts(args: Any, down: dict[str, Any] | None) -> dict[str, Any]:
    """Why no backend answers, as the ``data`` of BACKEND_UNAVAILABLE and the fields of
    `status --json` without one: ``stopped`` (``down``: everyday.stopped, tenure is not
    running), ``guardian_running`` (everyday.listens of its socket; None: we may not
    tell), ``guardian_hung`` ({pid, msg} of one that holds its lock but does not
    listen), and, the guardian gone: ``owner_stopped`` ({pid, term_pending}),
    ``owner_shutting_down`` and ``down_running`` (pids), ``service_managed`` (whether
    a service manager restarts the guardian); ``up_running`` (the pid of a `tenure up`
    under way); ``diagnostics`` (the guardian's file, null unless the guardian may
    run); ``none_coming`` (no backend comes by itself: :func:`none_coming`)."""
    lay = everyday.layout(args)
    running = None if down is not None else everyday.listens(lay.guardian_sock)
    hung = None if down is not None else everyday.hung_guardian(lay.guardian_sock, running)
    gone = down is None and running is False and hung is None
    held = _stopped_owner(lay.owner_sock) if gone else None
    stopping = everyday.owner_stopping(args) if gone and held is None else None
    downing = everyday.down_running(args) if gone else None
    said = {"diagnostics": None if down is not None or gone else everyday.diagnostics(args),
            "stopped": down, "guardian_running": running, "guardian_hung": hung,
            "owner_stopped": held, "owner_shutting_down": stopping,
            "down_running": downing,
            "up_running": everyday.up_running(lay) if running is not True else None,
            "service_managed": _service_managed(lay.owner_sock) if gone else None}
    return {**said, "none_coming": none_coming(said)}


def none_coming(said: dict[str, Any]) -> bool:
    """Whether no backend comes by itself, from :func:`facts`: tenure is not running, the
    guardian's recovery is blocked (until `tenure backend recover`), or the guardian is
    not running while nothing restarts it (the owner runs outside a service manager,
    is stopped, or is shutting down), and no `tenure up` is starting tenure."""
    diag = said.get("diagnostics")
    if said.get("stopped") is not None or (isinstance(diag, dict) and diag.get("blocked")):
        return True
    gone = said.get("guardian_running") is False and said.get("guardian_hung") is None
    going = said.get("owner_shutting_down") is not None or \
        said.get("down_running") is not None
    if said.get("up_running") is not None and not going:
        return False
    return gone and (going or said.get("owner_stopped") is not None or
                     not said.get("service_managed"))


def _stopped_owner(sock: str) -> dict[str, Any] | None:
    """``{pid, term_pending}`` of an owner that accepts on ``sock`` but is stopped
    (SIGSTOP, a debugger), ``term_pending`` when a SIGTERM (`tenure down`'s) waits in
    it: continued, it shuts down and stops every application. Else None."""
    from protocol.procfs import read_stat, signal_pending
    found = holders.listener(sock, "owner")
    st = read_stat(found[0]) if found is not None else None
    if found is None or st is None or not st.stopped:
        return None
    return {"pid": found[0], "term_pending": signal_pending(found[0], holders.SIGTERM)}


def _service_managed(owner_sock: str) -> bool:
    """Whether the owner runs in its service unit (``tenure service``): there the service
    manager restarts a guardian that died (``Restart=always``), so a backend comes."""
    from . import ownerplan
    found = holders.listener(owner_sock, "owner") or holders.lock_holder(owner_sock, "owner")
    return found is not None and ownerplan.mode_of(found[0]) != "standalone"
