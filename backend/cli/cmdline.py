"""``tenure``'s argument parser: its commands, their options and help, in the order
``tenure --help`` lists them (docs/cli.md names each). The fast path of ``tenure status``
(main.py) never imports it; any other command line has :func:`parser` make only its
command's parser.
"""

from __future__ import annotations

import os
import sys

from protocol.startup import help_formatter

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from collections.abc import Callable
    from typing import Any

    Add = Callable[[str, str | None], Any]   # parser()'s add(name, help): a command's parser

__all__ = ["EVENT_KINDS", "HELP_COLUMNS", "parser"]

# backend.events.KINDS, kept here so building the parser imports nothing more
# (tests/unit/backend/test_events.py checks they agree)
EVENT_KINDS = ("state", "exit", "restart", "probe", "operation", "handoff",
               "queued-config", "lost")


def _common(default: Any, formatter: Any) -> Any:
    """--home and --json, accepted before and after the command (the command's copy
    must not overwrite a value given before it, hence SUPPRESS there)."""
    import argparse
    from pathlib import Path
    common = argparse.ArgumentParser(add_help=False, formatter_class=formatter)

    def home(text: str) -> Path:   # '' was the working directory: `--home "$UNSET"`
        if not text:
            raise argparse.ArgumentTypeError("empty: give the home's path")
        return Path(text)
    common.add_argument("--home", type=home, default=default, help="TENURE_HOME "
                        "(default: $TENURE_HOME, else $XDG_STATE_HOME/tenure, else "
                        "~/.local/state/tenure)")
    common.add_argument("--json", action="store_true",
                        default=False if default is None else default,
                        help="machine-readable output")
    return common


def _intermixed(argparse: Any) -> Any:
    """A command's parser that takes its positionals wherever they stand: argparse alone
    gives an optional positional (``RELEASE`` of ``owner upgrade``) nothing once an
    option comes first (``tenure owner upgrade --json PATH`` was refused). It refuses a
    word it has no place for itself, with its own usage (``usage: tenure start …``):
    argparse hands such words back to ``tenure``, whose usage names no command's."""
    class Intermixed(argparse.ArgumentParser):  # type: ignore[misc]
        _inside = False
        # a check of the parsed namespace, set by a command (`job`: the options of its
        # action); a message it returns is refused as a usage error
        check_parsed: Any = None

        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            if self._inside:  # parse_known_intermixed_args calls back here, twice
                return super().parse_known_args(args, namespace)
            self._inside = True
            try:
                parsed, extra = self.parse_known_intermixed_args(args, namespace)
            finally:
                self._inside = False
            if extra:   # exits 2, as every usage error
                self.error(f"unrecognized arguments: {' '.join(extra)}")
            wrong = self.check_parsed(parsed) if self.check_parsed is not None else None
            if wrong:
                self.error(wrong)
            return parsed, extra
    return Intermixed


def _top(argparse: Any) -> Any:
    """``tenure``'s own parser: an unknown command's refusal lists the commands a user
    may type, not the hidden ones (``__complete``, the completion script's)."""
    class Top(argparse.ArgumentParser):  # type: ignore[misc]
        def _check_value(self, action: Any, value: Any) -> None:
            if isinstance(action, argparse._SubParsersAction) \
                    and value not in action.choices:
                shown = ", ".join(repr(name) for name in action.choices
                                  if not name.startswith("__"))
                raise argparse.ArgumentError(
                    action, f"invalid choice: {value!r} (choose from {shown})")
            super()._check_value(action, value)
    return Top


HELP_COLUMNS = 80   # where neither $COLUMNS nor a terminal says


def _columns() -> int:
    """$COLUMNS if a positive number, else the width of stdout's terminal, else
    HELP_COLUMNS."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    try:
        columns = os.get_terminal_size(stdout.fileno()).columns if stdout else 0
    except (ValueError, OSError):   # closed, or not a terminal
        columns = 0
    return columns or HELP_COLUMNS


class _Unused:
    """Stands in for the parser of a command that is not the one being run: neither it
    nor its options are made (argparse's add_argument and each parser's set-up, with
    their gettext lookups, were most of the parser's ~30 ms)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


def _command(argv: list[str]) -> str | None:
    """The command word of ``argv`` (past the global --home and --json), or None.
    ``--ho`` and ``--hom`` are --home, as argparse takes them (``--h`` could be --help)."""
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        if len(opt) > 3 and "--home".startswith(opt) and rest:
            rest.pop(0)
    return rest[0] if rest else None


def parser(argv: list[str] | None = None) -> Any:
    """The whole command line; with ``argv``, only its command's parser is made, with its
    options: the others are made (without options) only when it names no command, so
    that the refusal lists them all."""
    import argparse
    # at the terminal's width, found as shutil finds it but without importing shutil
    # (and with it bz2 and lzma, ~2 ms), as argparse does for each formatter it makes
    formatter = help_formatter(_columns() - 2)
    common = _common(argparse.SUPPRESS, formatter)
    ap = _top(argparse)(prog="tenure", parents=[_common(None, formatter)],
                        formatter_class=formatter,
                        description="process supervisor with a replaceable control plane")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                            parser_class=_intermixed(argparse))
    wanted = None if argv is None else _command(argv)
    later: list[tuple[str, str | None]] = []   # (name, help) of the commands not run

    def new(name: str, help: str | None) -> Any:
        if help is None:   # not listed
            return sub.add_parser(name, parents=[common], formatter_class=formatter)
        return sub.add_parser(name, help=help, parents=[common], formatter_class=formatter)

    def add(name: str, help: str | None) -> Any:
        if wanted in (None, name):
            return new(name, help)
        later.append((name, help))
        return _Unused()

    _running(add)
    _journal(add)
    _changes(add)
    _control_plane(add)
    _service_and_owner(add)
    from .jobs import add_job_parser
    add_job_parser(add)
    _tools(add)
    if wanted is not None and wanted not in sub.choices:   # no such command
        for name, help in later:
            new(name, help)
    return ap


def _running(add: Add) -> None:
    """The parsers of up, down, status, start, stop, restart, inspect, metrics and top."""
    from pathlib import Path
    p = add("up", "start owner, guardian and backend; apply a config")
    p.add_argument("--config", type=Path)
    p.add_argument("--release", type=Path, help="install this sealed release instead of "
                   "sealing the installed code (first run only)")
    p.add_argument("--foreground", action="store_true")
    p.add_argument("--no-wait", action="store_true",
                   help="return once the daemons are started and the config is handed "
                   "over (queued for the backend, or admitted), without waiting for them")
    p.add_argument("--timeout", type=float, default=120.0)
    add("down", "stop applications, backend, guardian and owner")
    p = add("status", "applications and their state (all, or the TARGETs)")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="STACK, STACK/APP or STACK/APP/N; each part may be a glob ('web/*')")
    p.add_argument("-w", "--watch", action="store_true",
                   help="redraw in place (every --every seconds) until Ctrl-C")
    p.add_argument("--every", type=float, default=2.0, metavar="SECONDS",
                   help="with -w: seconds between redraws (default 2, at least 0.2)")
    for verb in ("start", "stop", "restart"):
        p = add(verb, f"{verb} a stack, an app (stack/app) or one instance (stack/app/N)")
        p.add_argument("target")
        p.add_argument("--timeout", type=float, default=120.0)
    p = add("inspect", "details of a stack, app or instance")
    p.add_argument("target")
    add("metrics", "CPU, memory, restarts and control-plane health (what Prometheus sees)")
    p = add("top", "instances by CPU or memory, redrawn in place")
    p.add_argument("--sort", choices=["cpu", "mem", "name"], default="cpu")
    p.add_argument("-n", type=int, default=None, metavar="N", help="show the first N rows")
    p.add_argument("--every", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between redraws (default 2, at least 0.2)")
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")


def _journal(add: Add) -> None:
    """The parsers of logs and events."""
    p = add("logs", "application output from the journal (all apps, or the TARGETs)")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="STACK, STACK/APP or STACK/APP/N; each part may be a glob ('web/*')")
    p.add_argument("-n", type=int, default=50, help="last N records (default 50): a line, "
                   "or a 16 KiB part of a longer one")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--since", default=None, metavar="WHEN",
                   help="lines since WHEN: a duration ago (90s, 10m, 2h, 1d), a local time "
                        "(14:05, 2026-12-01T14:05:00) or a record id (42)")
    p.add_argument("--grep", default=None, metavar="REGEX",
                   help="print only lines matching REGEX (-n counts records before it)")
    p.add_argument("--stream", choices=["stdout", "stderr"])
    p = add("events", "what happened, in order: state changes, exits, restarts, failed "
                      "probes, operations, handoffs")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="STACK, STACK/APP or STACK/APP/N; each part may be a glob ('web/*')")
    p.add_argument("-n", type=int, default=50, help="last N events (default 50)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new events (across handoffs) until Ctrl-C")
    p.add_argument("--since", default=None, metavar="WHEN",
                   help="events after the id WHEN (the last one seen), or since a duration "
                        "ago (90s, 10m, 2h, 1d) or a local time (14:05, 2026-12-01T14:05)")
    p.add_argument("--kind", action="append", choices=EVENT_KINDS, metavar="KIND",
                   help=f"only this kind (repeatable): {', '.join(EVENT_KINDS)}")


def _changes(add: Add) -> None:
    """The parsers of plan, apply, op and stack."""
    from pathlib import Path
    p = add("plan", "preview the changes a config would make")
    p.add_argument("--config", type=Path, required=True)
    p = add("apply", "perform a plan")
    p.add_argument("plan")
    p.add_argument("--request-id")
    p.add_argument("--wait", action="store_true",
                   help="wait until the operation ended (at most --timeout)")
    p.add_argument("--timeout", type=float,
                   help="--wait: seconds to wait (default 3600)")
    p = add("op", "operations")
    p.add_argument("action", choices=["list", "show", "abandon"])
    p.add_argument("id", nargs="?")
    p.add_argument("--wait", action="store_true",
                   help="show: wait until the operation ended (at most --timeout)")
    p.add_argument("--timeout", type=float,
                   help="show --wait: seconds to wait (default 3600)")
    p.add_argument("--open", action="store_true",
                   help="list: only the operations still running")
    p = add("stack", "stop or start a whole stack (durable)")
    p.add_argument("action", choices=["stop", "start"])
    p.add_argument("stack")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--digest")


def _control_plane(add: Add) -> None:
    """The parsers of backend, guardian and release."""
    from pathlib import Path
    p = add("backend", "backend generations")
    p.add_argument("action", choices=["status", "upgrade", "abort", "rollback", "recover",
                                      "prune"])
    p.add_argument("release", nargs="?")
    p.add_argument("--check", action="store_true")
    p.add_argument("--force", action="store_true")
    p.add_argument("--dry-run", action="store_true",
                   help="recover: show what a forced recovery would adopt, and its digest")
    p.add_argument("--digest", help="recover: perform exactly the reviewed plan")
    p.add_argument("--config", type=Path, help="recover: the config a backend.db set "
                   "aside had applied, for the recovered generation to start from")
    p = add("guardian", "the guardian itself: the release it runs, and moving it")
    p.add_argument("action", choices=["status", "upgrade"])
    p.add_argument("release", nargs="?", help="upgrade: a release id, a unique prefix of "
                   "one, or a sealed release directory")
    p.add_argument("--check", action="store_true",
                   help="upgrade: run the checks and the new guardian's preflight only")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="upgrade: seconds to wait for the new guardian (default 60)")
    p = add("release", "sealed releases")
    p.add_argument("action", choices=["seal", "install", "list", "verify", "select",
                                      "rebind", "remove", "prune"])
    p.add_argument("arg", nargs="?")
    p.add_argument("--sign-key", type=Path, help="seal: sign RUNTIME.json with this "
                   "Ed25519 private key (PEM)")
    p.add_argument("--digest", help="rebind: record exactly the reviewed plan")
    p.add_argument("--keep", type=int, default=None, metavar="N",
                   help="prune: keep the N newest installed releases besides those still "
                        "needed (default 3)")
    p.add_argument("--dry-run", action="store_true",
                   help="remove, prune: say what would be removed; remove nothing")


def _service_and_owner(add: Add) -> None:
    """The parsers of service and owner."""
    p = add("service", "run under systemd or launchd")
    p.add_argument("action", choices=["install", "status", "uninstall"])
    p.add_argument("--prepare", action="store_true",
                   help="install: write the plan for review and print its digest; installs "
                        "nothing (system scope: in /etc/tenure/supervision-plan)")
    p.add_argument("--scope", choices=["user", "system"], default=None,
                   help="system units (as root the default) or your user's (otherwise)")
    p.add_argument("--user-account", default=None, help="system scope: service account")
    p.add_argument("--digest", default=None,
                   help="install: the digest of the plan you reviewed (printed by "
                        "--prepare; required in system scope)")
    p = add("owner", "execution owner maintenance")
    p.add_argument("action", choices=["reconcile", "status", "upgrade"])
    p.add_argument("release", nargs="?", help="upgrade: a release id, a unique prefix of "
                   "one, or a sealed release directory (default: the code it runs)")
    p.add_argument("--dry-run", action="store_true",
                   help="upgrade: print the plan of the maintenance window and its digest")
    p.add_argument("--digest", help="upgrade: perform exactly the reviewed plan")
    p.add_argument("--continue", dest="cont", action="store_true",
                   help="upgrade: carry on a window that stopped")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="upgrade: seconds for each wait (an instance, the owner; "
                        "default 120)")
    p.add_argument("--prepare", action="store_true",
                   help="reconcile: seal the dead owner's live processes and show the plan")
    p.add_argument("--drain", metavar="DIGEST",
                   help="reconcile: stop exactly the sealed processes, then reconcile")


def _tools(add: Add) -> None:
    """The parsers of import, completion and the completion script's hidden __complete."""
    from pathlib import Path
    p = add("import", "convert supervisord, PM2 or Procfile setups into tenure.toml")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument("-o", "--output", type=Path, help="write it here (not over an existing "
                   "file) instead of to stdout")
    p.add_argument("--stack", help="stack for apps without a group (default: the name of "
                   "the first file's directory)")
    p.add_argument("--from", dest="source_format", choices=["supervisord", "pm2",
                   "procfile"], help="the files' format (default: told by their names)")
    p = add("completion", "print a bash or zsh completion script (docs/cli.md)")
    p.add_argument("shell", choices=["bash", "zsh"])
    # hidden: used by that script
    p = add("__complete", None)
    p.add_argument("what", choices=["targets"])
