"""`tenure up` on a read-only home ends with STORAGE_FAILED naming the path, not with a
traceback (a real read-only tmpfs; root only)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.root


def test_up_on_a_read_only_home_is_storage_failed() -> None:
    mnt = tempfile.mkdtemp(prefix="tro", dir="/tmp")
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            reason = f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
            print(f"SKIP {__name__}: {reason}")
            pytest.skip(reason)
        try:
            home = os.path.join(mnt, "h")
            os.mkdir(home, 0o700)
            cfg = os.path.join(mnt, "t.toml")
            with open(cfg, "w") as f:
                f.write('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n')
            subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
            done = subprocess.run(
                [sys.executable, "-m", "backend.cli.main", "--home", home, "up",
                 "--config", cfg], capture_output=True, text=True, timeout=120,
                stdin=subprocess.DEVNULL)
        finally:
            subprocess.run(["umount", mnt], check=True)
    finally:
        os.rmdir(mnt)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("tenure: STORAGE_FAILED: tenure up failed: the storage "
                                  "failed (OSError: Read-only file system: " + home), done
