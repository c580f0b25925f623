"""``python -m backend --home DIR --activation ID`` runs one backend generation (started
by the guardian); ``python -m backend --preflight`` checks that this release can run here.

Exit statuses: 0 retired cleanly (or preflight passed), 1 failed before READY, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from protocol.errors import TenureError


def preflight() -> int:
    """Import everything a generation needs and report what this release offers."""
    t0 = time.perf_counter()
    from . import api, generation, operations, supervisor  # noqa: F401
    from .generation import CONTRACTS
    print(json.dumps({"ok": True, "contracts": CONTRACTS, "python": sys.version.split()[0],
                      "import_s": round(time.perf_counter() - t0, 3)}))
    return 0


async def serve(home: Path, activation: str) -> int:
    from .generation import Generation
    gen = Generation(home, activation)
    try:
        await gen.start()
    except TenureError as exc:
        logging.getLogger("tenure.backend").error("generation %s cannot start: %s",
                                                  activation, exc)
        print(json.dumps({"ready": False, **exc.to_wire()}), flush=True)
        await gen.close()
        return 1
    print(json.dumps({"ready": True, "pid": gen.identity.pid, "epoch": gen.epoch}), flush=True)
    try:
        await gen.run_until_retired()
    finally:
        await gen.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend")
    ap.add_argument("--home", type=Path)
    ap.add_argument("--activation")
    ap.add_argument("--preflight", action="store_true")
    ap.add_argument("--standby", action="store_true",
                    help="import everything, then read the activation id from stdin")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s backend %(levelname)s %(message)s")
    if args.preflight:
        return preflight()
    if args.home is not None and args.standby:
        activation = standby()
        if activation is None:
            return 1
        return asyncio.run(serve(args.home.absolute(), activation))
    if args.home is None or not args.activation:
        ap.error("--home and --activation are required (the guardian passes them)")
    return asyncio.run(serve(args.home.absolute(), args.activation))


def standby() -> str | None:
    """Be ready to run before being asked: imports done, nothing held, nothing changed."""
    from . import api, generation  # noqa: F401
    print(json.dumps({"standby": True}), flush=True)
    line = sys.stdin.readline()
    try:
        activation = json.loads(line)["activation"]
    except (ValueError, KeyError, TypeError):
        return None  # the guardian went away or changed its mind
    return activation if isinstance(activation, str) and activation else None


if __name__ == "__main__":
    sys.exit(main())
