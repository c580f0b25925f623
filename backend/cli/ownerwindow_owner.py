"""The owner process under the maintenance window (backend.cli.ownerwindow): stopping
it (SIGTERM standalone, its unit under systemd), or the owner started in its place
since; starting one and waiting until a new instance answers; the guardian the window's
backend needs. Each waits through the window's own bound (``Window.wait``)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import TYPE_CHECKING, Any

from protocol.errors import Conflict, ServiceError
from protocol.layout import Layout
from protocol.procfs import running

from .ownerplan import UNIT, mode_of

if TYPE_CHECKING:
    from .ownerwindow import Window


def end_owner(w: Window, ident: dict[str, Any], mode: str) -> None:
    """Stop the owner ``ident`` (pid and start time) unless it is gone: SIGTERM
    standalone, its unit under systemd; wait for its exit."""
    if not running(ident["pid"], ident["start_ticks"]):
        return
    w.say(f"stopping the owner (pid {ident['pid']})")
    if mode == "standalone":
        os.kill(ident["pid"], signal.SIGTERM)
    else:
        systemctl(mode, "stop")
    w.wait("the owner's exit", lambda: not running(ident["pid"], ident["start_ticks"]))


def stop_successor(w: Window, owner: dict[str, Any]) -> None:
    """Stop the owner that answers in place of the planned ``owner`` (gone): one a
    `tenure down` and `tenure up` started after the window stopped at ``staged``. It is
    this window's to replace: it could start only once the planned owner had ended
    clean or been reconciled, and the drain just stopped the planned instances on it.
    One that runs launches all the same (apps started beside the window, which it would
    not start again) is not stopped: raises Conflict saying what to do."""
    st = w.owner_status()
    if st is None or st["owner"]["instance"] == owner["instance"]:
        return
    other = st["owner"]
    live, uncertain = st.get("live") or 0, st.get("uncertain") or []
    if live or uncertain:
        raise Conflict(
            f"an owner started outside the window (instance {other['instance']}, pid "
            f"{other['pid']}) runs {live} launches ({len(uncertain)} uncertain) that the "
            "plan does not name; stopping it would stop them and the window would not "
            "start them again: stop them, or `tenure down`, then `tenure owner upgrade "
            "--continue`", {"owner": other, "live": live, "uncertain": uncertain})
    end_owner(w, other, mode_of(other["pid"]))


def successor_ended_clean(layout: Layout, owner: dict[str, Any]) -> bool:
    """Whether an owner started after the planned one (outside the window: a `tenure up`
    before `--continue`) has ended with a clean receipt: it could only start once the
    planned owner had ended clean or been reconciled, and it left nothing running."""
    from owner.receipt import read_receipt
    try:
        rec = read_receipt(layout.owner_receipt)
    except Exception:   # unreadable: the caller's 'missing' stands
        return False
    return rec is not None and rec.get("instance") != owner["instance"] and \
        rec.get("state") == "clean"


def bring_up_owner(w: Window, rec: dict[str, Any]) -> None:
    """Start the owner unless one answers, wait for a new instance and record it."""
    p = rec["plan"]
    if w.owner_status() is None:
        w.say("starting the owner")
        if p["mode"] == "standalone":
            from .daemons import ensure_daemon
            ensure_daemon(w.layout, "owner", w.layout.owner_sock, foreground=False)
        else:
            systemctl(p["mode"], "start")
    st = w.wait("a new owner answering", lambda: (lambda s: s if s is not None and
                s["owner"]["instance"] != p["owner"]["instance"] else None)(w.owner_status()))
    rec["progress"]["owner"] = st["owner"]
    rec["progress"]["owner_release"] = st.get("release")


def ensure_guardian(w: Window) -> None:
    """Standalone: start the guardian unless it answers (a `tenure down` since an
    interruption stopped it); its backend is what the window stops and starts
    instances through."""
    from .daemons import ensure_daemon
    if ensure_daemon(w.layout, "guardian", w.layout.guardian_sock, foreground=False)[0]:
        w.say("started the guardian")


def systemctl(mode: str, verb: str) -> None:
    argv = ["systemctl", *(["--user"] if mode == "systemd-user" else []), verb, UNIT]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise ServiceError(f"{' '.join(argv)} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}", {"argv": argv})


def journal(mode: str) -> str:
    """Where the owner's output is under systemd."""
    return f"journalctl {'--user ' if mode == 'systemd-user' else ''}-u {UNIT}"


