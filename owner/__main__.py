"""``python -m owner [--home DIR]`` runs the execution owner;
``python -m owner reconcile [--home DIR] [--json]`` proves a dead owner's launches gone."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from protocol import daemonlog
from protocol.errors import AlreadyRunning, ProcessesAlive, TenureError
from protocol.startup import daemon_arguments, import_asyncio_without_tls

from .paths import OwnerPaths, default_home


def main(argv: list[str] | None = None) -> int:
    ap = daemon_arguments("python -m owner", "tenure execution owner")
    ap.add_argument("command", nargs="?", choices=["serve", "reconcile"], default="serve")
    ap.add_argument("--home", type=Path, default=None,
                    help="state directory (default: TENURE_HOME or ~/.local/state/tenure)")
    ap.add_argument("--json", action="store_true", help="reconcile: print JSON")
    ap.add_argument("--prepare", action="store_true",
                    help="reconcile: seal the dead owner's live processes as evidence")
    ap.add_argument("--drain", metavar="DIGEST",
                    help="reconcile: stop exactly the sealed processes, then reconcile")
    ap.add_argument("--service-account", default=None, metavar="USER",
                    help="system scope: the account the guardian and backends run as; "
                         "it (and root) may use the owner's socket (owner runs as root)")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    daemonlog.setup("owner", args.log_level)
    paths = OwnerPaths((args.home or default_home()).absolute())
    if args.command == "serve":
        return _serve(paths, args.service_account)
    try:
        if args.prepare or args.drain:
            from .reconcile_cli import guided
            return guided(paths, args.drain, args.json)
        return _reconcile(paths, args.json)
    except Exception as exc:   # boundary: a failing disk (or the unexpected) ends coded
        return _failed(exc, args.json)


def _failed(exc: Exception, as_json: bool) -> int:
    """A reconcile that raised what it does not expect: STORAGE_FAILED for a failing disk
    (ENOSPC, EROFS, EIO, SQLite's), else INTERNAL with its words; exit status 2."""
    from protocol.errors import Internal
    from protocol.storage import storage_failure

    from .daemon import EXIT
    err = storage_failure(exc, "owner reconcile") or \
        Internal(f"owner reconcile failed: {type(exc).__name__}: {exc}")
    if isinstance(err, Internal):   # a defect: its traceback, on stderr, for the report
        logging.getLogger("owner").error("reconcile failed", exc_info=exc)
    print(json.dumps({"ok": False, **err.to_wire()}) if as_json else f"error: {err}")
    return EXIT["usage"]


def _serve(paths: OwnerPaths, service_account: str | None) -> int:
    """Exec into the recorded release first, then import the daemon: its imports are
    most of a start, and a process that execs would pay them twice."""
    from .release import follow, serve_args
    try:
        err = follow(paths, serve_args(str(paths.home),
                                       logging.getLevelName(logging.getLogger().level),
                                       service_account))
    except TenureError as exc:   # an unreadable record: refuse, as every start does
        from .daemon import EXIT
        logging.getLogger("owner").error("%s", exc)
        return EXIT["usage"]
    import_asyncio_without_tls()
    from .daemon import run
    return run(paths, service_account, err)


def _reconcile(paths: OwnerPaths, as_json: bool) -> int:
    from .daemon import EXIT
    from .reconcile import reconcile
    try:
        proven = reconcile(paths)
    except ProcessesAlive as exc:
        print(json.dumps({"ok": False, **exc.to_wire()}) if as_json else f"error: {exc}")
        if not as_json:
            for s in exc.data["survivors"]:
                print(f"  {s['launch_key']}: {s['why']}: pids {s['pids']}")
        return EXIT["alive"]
    except AlreadyRunning as exc:
        print(json.dumps({"ok": False, **exc.to_wire()}) if as_json else f"error: {exc}")
        return EXIT["running"]
    except TenureError as exc:
        print(json.dumps({"ok": False, **exc.to_wire()}) if as_json else f"error: {exc}")
        return EXIT["usage"]
    if as_json:
        print(json.dumps({"ok": True, "proven_gone": proven}))
    elif proven:
        from .reconcile_cli import proven_gone
        print(f"reconciled: {proven_gone(len(proven))}; the owner may start once")
    else:
        print("nothing to reconcile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
