"""``python -m guardian [--home DIR]`` runs the guardian."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from protocol.layout import default_home

from .daemon import run
from .paths import GuardianPaths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m guardian", description="tenure guardian")
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s guardian %(levelname)s %(message)s")
    return run(GuardianPaths((args.home or default_home()).absolute()))


if __name__ == "__main__":
    sys.exit(main())
