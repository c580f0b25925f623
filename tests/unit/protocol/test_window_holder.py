"""protocol.window: who holds execution/maintenance.lock, and what it said it does.
A reader takes only the words a holder writes (HOLDERS); anything else names no one."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from protocol import window
from protocol.errors import OperationInProgress
from protocol.window import (
    DOWN,
    HOLDERS,
    busy,
    down_running,
    holding,
    lock_path,
    refuse_in_window,
)


def _hold(home: Path, text: bytes) -> int:
    (home / "execution").mkdir(exist_ok=True)
    fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, text)
    return fd


def test_nobody_holds_a_lock_that_is_not_there_or_not_held(tmp_path: Path) -> None:
    assert holding(tmp_path) is None
    refuse_in_window(tmp_path, "x")
    (tmp_path / "execution").mkdir()
    Path(lock_path(tmp_path)).write_bytes(DOWN.encode())   # left by a holder that died
    assert holding(tmp_path) is None


@pytest.mark.parametrize("text", [k.encode() for k in HOLDERS])
def test_a_holder_is_named_by_what_it_wrote(tmp_path: Path, text: bytes) -> None:
    fd = _hold(tmp_path, text)
    try:
        assert holding(tmp_path) == (os.getpid(), text.decode())
        with pytest.raises(OperationInProgress) as exc:
            refuse_in_window(tmp_path, "`tenure start`")
        assert exc.value.msg.startswith(f"{HOLDERS[text.decode()]} runs on this home "
                                        f"(pid {os.getpid()}): `tenure start` is refused")
        assert exc.value.data == {"pid": os.getpid(), "refused": "`tenure start`",
                                  "holder": text.decode()}
    finally:
        os.close(fd)


@pytest.mark.parametrize("text", [b"", b"`tenure down`\n", b"\x1b]0;owned\x07",
                                  b"\xff\xfe", DOWN.encode() * 40])
def test_anything_else_names_no_one(tmp_path: Path, text: bytes) -> None:
    fd = _hold(tmp_path, text)
    try:
        assert holding(tmp_path) == (os.getpid(), None)
        with pytest.raises(OperationInProgress) as exc:
            refuse_in_window(tmp_path, "`tenure start`")
        assert exc.value.msg.startswith("an owner maintenance window (`tenure owner "
                                        "upgrade`) or a `tenure down` runs on this home")
        assert exc.value.data["holder"] is None
    finally:
        os.close(fd)


def test_a_symlinked_lock_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "execution").mkdir()
    target = tmp_path / "elsewhere"
    target.write_bytes(DOWN.encode())
    os.symlink(target, lock_path(tmp_path))
    from protocol.window import said
    assert said(lock_path(tmp_path)) is None


def test_busy_without_a_pid() -> None:
    assert "(its pid unknown)" in busy(None, "x").msg


def test_a_down_under_way_is_named_by_its_pid(tmp_path: Path) -> None:
    fd = _hold(tmp_path, DOWN.encode())
    try:
        assert down_running(tmp_path) == os.getpid()
    finally:
        os.close(fd)


def test_a_down_that_died_is_no_down_under_way(tmp_path: Path) -> None:
    (tmp_path / "execution").mkdir()
    Path(lock_path(tmp_path)).write_bytes(DOWN.encode())   # nobody holds the lock
    assert down_running(tmp_path) is None


@pytest.mark.parametrize("text", [b"", b"`tenure owner upgrade`", b"\xff"])
def test_only_a_lock_that_says_down_is_looked_up_in_proc_locks(
        tmp_path: Path, text: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read of /proc/locks in a process waits ~10 ms for the kernel: a lock
    that does not say `down` (held or not) answers without it."""
    looked: list[str] = []
    monkeypatch.setattr(window, "flock_holder",
                        lambda path, **kw: looked.append(path) or os.getpid())
    assert down_running(tmp_path) is None   # no execution/ at all
    fd = _hold(tmp_path, text)
    try:
        assert down_running(tmp_path) is None
        assert looked == []
        os.pwrite(fd, DOWN.encode(), 0)
        os.ftruncate(fd, len(DOWN))
        assert down_running(tmp_path) == os.getpid()
        assert looked == [lock_path(tmp_path)]
    finally:
        os.close(fd)
