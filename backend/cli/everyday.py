"""What every command shares (connecting to the daemons, printing an answer), and
``tenure status``, the most frequent command, which needs nothing more.

Kept lean on purpose: this module and what it imports are all that ``tenure status``
loads (no pathlib, argparse or typing), since interpreter start-up and imports are most
of that command's time. tests/unit/backend/test_cli_imports.py holds it to that.
"""

from __future__ import annotations

import os
import sys

from protocol.client import Client
from protocol.errors import BackendUnavailable, ConnectFailed, TenureError
from protocol.layout import MAINTENANCE_KIND, Layout

from . import render
from .exits import Exit, current
from .owners import trusted_owners

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["api", "call", "cmd_status", "diagnostics", "guardian", "hung_guardian",
           "layout", "out", "runs", "unfinished_window"]


def layout(args: Any) -> Layout:
    return Layout(args.home)


def api(args: Any, timeout: float = 300.0) -> Client:
    # allow_group: with a viewer group configured the socket is 0660 (never 0666)
    sock = layout(args).api_sock
    return Client(sock, timeout=timeout, pin=False, name="cli", allow_group=True,
                  role="admin" if _is_admin(sock) else "viewer",
                  owners=trusted_owners(sock, args.home))


def _is_admin(sock: str) -> bool:
    """Root and the daemon's own user are admins; anyone else asks for the viewer role."""
    import os
    try:
        return os.geteuid() in (0, os.stat(sock).st_uid)
    except OSError:
        return True  # no socket: the connection attempt reports it


def guardian(args: Any, timeout: float = 600.0) -> Client:
    sock = layout(args).guardian_sock
    return Client(sock, timeout=timeout, pin=False, name="cli",
                  owners=trusted_owners(sock, args.home))


class OutputLost(OSError):
    """Printing a command's answer failed (stdout on a full disk, /dev/full): the
    command itself was carried out."""


def out(args: Any, obj: Any, text: str | None = None) -> None:
    """Print a command's answer (JSON with --json, else ``text``), flushed. Raises
    OutputLost when stdout cannot take it (a reader gone is BrokenPipeError, as ever)."""
    try:
        if args.json:
            import json
            print(json.dumps(obj, default=_bytes, sort_keys=True), flush=True)
        elif text is not None:
            print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputLost(exc.errno, exc.strerror) from None


def _bytes(v: Any) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


STARTING_WAIT_S = 60.0   # a change asked of a generation not ready yet waits this long
STARTING_POLL_S = 0.05


def call(args: Any, method: str, params: dict[str, Any] | None = None,
         timeout: float = 300.0) -> Any:
    """Call the backend; when none answers, say why using the guardian's diagnostics.
    An error the backend answers with (CONNECT_FAILED included: its own owner may be
    out of reach) is raised as it is. Ours is told by the connection it leaves: a
    failed connect leaves none, also one made again inside the call (a backend that
    went away just before it, as at `tenure down` or a handoff). A change a generation
    refused because it is not ready yet (SHUTTING_DOWN, ``starting``: nothing was
    changed) is asked again, of whichever generation serves then (the guardian may
    roll back from it), for up to STARTING_WAIT_S (said once on stderr after a second);
    meanwhile a refusal of any kind, or no backend answering, is waited out too: none
    changed anything."""
    import time
    deadline = time.monotonic() + min(timeout, STARTING_WAIT_S)
    told: float | None = time.monotonic() + 1.0
    waiting = False
    while True:
        try:
            return _call_once(args, method, params, timeout)
        except TenureError as exc:
            starting = exc.code_str == "SHUTTING_DOWN" and exc.data.get("starting")
            waiting = waiting or bool(starting)
            if not waiting or time.monotonic() > deadline or \
                    exc.code_str not in ("SHUTTING_DOWN", "BACKEND_UNAVAILABLE"):
                raise
            if starting and told is not None and time.monotonic() >= told:
                print(f"tenure: {exc.msg}; waiting for it to be ready", file=sys.stderr,
                      flush=True)
                told = None
            time.sleep(STARTING_POLL_S)


def _call_once(args: Any, method: str, params: dict[str, Any] | None,
               timeout: float) -> Any:
    with api(args, timeout) as c:
        try:
            return c.call(method, params or {})
        except ConnectFailed:
            if c.connected:
                raise   # the backend's own answer
            from .nobackend import facts
            said = facts(args, stopped(layout(args)))
            raise BackendUnavailable(render.unavailable(said), said) from None


def stopped(lay: Layout) -> dict[str, Any] | None:
    """When neither the guardian nor the owner runs (nothing accepts on their sockets):
    how the last owner ended, from its shutdown receipt (``owner``: ``state`` clean,
    failed or running, i.e. it ended without a shutdown; ``at``; ``failed_stage``;
    ``applications``: what its shutdown did with them), None when there is none. None
    while either daemon runs, or when we may not tell (a viewer)."""
    if runs(lay.guardian_sock, "guardian") is not False or \
            runs(lay.owner_sock, "owner") is not False:
        return None
    from owner.receipt import read_receipt
    try:
        rec = read_receipt(lay.owner_receipt)
    except Exception as exc:  # an unreadable receipt is reported, not hidden
        return {"owner": {"state": "unreadable", "error": str(exc)}}
    if rec is None:
        return {"owner": None}
    stages = {s.get("stage"): s for s in rec.get("stages") or [] if isinstance(s, dict)}
    return {"owner": {"state": rec.get("state"), "at": rec.get("updated_at"),
                      "failed_stage": rec.get("failed_stage"),
                      "applications": (stages.get("applications") or {}).get("detail")}}


def diagnostics(args: Any) -> dict[str, Any] | None:
    """The guardian's diagnostics file (runtime/supervisor-state.json); None when there is
    none, ``{unreadable}`` when it cannot be read or a field `status` reads is not of its
    type. Whether the guardian that wrote it still runs is for the caller to tell."""
    from protocol.durable import read_json
    try:
        diag = read_json(layout(args).diagnostics, "tenure-supervisor-state")
    except FileNotFoundError:
        return None
    except Exception as exc:  # unreadable diagnostics are reported, not hidden
        return {"unreadable": str(exc)}
    wrong = _unsound(diag)
    return diag if wrong is None else {"unreadable": f"its {wrong} is not of its type"}


def _unsound(diag: dict[str, Any]) -> str | None:
    """The first field of the guardian's diagnostics that `status` reads and that is not
    of its type (the file was changed by hand, or by another program), else None."""
    def maps(v: Any) -> bool:
        return v is None or type(v) is dict
    if type(diag.get("updated_at")) not in (int, float):
        return "updated_at"
    for name in ("last_activation", "blocked", "backend"):
        if not maps(diag.get(name)):
            return name
    act, gen = diag.get("last_activation") or {}, diag.get("backend") or {}
    if not isinstance(act.get("error"), str | None):
        return "last_activation's error"
    if not isinstance(gen.get("unanswered_since"), int | float | None) or \
            isinstance(gen.get("unanswered_since"), bool):
        return "backend's unanswered_since"
    return None


def cmd_status(args: Any) -> int:
    if args.watch:
        return _watch_status(args)
    return _status_once(args)


def _status_once(args: Any) -> int:
    window = unfinished_window(layout(args))
    try:
        st = call(args, "status", {"targets": args.targets} if args.targets else None,
                  timeout=10.0)
    except BackendUnavailable as exc:
        from .background import last_background_start
        from .nobackend import facts
        # why, as every command's BACKEND_UNAVAILABLE says it (nobackend.facts)
        said = exc.data if "none_coming" in exc.data else facts(args, exc.data.get("stopped"))
        last = last_background_start(layout(args))
        out(args, {"ok": False, "backend": None, **said, "background_start": last,
                   "maintenance_unfinished": window},
            render.no_backend_of(said, last) + render.unfinished_window(window))
        return Exit.UNREACHABLE
    st["guardian_running"] = listens(layout(args).guardian_sock)
    st["guardian_hung"] = hung_guardian(layout(args).guardian_sock,
                                       st["guardian_running"])
    st["maintenance_unfinished"] = window
    out(args, st, render.status(st))
    return current(st)


def unfinished_window(lay: Layout) -> dict[str, Any] | None:
    """``{step[, running]}`` of an owner maintenance window that is not done (its apps may
    be stopped, its owner being replaced), from execution/maintenance.json, with the pid
    of its command while that runs (it holds execution/maintenance.lock); None when there
    is none, it is done, or it cannot be read here (a viewer: `tenure owner upgrade`
    says more). One stat on a home that never had a window."""
    path = lay.maintenance
    if not os.path.lexists(path):
        return None
    from protocol.durable import read_json
    try:
        step = read_json(path, MAINTENANCE_KIND).get("step")
    except Exception:   # unreadable here: the window's own command reports it
        return None
    if step in (None, "done"):
        return None
    from protocol.window import holder
    running = holder(lay.home)   # the window's command, while it runs
    return {"step": step} if running is None else {"step": step, "running": running}


def hung_guardian(sock: str, listening: bool | None) -> dict[str, Any] | None:
    """``{pid, msg}`` of a guardian that holds its lock but does not listen on ``sock``
    (hung before it listens; ``listening``: :func:`listens` of ``sock``), else None."""
    if listening is not False:
        return None   # it listens (a busy or stopped one is said otherwise), or may not tell
    from .holders import silent_holder
    hung = silent_holder(sock, "guardian")
    return None if hung is None else {"pid": hung.data["pid"], "msg": hung.msg}


def owner_stopping(args: Any) -> int | None:
    """The pid of the owner when it answers that it is shutting down (a `tenure down`
    cut short goes on stopping every application), else None."""
    from .daemons import ping
    lay = layout(args)
    answer = ping(lay.owner_sock, home=lay.home)
    return answer["owner"]["pid"] if answer and answer.get("draining") is True else None


def up_running(lay: Layout) -> int | None:
    """The pid of a `tenure up` under way, or of the background start of `tenure up
    --no-wait` (either holds runtime/up.lock), else None. /proc/locks is read only when
    the lock is held."""
    from protocol.procholders import flock_holder
    return flock_holder(lay.up_lock, opened=False)


def down_running(args: Any) -> int | None:
    """The pid of a `tenure down` under way (it holds execution/maintenance.lock): the
    guardian may be gone before the owner is told to stop."""
    from protocol import window
    return window.down_running(layout(args).home)


def runs(sock: str, module: str) -> bool | None:
    """Whether daemon ``module`` runs: it accepts on ``sock``, or (hung before it
    listens) holds its lock; None when we may not tell (a viewer)."""
    said = listens(sock)
    if said is not False:
        return said
    from .holders import silent_holder
    return silent_holder(sock, module) is not None


def listens(sock: str) -> bool | None:
    """Whether a process accepts connections on ``sock``: one connect, nothing sent
    (a daemon that is busy or stopped still accepts; one that is gone refuses). None
    when we may not tell: the socket is not ours to reach (a viewer)."""
    from protocol.sockets import peer_of
    try:
        peer_of(sock, 1.0)
        return True
    except PermissionError:
        return None
    except OSError:
        return False


def _watch_status(args: Any) -> int:
    """``status -w``: redraw every ``--every`` seconds (like watch(1)) until Ctrl-C, which
    ends it with the last status's exit code. Off a terminal each snapshot follows the
    previous one after a blank line."""
    from .watch import error_frame, redraw

    def draw() -> int:
        try:
            return _status_once(args)
        except TenureError as exc:   # a target gone, a handoff: show it, go on
            return error_frame(exc, args.json)
    title = f"tenure status {' '.join(args.targets)}".rstrip()
    return redraw(title, max(args.every, 0.2), sys.stdout.isatty() and not args.json, draw)
