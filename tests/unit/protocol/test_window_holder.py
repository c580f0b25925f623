"""protocol.window: who holds execution/maintenance.lock, and what it said it does.
A reader takes only the words a holder writes (HOLDERS); anything else names no one."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from protocol.errors import OperationInProgress
from protocol.window import DOWN, HOLDERS, busy, holding, lock_path, refuse_in_window


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
