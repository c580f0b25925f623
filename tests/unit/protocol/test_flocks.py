"""protocol.flocks: whether a daemon's or a window's lock is held, asked without reading
/proc/locks, and how holders take those locks so that the question never refuses them."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.paths import OwnerPaths
from protocol import flocks, procfs, procholders
from protocol.errors import AlreadyRunning


def _held(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_lock_nobody_holds_is_free_and_stays_free(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    assert flocks.free(str(path)) is True   # no file: no holder
    path.write_bytes(b"")
    assert flocks.free(str(path)) is True
    fd = os.open(path, os.O_RDWR)
    try:   # the question let its shared lock go: an exclusive one is taken at once
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_a_held_lock_is_not_free(tmp_path: Path) -> None:
    fd = _held(tmp_path / "x.lock")
    try:
        assert flocks.free(str(tmp_path / "x.lock")) is False
    finally:
        os.close(fd)


def test_what_it_cannot_tell_is_left_to_proc_locks(tmp_path: Path) -> None:
    fd = _held(tmp_path / "real.lock")
    try:
        os.symlink(tmp_path / "real.lock", tmp_path / "link.lock")
        assert flocks.free(str(tmp_path / "link.lock")) is None   # not followed
        os.mkfifo(tmp_path / "fifo.lock")
        assert flocks.free(str(tmp_path / "fifo.lock")) is None   # opened without a hang
        assert flocks.free(str(tmp_path)) is None
    finally:
        os.close(fd)


def test_flock_holder_reads_proc_locks_only_for_a_held_lock(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    read, real = [], procholders.read_bounded

    def spy(path: str, limit: int = 4096) -> bytes | None:
        read.append(path)
        return real(path, limit)

    monkeypatch.setattr(procholders, "read_bounded", spy)
    path = tmp_path / "x.lock"
    path.write_bytes(b"")
    assert procholders.flock_holder(str(path)) is None
    assert procholders.flock_holder(str(path), opened=False) is None
    assert f"{procfs.PROC}/locks" not in read
    fd = _held(path)
    try:
        assert procholders.flock_holder(str(path)) == os.getpid()
        assert f"{procfs.PROC}/locks" in read
    finally:
        os.close(fd)


def test_take_waits_out_a_moment_s_holder_and_not_a_lasting_one(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    fd = _held(path)
    threading.Timer(0.05, os.close, (fd,)).start()
    mine = os.open(path, os.O_RDWR)
    try:
        assert flocks.take(mine, patience=2.0)
    finally:
        os.close(mine)
    fd = _held(path)
    mine = os.open(path, os.O_RDWR)
    try:
        t0 = time.monotonic()
        assert not flocks.take(mine, patience=0.05)
        assert time.monotonic() - t0 >= 0.05
    finally:
        os.close(mine)
        os.close(fd)


@pytest.fixture
def asker(tmp_path: Path) -> Iterator[Path]:
    """Another process asking, as fast as it can, whether the owner's lock is free
    (what `tenure up` and `tenure down` ask of a daemon they find silent), for at most
    20 s; stopped when the test ends."""
    paths = OwnerPaths(tmp_path)
    paths.dir.mkdir(mode=0o700)
    Path(paths.lock).write_bytes(b"")
    code = ("import sys, time\nfrom protocol.flocks import free\nend = time.monotonic() + 20\n"
            "print('asking', flush=True)\n"
            "while time.monotonic() < end:\n    free(sys.argv[1])\n")
    proc = subprocess.Popen([sys.executable, "-c", code, paths.lock],
                            cwd=Path(__file__).parents[3], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"asking\n"
        yield tmp_path
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_an_owner_is_never_refused_its_lock_by_a_question(asker: Path) -> None:
    """Without the holders' patience ~86 of these 300 takes failed (ALREADY_RUNNING
    with no owner running): the asker held the lock at that moment."""
    paths = OwnerPaths(asker)
    for _ in range(300):
        os.close(paths.take_lock())
    held = paths.take_lock()
    try:
        with pytest.raises(AlreadyRunning):
            OwnerPaths(asker).take_lock()
    finally:
        os.close(held)


def test_on_a_read_only_file_system_an_existing_lock_is_taken_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing disk remounted read-only: opening the lock to write failed (EROFS), and
    `tenure down` and `tenure owner reconcile` refused to run, every app still running.
    flock takes a descriptor opened read-only as well."""
    import errno

    from backend.cli.windowlock import held
    from protocol.layout import Layout
    lay = Layout(tmp_path)
    os.makedirs(tmp_path / "execution", mode=0o700)
    lock = tmp_path / "execution" / "maintenance.lock"
    lock.write_bytes(b"")
    real_open = os.open

    def read_only(path: Any, flags: int, *a: Any) -> int:
        if flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real_open(path, flags, *a)
    monkeypatch.setattr(flocks.os, "open", read_only)
    fd = flocks.hold(str(lock))
    assert fd is not None and flocks.free(str(lock)) is False   # held, read-only
    os.close(fd)
    with held(lay, "`tenure down`"):
        assert flocks.free(str(lock)) is False
    assert flocks.free(str(lock)) is True
    with pytest.raises(FileNotFoundError):   # none there, and none can be made
        flocks.hold(str(tmp_path / "execution" / "other.lock"))
