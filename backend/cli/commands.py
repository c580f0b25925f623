"""One function per ``tenure`` command, ``cmd_<name>(args) -> exit status``, for the
commands with no module of their own: those on what runs (start, stop, restart, inspect,
metrics, top, logs, events), ``owner``, and those another module carries out (release,
guardian, service, job, import, completion). lifecycle.py runs up and down, plans.py
plan, apply, op and stack, backendcmd.py backend (main.RUNS_IN).
"""

from __future__ import annotations

import sys

from protocol.client import Client
from protocol.errors import BadRequest, ConnectFailed, RequestTimedOut, TenureError

from . import render, render_changes, render_inspect
from .everyday import api as _api
from .everyday import call as _call
from .everyday import guardian as _guardian
from .everyday import layout as _layout
from .everyday import out as _out
from .exits import Exit, current

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["cmd___complete", "cmd_completion", "cmd_events", "cmd_guardian", "cmd_import",
           "cmd_inspect", "cmd_job", "cmd_logs", "cmd_metrics", "cmd_owner", "cmd_release",
           "cmd_restart", "cmd_service", "cmd_start", "cmd_stop", "cmd_top"]

OK, ERROR, UNSETTLED = Exit.OK, Exit.ERROR, Exit.UNSETTLED


# -- everyday -------------------------------------------------------------------------

def _target_cmd(args: Any, method: str) -> int:
    r = _call(args, method, {"target": args.target, "timeout": args.timeout},
              timeout=args.timeout + 30)
    _out(args, r, render_changes.instances(r))
    if method != "stop" and render_changes.failed_instances(r):
        return ERROR   # it gave up: a script's `tenure start x && next` must not go on
    return OK if r.get("settled", True) else UNSETTLED


def cmd_start(args: Any) -> int:
    return _target_cmd(args, "start")


def cmd_stop(args: Any) -> int:
    return _target_cmd(args, "stop")


def cmd_restart(args: Any) -> int:
    return _target_cmd(args, "restart")


def cmd_inspect(args: Any) -> int:
    r = _call(args, "inspect", {"target": args.target})
    _out(args, r, render_inspect.inspect(r))
    return current(r)


def cmd_metrics(args: Any) -> int:
    from .render_metrics import metrics
    r = _call(args, "metrics", {})
    _out(args, r, metrics(r))
    return OK


def cmd_top(args: Any) -> int:
    from .top import run
    return run(args, lambda: _call(args, "status", timeout=10.0),
               lambda snap, text: _out(args, snap, text))


def cmd_logs(args: Any) -> int:
    from .logs import follow_logs
    from .offline_logs import Fallback, FollowEnded
    try:
        return follow_logs(args, Fallback(_call, _layout(args)))
    except FollowEnded:   # tenure is not running: the file was read to its end
        return OK


def cmd_events(args: Any) -> int:
    from .events import follow_events
    return follow_events(args, _call)


# -- releases, daemons, jobs and tools ------------------------------------------------

def cmd_release(args: Any) -> int:
    from .releases import release_command
    return release_command(args, _guardian, _out)


def cmd_guardian(args: Any) -> int:
    from .guardiancmd import guardian_command
    return guardian_command(args, _guardian, _layout(args), _out)


def cmd_service(args: Any) -> int:
    from .service import service_command
    return service_command(args, _out)


def cmd_job(args: Any) -> int:
    from .jobs import job_command
    return job_command(args, _call, _out)


def cmd_import(args: Any) -> int:
    from .imports import import_command
    return import_command(args, _out)


# what each `owner` action takes: any other option given is refused, not ignored (a
# `reconcile --drain D --dry-run` stopped the processes it was meant to only show)
_OWNER_OPTIONS = {"upgrade": {"release", "dry_run", "digest", "cont"},
                  "reconcile": {"prepare", "drain"}, "status": set()}
_OWNER_FLAGS = {"release": "RELEASE", "dry_run": "--dry-run", "digest": "--digest",
                "cont": "--continue", "prepare": "--prepare", "drain": "--drain"}


def _check_owner_options(args: Any) -> None:
    """Raises BadRequest (nothing done) for an option ``args.action`` does not take."""
    given = [name for name in _OWNER_FLAGS if getattr(args, name, None) not in (None, False)]
    wrong = [_OWNER_FLAGS[n] for n in given if n not in _OWNER_OPTIONS[args.action]]
    if wrong:
        raise BadRequest(f"{', '.join(wrong)}: not an option of `tenure owner "
                         f"{args.action}`; nothing was done", {"options": wrong})
    if args.prepare and args.drain:
        raise BadRequest("--prepare and --drain: one or the other; nothing was done",
                         {"options": ["--prepare", "--drain"]})


def cmd_owner(args: Any) -> int:
    import subprocess
    _check_owner_options(args)
    if args.action == "upgrade":
        from .ownerwindow import Window
        from .ownerwindow_cli import command
        w = Window(_layout(args), lambda timeout: _api(args, timeout), args.timeout,
                   lambda line: None if args.json else print(f"  {line}", file=sys.stderr))
        return command(args, w, _guardian, _out)
    if args.action == "reconcile":
        cmd = [sys.executable, "-I", "-m", "owner", "reconcile", "--home", str(args.home)]
        cmd += ["--prepare"] if args.prepare else []
        cmd += ["--drain", args.drain] if args.drain else []
        return subprocess.call(cmd + (["--json"] if args.json else []))
    sock = _layout(args).owner_sock
    try:
        with Client(sock, pin=False, allow_group=True) as c:
            r = c.call("status")
    except (ConnectFailed, RequestTimedOut) as exc:
        from .holders import silent_listener
        raise silent_listener(sock, "owner") or exc from None
    _out(args, r, render.owner(r))
    return OK


def cmd_completion(args: Any) -> int:
    from .cmdline import parser
    from .completion import script
    sys.stdout.write(script(parser(), args.shell))
    return OK


def cmd___complete(args: Any) -> int:
    """Live targets for the completion script: quick, silent, never an error."""
    from .completion import targets
    try:
        with _api(args, timeout=1.0) as c:
            names = targets(c.call("status"))
    except (TenureError, OSError):
        return OK
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return OK
