"""A full disk under a running tenure (a real tmpfs; root only). docs/faults.md: the
backend keeps its state in memory and tries again; nothing needs restarting. Its
certificate loop raised the disk's error and (a failed loop ends its generation) the
backend exited, and recovery then blocked for want of a certificate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

CONFIG = """[stacks.s.apps.bounce]
command = ["sh", "-c", "sleep 1; exit 3"]
restart = "always"
backoff = { initial = 0.2, max = 0.2 }
start_limit = { burst = 1000, interval = 10 }

[stacks.s.apps.calm]
command = ["sleep", "100000"]
"""


def _cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(home),
                           *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    mnt = tempfile.mkdtemp(prefix="tfd", dir="/tmp")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mnt],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(mnt)
        reason = f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
        print(f"SKIP {__name__}: {reason}")
        pytest.skip(reason)
    try:
        yield Path(mnt)
    finally:
        subprocess.run(["umount", "-l", mnt], check=True)
        os.rmdir(mnt)


def _fill(tmpfs: Path) -> None:
    with open(tmpfs / "filler", "wb") as f:   # the disk is full from here on
        try:
            while True:
                f.write(b"\0" * (1 << 20))
        except OSError:
            pass


def _fill_page(path: Path) -> None:
    """Fill what the full disk still takes at the end of ``path``: its last page."""
    with open(path, "ab", buffering=0) as f:
        try:
            for _ in range(8192):
                f.write(b"-\n")
        except OSError:
            return
    raise AssertionError(f"{path} took 16 KiB more on a full disk")


def _backend(home: Path) -> dict:
    return json.loads(_cli(home, "--json", "status").stdout)["backend"]


def _app(home: Path, key: str) -> dict:
    apps = json.loads(_cli(home, "--json", "status").stdout)["apps"]
    return next(a for a in apps if a["key"] == key)


def test_a_full_disk_leaves_the_backend_running(tmpfs: Path) -> None:
    home = tmpfs / "h"
    (tmpfs / "t.toml").write_text(CONFIG)
    try:
        up = _cli(home, "up", "--config", str(tmpfs / "t.toml"))
        assert up.returncode == 0, up.stderr
        before = _backend(home)
        _fill(tmpfs)
        time.sleep(8)   # several certificate rounds, a restart each second
        # (what it logs meanwhile may be lost: its log is on the full disk too)
        assert _backend(home)["pid"] == before["pid"]
        # an app that exits meanwhile waits to start, none of its starts spent
        bounce = _app(home, "s/bounce/0")
        assert bounce["state"] == "starting", bounce
        assert bounce["reason"].endswith("; trying again each second"), bounce
        restarts = bounce["restarts"]
        # a full tmpfs still takes appends into the log's last page: filled here, the
        # backend's next line (its restarted app's launch that waits) cannot be written
        _fill_page(home / "logs" / f"backend-{before['activation']}.log")
        _cli(home, "restart", "s/calm", "--timeout", "1")
        (tmpfs / "filler").unlink()
        time.sleep(6)
        assert _backend(home)["pid"] == before["pid"]
        assert _app(home, "s/bounce/0")["restarts"] > restarts   # it runs again
        log = (home / "logs" / f"backend-{before['activation']}.log").read_text()
        assert "loop failed" not in log, log[-2000:]
        # its records meanwhile: counted and said, not a traceback each
        assert "--- Logging error ---" not in log, log[-2000:]
        assert " log writes failed (No space left on device); records from then may " \
            "be missing" in log, log[-2000:]
    finally:
        (tmpfs / "filler").unlink(missing_ok=True)
        down = _cli(home, "down")
        assert down.returncode == 0, down.stdout + down.stderr


def test_down_on_a_full_disk_stops_every_app_and_says_what_it_knows(tmpfs: Path) -> None:
    """The owner's receipt could not be written at its first shutdown stage; the error
    ended the shutdown before the applications stage, so an app kept running under
    init, and `down` printed 'applications stopped: 2' (the count that ran before)."""
    home = tmpfs / "h"
    (tmpfs / "t.toml").write_text(CONFIG)
    try:
        assert _cli(home, "up", "--config", str(tmpfs / "t.toml")).returncode == 0
        apps = json.loads(_cli(home, "--json", "status").stdout)["apps"]
        calm = next(a["pid"] for a in apps if a["app"] == "calm")
        _fill(tmpfs)
        down = _cli(home, "down")
        assert "applications stopped" not in down.stdout, down.stdout
        assert "owner shutdown NOT clean" in down.stdout, down.stdout
        assert not Path(f"/proc/{calm}").exists(), "an app outlived the owner's shutdown"
    finally:
        (tmpfs / "filler").unlink(missing_ok=True)
        _cli(home, "down")


def test_owner_reconcile_on_a_full_disk_is_storage_failed(tmpfs: Path) -> None:
    """`owner reconcile --prepare` ended in an OSError traceback (exit 1, not one of its
    documented statuses) when it could not write its sealed evidence."""
    home = tmpfs / "h"
    (tmpfs / "t.toml").write_text(CONFIG)
    try:
        assert _cli(home, "up", "--config", str(tmpfs / "t.toml")).returncode == 0
        owner = json.loads(_cli(home, "--json", "owner", "status").stdout)["owner"]["pid"]
        os.kill(owner, 9)
        _fill(tmpfs)
        res = _cli(home, "--json", "owner", "reconcile", "--prepare")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert json.loads(res.stdout)["code"] == "STORAGE_FAILED", res.stdout
    finally:
        (tmpfs / "filler").unlink(missing_ok=True)
        prep = json.loads(_cli(home, "--json", "owner", "reconcile", "--prepare").stdout)
        _cli(home, "owner", "reconcile", "--drain", prep["digest"])
        _cli(home, "down")
