"""`tenure down`: stop the guardian, a backend that outlived its guardian, then the
owner (which stops every application and writes its receipt), each verified by pid and
start time, and say what still runs and why."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from protocol.layout import Layout
from protocol.procfs import read_stat, running

from .daemons import ping
from .holders import listener, lock_holder
from .upwait import shutdown_budget

__all__ = ["shutdown_receipt", "stop_all"]


def _terminate(pid: int, ticks: int | None, timeout: float) -> str | None:
    """SIGTERM one daemon by pid (only if it is still the same process) and wait until
    it is gone: None then, else why it still runs. A stopped process (SIGSTOP, a
    debugger) is not waited for: the signal stays pending until it is continued."""
    if ticks is None or not running(pid, ticks):
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(pid, ticks):
            return None
        st = read_stat(pid)
        if st is not None and st.stopped:
            return (f"pid {pid} is stopped (SIGSTOP or a debugger); SIGTERM waits until "
                    f"it is continued (kill -CONT {pid})")
        time.sleep(0.05)
    return f"pid {pid} still runs {timeout:g} s after SIGTERM"


def _stop(out: dict[str, Any], name: str, pid: int, ticks: int | None, silent: bool,
          timeout: float) -> None:
    """``out[name]``: whether daemon ``name`` is gone; ``out[name + "_problem"]``: why
    not (``silent``: it did not answer the ping either)."""
    why = _terminate(pid, ticks, timeout)
    out[name] = why is None
    if why is not None:
        out[f"{name}_problem"] = f"it does not answer; {why}" if silent else why


def stop_all(layout: Layout, timeout: float = 120.0) -> dict[str, Any]:
    """Guardian first (it retires the backend, keeping the certificate), then a backend
    still running without a guardian (its guardian was killed), then the owner, which
    stops every application and writes its clean receipt (waited for as long as its
    longest stop policy needs, and ``timeout`` at least). A guardian that still runs
    after its SIGTERM (stopped, or slow) leaves the owner and its applications running.
    A daemon that does not answer is found by the socket's peer credentials and
    signalled all the same: `down` never reports success while one still runs. Raises
    ReconcileRequired (after stopping the rest) when no owner runs but the last one died
    without a clean stop: its applications may still run (backend.cli.unclean)."""
    out: dict[str, Any] = {}
    _, guardian = _locate(layout, layout.guardian_sock, "guardian")
    if guardian is not None:
        _stop(out, "guardian", *guardian, timeout)
    if guardian is not None and not out["guardian"]:
        # it still runs (stopped, say) and holds its backend, which would count the
        # owner's shutdown kills as crashes and relaunch against it: nothing below it
        # is stopped until the guardian is
        out["owner"] = False
        out["owner_problem"] = (f"not stopped: the guardian (pid {guardian[0]}) still "
                                "runs with its backend; once it is gone, run `tenure "
                                "down` again")
        return out
    _stop_guardianless_backend(layout, out, timeout)
    _end_orphaned_probes(layout, out)
    o, owner = _locate(layout, layout.owner_sock, "owner")
    if owner is None:
        from .unclean import refuse_unclean_end
        refuse_unclean_end(layout, out)
    else:
        _stop(out, "owner", *owner, max(timeout, shutdown_budget(o)))
        if o is not None or out["owner"]:   # a silent owner's receipt: by its pid
            out["owner_receipt"] = shutdown_receipt(
                layout, o["owner"]["instance"] if o is not None else None, owner[0])
        receipt = out.get("owner_receipt", {})
        if o is not None and receipt.get("state") == "clean":
            # what its shutdown stopped, as it counted them (a `down` cut short before
            # this one: some were stopped already when it was asked), else what ran
            out["applications_stopped"] = receipt.get("applications", o["live"])
    return out


def _stop_guardianless_backend(layout: Layout, out: dict[str, Any], timeout: float
                               ) -> None:
    """A backend generation that outlived its guardian (SIGKILL, crash) is found by
    api.sock's listener and stopped (SIGTERM retires it; verified by start time) before
    the owner: left running it would try to relaunch applications against the stopped
    owner, and a later guardian would find it attached to an owner instance that is
    gone. ``out["backend"]``: whether it is gone."""
    found = listener(layout.api_sock, "backend")
    if found is not None:
        _stop(out, "backend", *found, False, timeout)


def _end_orphaned_probes(layout: Layout, out: dict[str, Any]) -> None:
    """Exec probes a backend that died left running (backend.probe_orphans): the next
    generation would end them, but none starts now. ``out["probes_ended"]``: how many
    processes were ended, when any."""
    from ..probe_orphans import sweep
    ended = sweep(layout.root)
    if ended:
        out["probes_ended"] = len(ended)


def _locate(layout: Layout, sock: str, module: str
            ) -> tuple[dict[str, Any] | None, tuple[int, int | None, bool] | None]:
    """Daemon ``module``'s status answer (None when it does not answer in 10 s) and its
    (pid, start ticks, silent), from the answer, else from the socket's listener, else
    from the holder of its lock (``module``.lock beside ``sock``: a daemon that hangs
    before it listens); None when nothing of ours listens there or holds it."""
    answer = ping(sock, timeout=10.0, home=layout.home)
    if answer is not None:
        ident = answer[module]
        return answer, (ident["pid"], ident["start_ticks"], False)
    found = listener(sock, module) or lock_holder(sock, module)
    return None, None if found is None else (*found, True)


def shutdown_receipt(layout: Layout, instance: str | None,
                     pid: int | None = None) -> dict[str, Any]:
    """What the stopped owner's receipt says: ``{state, failed_stage, detail}``; state
    ``missing`` when it wrote none for this instance (or, without one, this pid),
    ``unreadable`` when it is bad."""
    from owner.receipt import read_receipt
    from protocol.errors import TenureError
    try:
        rec = read_receipt(str(layout.execution / "owner-receipt.json"))
    except TenureError as exc:
        return {"state": "unreadable", "failed_stage": None, "detail": exc.msg}
    mine = rec is not None and (rec.get("instance") == instance if instance is not None
                                else rec.get("pid") == pid)
    if rec is None or not mine:
        return {"state": "missing", "failed_stage": None,
                "detail": "the owner wrote no receipt for this run"}
    stage = rec.get("failed_stage")
    detail = next((s.get("detail", "") for s in rec.get("stages", [])
                   if s.get("stage") == stage), "")
    if rec["state"] == "running":   # it ended without recording its shutdown
        # how it ended is not ours to see (not our child): killed, crashed, or its
        # receipt could not be written (a full disk); its log tells them apart
        detail = ("the owner ended without recording its shutdown: it was killed or died "
                  "during it, or could not write its receipt (a full disk); its log says "
                  "which stages it went through")
    out = {"state": rec["state"], "failed_stage": stage, "detail": detail}
    stopped = _stopped_count(rec)
    return out if stopped is None else {**out, "applications": stopped}


def _stopped_count(rec: dict[str, Any]) -> int | None:
    """How many launches the receipt's applications stage stopped (its detail begins
    ``N stopped``), or None when it does not say."""
    detail = next((s.get("detail") for s in rec.get("stages", [])
                   if s.get("stage") == "applications" and s.get("ok")), None)
    words = detail.split() if isinstance(detail, str) else []
    return int(words[0]) if len(words) > 1 and words[0].isdigit() and \
        words[1].rstrip(",") == "stopped" else None
