"""The ``tenure`` command line: its arguments parsed (cmdline.py, unless the fast path of
``tenure status`` takes them), the command run, and how it ended said. Fast paths import
only the protocol client; everything else is imported by the command that needs it.

Exit statuses: backend/cli/exits.py.
"""

from __future__ import annotations

import errno
import os
import sys
from contextlib import suppress

from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    ConnectFailed,
    OwnerUnavailable,
    TenureError,
    TransportLost,
)

from .exits import Exit

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any


def _fast_status(argv: list[str]) -> Any:
    """`tenure [--home H] [--json] status [--home H] [--json]` without argparse (the most
    frequent command, and argparse costs it a noticeable share of its time)."""
    rest, home, as_json, commands = list(argv), None, False, 0
    while rest:
        a = rest.pop(0)
        if a == "--json":
            as_json = True
        elif a == "--home" and rest:
            home = rest.pop(0)   # a value, never the command (`--home status`: no command)
        elif a.startswith("--home="):
            home = a.split("=", 1)[1]
        elif a == "status":
            commands += 1
        else:
            return None
    # one `status` (a second one is a target, argparse's to read); argparse refuses an
    # empty home
    if commands != 1 or home == "":
        return None
    from types import SimpleNamespace

    from protocol.layout import default_home_str
    # home as a str: pathlib is one of the larger imports of the whole command
    return SimpleNamespace(cmd="status", json=as_json, targets=[], watch=False,
                           home=default_home_str(home))


def _any_encoding() -> None:
    """What the output's encoding cannot write is written out (``\\u2192``), not an
    INTERNAL error: tenure's own '→' and '—', or an app's 'héllo', under a locale that
    is not UTF-8 (Python makes the plain C locale UTF-8 by itself)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _any_encoding()
    args = _fast_status(argv)
    if args is None:
        from protocol.layout import default_home

        from .cmdline import parser
        args = parser(argv).parse_args(argv)
        args.home_given = args.home is not None   # `service` has a default of its own
        args.home = (args.home or default_home()).absolute()
        if getattr(args, "config", None) is not None:   # named alike in every message
            args.config = args.config.absolute()
    if not args.json:
        from .present import use_colour
        use_colour(sys.stdout)
    handler = _handler(args.cmd)
    try:
        _check_args(args)
        from protocol.sockets import refuse_unsafe_home
        refuse_unsafe_home(args.home)
        if _asks(args):
            _said_on_termination(args)
        code: int = handler(args)
        return code
    except (ConnectFailed, BackendUnavailable, OwnerUnavailable) as exc:
        return _fail(args, _silent_daemon(exc), Exit.UNREACHABLE)
    except BadRequest as exc:
        return _fail(args, exc, Exit.USAGE)
    except TransportLost as exc:
        return _fail(args, _lost_daemon(exc), Exit.ERROR)
    except TenureError as exc:
        from .releases import unverified
        return _fail(args, unverified(exc), Exit.ERROR)
    except KeyboardInterrupt:
        return _interrupted(args)
    except BrokenPipeError:
        _stdout_gone()
        return Exit.OK
    except OSError as exc:   # the machine, not tenure: a read-only or full disk, a mode
        from .everyday import OutputLost
        if isinstance(exc, OutputLost):   # said on stderr, --json or not: stdout failed
            _stdout_gone()
            lost = output_lost(exc, f"tenure {_named(args)}", _asks(args))
            with suppress(OSError):
                print(f"tenure: {lost.code_str}: {lost.msg}", file=sys.stderr)
            return Exit.ERROR
        return _fail(args, _os_error(exc, args.cmd), Exit.ERROR)
    except Exception as exc:   # a defect of the command itself: one coded line, not a
        if os.environ.get("TENURE_DEBUG") == "1":   # traceback (unless asked for)
            raise
        return _fail(args, _unexpected(exc, args.cmd), Exit.ERROR)


TARGET_COMMANDS = frozenset({"status", "logs", "events", "start", "stop", "restart",
                             "inspect"})   # the commands of docs/cli.md's Targets
WIRE_INT_MAX = 2**62   # the largest count or record id any API field takes
MAX_TIMEOUT_S = 86400.0   # the longest --timeout any command waits, and --every at most


def _check_args(args: Any) -> None:
    """Refuse, before anything is asked of a daemon, what no command can use: a
    duration (--timeout, --every) that is not a number of seconds above 0 and at most a
    day (nan, inf, 0 or negative), and a malformed target. Raises BadRequest."""
    for option in ("timeout", "every"):
        _check_seconds(option, getattr(args, option, None))
    for flag in ("-n", "--limit"):
        _check_count(flag, getattr(args, flag.lstrip("-"), None))
    if args.cmd not in TARGET_COMMANDS:
        return
    targets = getattr(args, "targets", None) or []
    target = getattr(args, "target", None)
    if isinstance(target, str):
        targets = [*targets, target]
    if targets:
        from backend.targets import check_cli_targets
        check_cli_targets(targets)


def _check_seconds(option: str, t: float | None) -> None:
    """``--OPTION t``: a number of seconds above 0 and at most MAX_TIMEOUT_S, or None
    (not given, not an option of this command). Raises BadRequest."""
    if t is None or 0 < t <= MAX_TIMEOUT_S:   # nan fails every comparison
        return
    raise BadRequest(f"--{option} {t:g}: give a number of seconds above 0 and at most "
                     f"{MAX_TIMEOUT_S:g}", {"field": option})


def _check_count(flag: str, n: int | None) -> None:
    """``-n``/``--limit``: a count no wire integer would refuse to carry (what each
    command allows below that, it says itself). Raises BadRequest."""
    if n is not None and n > WIRE_INT_MAX:
        raise BadRequest(f"{flag} {n}: too large a number", {"field": flag.lstrip("-")})


# the module of backend/cli that holds a command's cmd_<name>: commands.py unless named
RUNS_IN = {"up": "lifecycle", "down": "lifecycle", "plan": "plans", "apply": "plans",
           "op": "plans", "stack": "plans", "backend": "backendcmd"}


def _handler(cmd: str) -> Any:
    if cmd == "status":
        from .everyday import cmd_status
        return cmd_status
    from importlib import import_module
    module = import_module(f".{RUNS_IN.get(cmd, 'commands')}", __package__)
    return getattr(module, f"cmd_{cmd}")


def output_lost(exc: OSError, what: str, asked: bool = False) -> TenureError:
    """STORAGE_FAILED for an answer stdout could not take. It said 'the call stopped
    there' and to run it again once there was room: a job run again so ran twice. Of a
    command that ``asked`` tenure for something, it says that was done."""
    from protocol.errors import StorageFailed
    done = ("; the command itself was carried out, so running it again would do it "
            "again: `tenure status`, `tenure job list` or `tenure op list` show what it "
            "did") if asked else ""
    return StorageFailed(f"{what}: its output could not be written ({exc.strerror or exc})"
                         f"{done}", {"stream": "stdout",
                                     "errno": errno.errorcode.get(exc.errno or 0)})


def _os_error(exc: OSError, cmd: str) -> TenureError:
    """An OSError that reached the command line as a coded error: STORAGE_FAILED for a
    failing disk, UNAUTHORIZED for a path this user may not use (the path is not at
    fault: UNSAFE_PATH says that), else INTERNAL with its words."""
    from protocol.errors import Internal, Unauthorized
    from protocol.storage import storage_failure
    stored = storage_failure(exc, f"tenure {cmd}")
    if stored is not None:
        return stored
    where = f": {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Unauthorized(f"tenure {cmd}: permission denied{where}: uid {os.geteuid()} "
                            "may not use this home (run tenure as the user that runs its "
                            "daemons, or, to look, as a member of its viewer_group)",
                            {"path": str(exc.filename), "uid": os.geteuid()})
    return Internal(f"tenure {cmd} failed: {exc.strerror or exc}{where}")


_NOT_RUNNING = {
    "guardian.sock": "the guardian is not running; `tenure up` starts it, and the backend "
                     "and the applications keep running meanwhile",
    "owner.sock": "the owner is not running; `tenure up` starts it, and asks for `tenure "
                  "owner reconcile` first if it died (docs/reconcile.md)"}


def _hint(exc: TenureError, args: Any) -> str:
    """What to do when nothing listens on a daemon's socket: it is not running (and, for
    the guardian, when the owner is not running either, neither is tenure)."""
    if not isinstance(exc, ConnectFailed) or exc.data.get("listening") is not False or \
            exc.data.get("pid") is not None:   # found by its lock: it runs
        return ""
    sock = os.path.basename(str(exc.data.get("path")))
    if sock == "guardian.sock" and getattr(args, "home", None) is not None:
        from .everyday import layout, runs
        if runs(layout(args).owner_sock, "owner") is False:
            return (": tenure is not running (neither the guardian nor the owner is); "
                    "`tenure up` starts it")
    if sock == "owner.sock" and getattr(args, "home", None) is not None:
        window = _window_between_owners(args)
        if window is not None:
            return f": the owner is not running: {window}"
    hint = _NOT_RUNNING.get(sock)
    return f": {hint}" if hint else ""


def _window_between_owners(args: Any) -> str | None:
    """What an unfinished owner maintenance window that stopped the owner says to run
    (`tenure up` refuses then), or None."""
    from protocol.errors import MaintenanceIncomplete

    from .everyday import layout
    from .ownerwindow import refuse_owner_start
    try:
        refuse_owner_start(layout(args))
    except MaintenanceIncomplete as exc:
        return exc.msg
    except TenureError:
        return None   # a window under way, or its record unreadable: the usual hint
    return None


_DAEMONS = {"guardian.sock": "guardian", "owner.sock": "owner"}

_AFTER_LOSS = {"guardian": "`tenure up` starts it again, and `tenure backend status` then "
                           "says how what was asked of it ended",
               "owner": "`tenure status` says what became of its apps and what to do"}


def _lost_daemon(exc: TenureError) -> TenureError:
    """A connection to the guardian or the owner lost during a call: when that daemon no
    longer runs (killed, crashed), the error says so and what to run next, instead of
    only 'connection lost'."""
    path = str(exc.data.get("path") or "")
    module = _DAEMONS.get(os.path.basename(path))
    if module is None:
        return exc
    from .everyday import runs
    if runs(path, module) is not False:
        return exc
    exc.msg += (f"; the {module} went away during the call and is not running now "
                f"(stopped, or it died): {_AFTER_LOSS[module]}")
    return exc


def _silent_daemon(exc: TenureError) -> TenureError:
    """A guardian or owner that accepted on its socket but did not answer (stopped,
    stuck), or that holds its lock while nothing listens on its socket (it hangs before
    it listens): the error that names its pid and what /proc shows of it (for a stopped
    one, the kill -CONT that continues it), instead of 'timed out' or 'not running'."""
    if not isinstance(exc, ConnectFailed) or exc.data.get("pid") is not None:
        return exc
    path = str(exc.data.get("path") or "")
    module = _DAEMONS.get(os.path.basename(path))
    if module is None:
        return exc
    from .holders import silent_holder, silent_listener
    if exc.data.get("listening") is None:
        return silent_listener(path, module) or exc
    return silent_holder(path, module) or exc


# What goes on after Ctrl-C of a command that asked tenure to do something: the command
# only stops waiting. Reading commands (status, logs, events, top, ...) end silently;
# of a command with actions (`tenure backend ACTION`) only those in READS_OF do.
GOES_ON = {
    "up": "what it started, if anything, and the config it applies go on (`tenure "
          "status`)",
    "down": "the daemons it signalled go on stopping (`tenure status`; `tenure up` waits "
            "for an owner still shutting down)",
    "start": "the backend carries the change on (`tenure status`)",
    "stop": "the backend carries the change on (`tenure status`)",
    "restart": "the backend carries the roll on (`tenure status`)",
    "stack": "the backend carries the change on (`tenure status`)",
    "apply": "the operation goes on (`tenure op list`)",
    "backend": "the guardian carries it on (`tenure backend status`)",
    "guardian": "the guardian carries it on (`tenure backend status`)",
    "job": "a job it submitted goes on (`tenure job list` shows whether one was)",
    "job stop": "the job's stop goes on (`tenure job list`)",
    "owner": "an owner window cut short is finished by `tenure owner upgrade --continue` "
             "(`tenure status` says when one is)",
}
READS_OF = {"backend": {"status"}, "guardian": {"status"}, "owner": {"status"},
            "job": {"list", "show", "logs"}}
"""The actions of these commands that only read: Ctrl-C ends them silently (`tenure
owner status` cut short spoke of an owner window, `job logs -f` said the job goes on)."""


def _named(args: Any) -> str:
    """``backend upgrade``, not ``backend``."""
    action = getattr(args, "action", None)
    return args.cmd if action is None else f"{args.cmd} {action}"


def _asks(args: Any) -> bool:
    """Whether the command asks tenure to do something (not only to say something: a
    reading action, or a --dry-run, --check or --prepare, which change nothing)."""
    if any(getattr(args, flag, False) is True for flag in ("dry_run", "check", "prepare")):
        return False
    return (_named(args) in GOES_ON or args.cmd in GOES_ON) and \
        getattr(args, "action", None) not in READS_OF.get(args.cmd, ())


def _said_on_termination(args: Any) -> None:
    """A command that asks tenure for something, ended by SIGTERM or SIGHUP (`timeout
    60 tenure restart …`, an ssh session dropped), says as Ctrl-C does that only its
    wait ended and what goes on; it ended silently (143, 129). The exit status stays
    128 + the signal. Reading commands keep the default: no signal module to import
    on their path (~6 ms)."""
    import signal

    def ended(signum: int, _frame: Any) -> None:
        if getattr(args, "ended_by", None) is None:
            args.ended_by = signum
            raise KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, ended)


def _interrupted(args: Any) -> int:
    """Ctrl-C: exit 130; a command that asked tenure to do something says that only the
    waiting ended (on stderr; with ``--json`` also as ``{ok, interrupted, msg}``). Ended
    by SIGTERM or SIGHUP (:func:`_said_on_termination`): the same, exit 128 + it."""
    signum = getattr(args, "ended_by", None)
    code = Exit.INTERRUPTED if signum is None else 128 + int(signum)
    if not _asks(args):
        return code
    command = _named(args)
    goes_on = GOES_ON.get(command) or GOES_ON[args.cmd]
    how = "interrupted" if signum is None else f"ended by {_signame(int(signum))}"
    msg = f"{how}: `tenure {command}` stopped waiting; {goes_on}"
    with suppress(OSError):   # stdout may be gone (its reader ended): stderr still says
        if args.json:
            import json
            print(json.dumps({"ok": False, "interrupted": True, "msg": msg}), flush=True)
    with suppress(OSError):
        print(f"tenure: {msg}", file=sys.stderr)
    return code


def _signame(signum: int) -> str:
    import signal
    return signal.Signals(signum).name


def _unexpected(exc: Exception, cmd: str) -> TenureError:
    """INTERNAL for what no part of the command expected (a defect of tenure)."""
    from protocol.errors import Internal
    return Internal(f"tenure {cmd} failed unexpectedly: {type(exc).__name__}: {exc} (a "
                    "defect of tenure: please report it; TENURE_DEBUG=1 shows the "
                    "traceback). Whatever the command asked of a daemon before it may "
                    "have been done: `tenure status` says what runs",
                    {"exception": type(exc).__name__})


def _fail(args: Any, exc: TenureError, code: int) -> int:
    """Say ``exc``: on stderr, or with ``--json`` as an object on stdout, unless stdout
    itself fails (a full disk, /dev/full: the failure being said may be that one), when
    stderr gets the line after all."""
    msg = exc.msg + _hint(exc, args)   # it may quote what was given: a plan id, a path
    if args.json:
        import json
        try:
            print(json.dumps({"ok": False, "error": {**exc.to_wire(), "msg": msg}},
                             default=str), flush=True)
            return code
        except OSError:
            _stdout_gone()
    from .present import neutralise
    said = "\n".join(map(neutralise, msg.split("\n")))   # no terminal control
    print(f"tenure: {exc.code_str}: {said}", file=sys.stderr)
    return code


def _stdout_gone() -> None:
    """Point stdout at /dev/null: what it still holds, and anything printed later, goes
    nowhere instead of failing again (at the flush before exit: a traceback)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run() -> None:
    """The ``tenure`` command: :func:`main`, then exit without the interpreter's teardown
    (~20 ms of freeing modules and objects on every command, measured here). Nothing is
    left half done by then: output is flushed below, files are written atomically and
    closed, the progress thread is joined, temporary directories are removed and the
    daemons a command starts run in their own sessions. A Ctrl-C before the command
    asked anything of tenure (while its arguments are parsed) ends it silently, 130."""
    try:
        code = main()
    except KeyboardInterrupt:   # the handler inside main() takes it from then on
        code = Exit.INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):   # the reader went away; a closed stream
            pass
        except OSError as exc:   # the output's last bytes did not land (a full disk)
            if stream is sys.stdout:
                _stdout_gone()
                err = output_lost(exc, "tenure")
                code = code or Exit.ERROR
                with suppress(OSError):
                    print(f"tenure: {err.code_str}: {err.msg}", file=sys.stderr, flush=True)
    os._exit(code)


if __name__ == "__main__":
    run()
