"""``python -m guardian [--home DIR]`` runs the guardian; ``--preflight`` checks that this
release's guardian can run here (a guardian upgrade runs it before moving).

``--inherit-lock FD`` is passed by a guardian that replaces itself with this code (exec):
the descriptor holding runtime/guardian.lock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from protocol import daemonlog
from protocol.errors import TenureError
from protocol.layout import default_home
from protocol.startup import daemon_arguments

from .paths import GuardianPaths
from .start import hashed_memo, run


def preflight(paths: GuardianPaths) -> int:
    """Import the whole guardian, read its state the way it would: exit 0 and one JSON
    line, or exit 1 with the reason on stderr. Changes nothing."""
    t0 = time.perf_counter()
    from protocol.handover import OWNER_CONTRACTS

    from . import boot, cold, handoff, service  # noqa: F401
    from .own import load
    from .state import check_readable
    try:
        state = check_readable(paths.state_db)
        record = load(paths.guardian_release)
    except TenureError as exc:
        print(f"guardian preflight: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "state_db": state, "record": record.to_wire(),
                      "owner_contracts": OWNER_CONTRACTS,
                      "python": sys.version.split()[0],
                      "import_s": round(time.perf_counter() - t0, 3)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = daemon_arguments("python -m guardian", "tenure guardian")
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--preflight", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inherit-lock", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    daemonlog.setup("guardian", args.log_level)
    paths = GuardianPaths((args.home or default_home()).absolute())
    if args.preflight:
        return preflight(paths)
    return run(paths, args.inherit_lock, hashed_memo(paths))


if __name__ == "__main__":
    sys.exit(main())
