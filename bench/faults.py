"""The qualification matrix: every fault kind at every await point of the guardian's
upgrade, rollback, restore and recover flows, over real processes.

Usage: python bench/faults.py [--flows upgrade,rollback,restore,recover]
                              [--actions kill-guardian,...] [--limit N]

Each cell starts its own tenure in a temporary home, injects one fault
(TENURE_GUARDIAN_FAULT=<point>:<action>, deadlines shortened to 3 s), lets the guardian
(and, when it was killed, a healthy successor) finish, then checks the world
(tests/fault/cells.py): every activation final with receipts that follow its table,
exactly one generation in control or an explicit uncertain/blocked with none acting,
applications untouched, the owner's epoch granted once. Prints one line per cell, the
matrix, and last one JSON line {"cells", "valid", "invalid", "kinds", "seconds"}.
It takes several minutes per hundred cells; `./dev test` runs a fast subset.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fault"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "guardian"))

from cells import ACTIONS, Releases, all_cells, run_cell  # noqa: E402
from test_handoff_support import derive_release  # noqa: E402

from backend.testing import seal_once  # noqa: E402


def releases(tmp: Path) -> Releases:
    sealed = seal_once(tmp)
    good, crash = tmp / "good", tmp / "crash"
    derive_release(sealed, good, {"backend/__init__.py": lambda t: t + "\n# candidate B\n"})
    derive_release(sealed, crash, {"backend/generation.py": lambda t: t + (
        "\n\nasync def _crash_before_ready(self):\n"
        "    raise RuntimeError('qualification candidate: crash before READY')\n\n\n"
        "Generation.start = _crash_before_ready\n")})
    return Releases(sealed, good, crash)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", default="upgrade,rollback,restore,recover")
    ap.add_argument("--actions", default=",".join(ACTIONS))
    ap.add_argument("--limit", type=int, default=0, help="run only the first N cells")
    ap.add_argument("--start", type=int, default=1, help="begin at the Nth cell (1-based)")
    args = ap.parse_args()
    flows, actions = set(args.flows.split(",")), set(args.actions.split(","))
    cells = [c for c in all_cells() if c.flow in flows and c.action in actions]
    cells = cells[args.start - 1:]
    if args.limit:
        cells = cells[:args.limit]
    signal.signal(signal.SIGTERM, _interrupt)   # a stopped run still cleans its cell up
    tmp = Path(tempfile.mkdtemp(prefix="tqr", dir="/tmp"))
    t0 = time.monotonic()
    results = []
    try:
        rel = releases(tmp)
        for i, cell in enumerate(cells, 1):
            r = run_cell(cell, rel)
            results.append(r)
            mark = "ok" if r.valid else "INVALID"
            print(f"[{i}/{len(cells)}] {cell.name:45} {mark:7} {r.seconds:6.1f}s "
                  f"{' '.join(r.endings)}", flush=True)
            for problem in r.problems:
                print(f"        {problem}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _matrix(results)
    invalid = sum(not r.valid for r in results)
    print(json.dumps({"cells": len(results), "valid": len(results) - invalid,
                      "invalid": invalid, "kinds": sorted({c.action for c in cells}),
                      "flows": sorted(flows), "seconds": round(time.monotonic() - t0, 1)}))
    return 1 if invalid else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _matrix(results: list) -> None:  # type: ignore[type-arg]
    grid: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for r in results:
        grid[(r.cell.flow, r.cell.point)][r.cell.action] = "ok" if r.valid else "XX"
    print()
    print(f"{'flow/point':28}" + "".join(f"{a[:14]:>15}" for a in ACTIONS))
    for (flow, point), row in grid.items():
        print(f"{flow + '/' + point:28}" + "".join(f"{row.get(a, '-'):>15}" for a in ACTIONS))
    print()


if __name__ == "__main__":
    sys.exit(main())
