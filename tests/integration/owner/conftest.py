"""Fixtures of the owner's integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from owner.testing import OwnerProcess


@pytest.fixture
def owner(short_home: Path) -> Iterator[OwnerProcess]:
    """A real owner on a short home; stopped at the end, which must be clean (exit 0)."""
    o = OwnerProcess(short_home).start()
    yield o
    if o.proc is not None and o.proc.poll() is None:
        assert o.stop() == 0, o.stderr_path.read_text() if o.stderr_path else ""
