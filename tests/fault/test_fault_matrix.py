"""A fast subset of the qualification matrix (bench/faults.py runs all of it): faults
injected into the real guardian at await points of real flows, each cell checked for a
valid world afterwards (tests/fault/cells.py says what valid means)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "guardian"))
import test_handoff_support as support
from cells import Cell, Releases, run_cell

candidates = support.candidates  # the session fixture of derived releases

SUBSET = [
    Cell("upgrade", "launch", "hang-candidate"),     # the stranded-home defect, for real
    Cell("upgrade", "fence", "lose-reply"),          # the answer lost after the owner accepted
    Cell("upgrade", "drain", "kill-incumbent"),
    Cell("restore", "restore.launch", "raise"),      # nothing left to try: uncertain
    Cell("recover", "start.launch", "kill-guardian"),
]


@pytest.mark.parametrize("cell", SUBSET, ids=lambda c: c.name)
def test_fault_cell_ends_in_a_valid_world(cell: Cell, sealed_release: Path, candidates
                                          ) -> None:
    result = run_cell(cell, Releases(sealed_release, candidates.good, candidates.crashes))
    assert result.valid, (result.problems, result.endings)
