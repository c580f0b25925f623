"""``tenure backend``: the backend generations, through the guardian (status, upgrade,
abort, rollback, recover with its config, prune).
"""

from __future__ import annotations

import os

from backend.configfile import read_config_text
from protocol.client import Client
from protocol.errors import BadRequest, TenureError

from . import render
from .everyday import api as _api
from .everyday import call as _call
from .everyday import guardian as _guardian
from .everyday import layout as _layout
from .everyday import out as _out
from .exits import Exit, current
from .plans import parse_here
from .progress import live, said_if_stopped
from .releases import cli_against, resolve_release

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["cmd_backend"]

OK, ERROR = Exit.OK, Exit.ERROR


def cmd_backend(args: Any) -> int:
    if args.config is not None and args.action != "recover":
        raise BadRequest(f"tenure backend {args.action} takes no --config (`tenure backend "
                         "recover --config FILE` does)", {"field": "config"})
    if args.action == "prune":
        r = _call(args, "retention.run", {})
        missed = r.get("not_pruned") or {}   # an older backend does not say
        _out(args, r, render.pruned(r["deleted"], r["policy"], missed))
        return ERROR if missed else OK
    with _guardian(args) as g:
        if args.action == "status":
            r = g.call("status")
            _why_silent(r.get("backend"))
            r["recovery"] = _uncertifiable(args, r, render.recovery_state(r))
            owner = _owner_status(args)
            r["owner_release"] = None if owner is None else owner.get("release")
            r["owner_epoch"] = None if owner is None else owner.get("epoch")
            r["cli"] = cli_against(_layout(args), (r.get("selector") or {}).get("current"))
        elif args.action == "upgrade":
            if not args.release:
                raise BadRequest("tenure backend upgrade RELEASE: give a release id, a "
                                 "unique prefix of one, or a sealed release directory "
                                 "(see `tenure release list`)")
            rid = resolve_release(g, args.release, install=True)
            with live(args, "upgrade", _activation_probe(args)), \
                    said_if_stopped("guardian", _peer(g)):
                r = g.call("upgrade", {"release": rid, "check": args.check})
        elif args.action == "recover":
            params = {"force": args.force, "dry_run": args.dry_run,
                      **({"digest": args.digest} if args.digest else {})}
            given = _queue_given(args, g)
            try:
                with live(args, "recover", _activation_probe(args)), \
                        said_if_stopped("guardian", _peer(g)):
                    r = g.call("recover", params)
            except BaseException as exc:   # an interrupt too: nothing of it stays queued
                _withdraw(args, given, exc)
                raise
            if args.dry_run:
                _out(args, r, render.recover_plan(r))
                return OK
        else:
            with live(args, args.action, _activation_probe(args)), \
                    said_if_stopped("guardian", _peer(g)):
                r = g.call(args.action)
    _out(args, r, render.backend(args.action, r))
    act = r.get("activation") if isinstance(r, dict) else None
    if isinstance(act, dict) and act.get("outcome") not in (None, "success", "check-only"):
        return ERROR
    return current(r) if args.action == "status" else OK


def _why_silent(b: dict[str, Any] | None) -> None:
    """A living backend the guardian finds not answering: ``process``, what /proc says
    of it (stopped: with the kill -CONT that continues it), as `tenure status` says."""
    from .render_backend import not_answering, why_silent
    if b is not None and not_answering(b) is not None:
        b["process"] = why_silent(b.get("pid"))


def _peer(client: Client) -> Any:
    """The pid of the daemon ``client`` talks to, once it connected (None before)."""
    return lambda: client.welcome.identity.pid if client.welcome is not None else None


def _queue_given(args: Any, guardian: Client) -> str | None:
    """`backend recover --config FILE`: the config, read and parsed here, queued for the
    generation the recovery starts (backend.configrestore); its request id. Refused
    before anything is queued while a backend runs (its spool would apply the file:
    there is nothing to recover, and `tenure up --config` applies a config) or another
    config waits in the queue (it would be replaced, and withdrawn with ours)."""
    if args.config is None:
        return None
    if args.dry_run:
        raise BadRequest("--config is for a recovery, not its --dry-run: the plan does "
                         "not depend on it", {"field": "config"})
    if (guardian.call("status").get("backend") or {}).get("alive"):
        raise BadRequest("a backend generation runs: there is nothing to recover, and "
                         "`tenure up --config FILE` applies a config", {"field": "config"})
    layout = _layout(args)
    from backend.queuefile import files
    waiting = [f for f in files(layout.queued_config)[:2] if os.path.lexists(f)]
    if waiting:   # queued, or taken by a generation that did not decide it
        raise BadRequest(f"a config is queued already ({waiting[0]}); `tenure status` "
                         "says what becomes of it", {"field": "config"})
    from .daemons import queue_for_backend
    text = read_config_text(args.config)
    parse_here(text, str(args.config.absolute()))
    return str(queue_for_backend(layout, text, str(args.config.absolute()))["request_id"])


def _withdraw(args: Any, given: str | None, exc: BaseException) -> None:
    """The config a refused or interrupted recovery was given, taken out of the queue
    again: nothing of it is applied later, by whatever backend comes next."""
    if given is None:
        return
    from backend.queuefile import discard
    if discard(_layout(args).queued_config, given) and isinstance(exc, TenureError):
        exc.msg += f"; {args.config} was not kept for a later backend"


def _uncertifiable(args: Any, r: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Recovery ``state`` as the guardian's status ``r`` gives it, made ``unavailable``
    when the backend says its storage refuses the recovery certificate (a full disk):
    the guardian's view alone reads "pending, certifies again within 5 s", or "ready"
    for the last certificate written, which no longer vouches for what runs once an
    app exited meanwhile (a recovery then blocks). The backend is asked only when that
    view is pending or ready; ``state`` stays when it does not answer or say (an older
    one)."""
    if state["state"] not in ("pending", "ready") or \
            not (r.get("backend") or {}).get("alive"):
        return state
    try:
        with _api(args, timeout=2.0) as c:
            failing = c.call("generation.status").get("certificate_error")
    except TenureError:
        return state
    return render.uncertifiable(failing) if isinstance(failing, dict) else state


def _owner_status(args: Any) -> dict[str, Any] | None:
    """The owner's status (the release it runs, ``{running, error}``, absent from one
    that predates saying it; its epoch), or None when it does not answer."""
    from .daemons import ping
    return ping(_layout(args).owner_sock, home=args.home)


def _activation_probe(args: Any) -> Any:
    """What the guardian is doing now: ``upgrade 20261201T…: draining``."""
    def probe() -> str | None:
        with _guardian(args, timeout=5.0) as g:
            act = g.call("status").get("last_activation") or {}
        return f"{act.get('kind')} {act.get('phase')}" if act else None
    return probe
