"""`tenure up --release` (which installs the release) onto a full disk (a real tmpfs too
small for the release; root only): STORAGE_FAILED naming the file whose write failed,
and nothing left of the copy. It said 'the storage failed (OSError: No space left on
device)' with no path: a write names no file of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_full_disk import tmpfs  # noqa: F401  (the fixture: a 48 MiB tmpfs)

pytestmark = pytest.mark.root


def test_an_install_the_disk_cannot_take_names_the_file(tmpfs: Path,  # noqa: F811
                                                       sealed_release: Path) -> None:
    home = tmpfs / "h"
    home.mkdir(mode=0o700)
    st = os.statvfs(tmpfs)
    with open(tmpfs / "filler", "wb") as f:   # 1 MiB left: the release is ~15 MiB
        f.write(b"\0" * (st.f_bavail * st.f_frsize - (1 << 20)))
    res = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(home),
                          "up", "--release", str(sealed_release)],
                         capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    said = res.stderr.strip()
    assert res.returncode == 1, res
    assert said.startswith("tenure: STORAGE_FAILED: tenure up failed: the "
                           "storage failed (OSError: No space left on device: "), said
    assert f"{home}/runtime/releases/" in said, said
    releases = home / "runtime" / "releases"
    assert not releases.exists() or list(releases.iterdir()) == [], \
        list(releases.iterdir())
