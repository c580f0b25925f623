"""Fixtures of the guardian's integration tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def copied_python() -> Iterator[Path]:
    """This interpreter's binary copied into a directory of its own whose lib/ is the
    real one (so it finds its standard library and libpython): an interpreter a test
    may replace, as a package update does."""
    real = Path(os.path.realpath(sys.executable))
    d = Path(tempfile.mkdtemp(prefix="tpy", dir="/tmp"))
    try:
        (d / "bin").mkdir()
        (d / "lib").symlink_to(real.parent.parent / "lib")
        copy = d / "bin" / real.name
        shutil.copy2(real, copy)
        out = subprocess.run([str(copy), "-I", "-S", "-c", "import sys"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        yield copy
    finally:
        shutil.rmtree(d)
