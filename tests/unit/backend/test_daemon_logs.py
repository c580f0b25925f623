"""The logs `tenure up` gives the owner and the guardian (logs/owner.log,
logs/guardian.log, logs/up.log) are opened by daemons.open_log: never through a
symlink, never chmod'ed (was: open() then chmod(), both following a symlink: the daemon
appended to, and made 0600, whatever file the link named); one of another user or open
to others is refused and left as it is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from backend.cli.daemons import open_log
from protocol.errors import UnsafePath


def test_a_new_log_is_created_private_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "owner.log"
    for line in (b"one\n", b"two\n"):
        fd = open_log(path)
        try:
            assert os.get_blocking(fd)
            os.write(fd, line)
        finally:
            os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_symlinked_log_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs\n")
    os.chmod(target, 0o644)
    path = tmp_path / "owner.log"
    path.symlink_to(target)
    with pytest.raises(UnsafePath) as caught:
        open_log(path)
    assert caught.value.msg.startswith(f"{path} is a symlink")
    assert caught.value.data == {"path": str(path)}
    assert target.read_bytes() == b"theirs\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    path.unlink()
    path.symlink_to(tmp_path / "nowhere")      # dangling: nothing is created there
    with pytest.raises(UnsafePath):
        open_log(path)
    assert not (tmp_path / "nowhere").exists()


def test_a_log_open_to_others_or_not_a_file_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "guardian.log"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o644)
    with pytest.raises(UnsafePath, match=r"is open to other users \(mode 0644\)"):
        open_log(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_bytes() == b"old\n"
    fifo = tmp_path / "up.log"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UnsafePath):       # refused, not waited on for a reader
        open_log(fifo)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file away")
def test_a_log_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "owner.log"
    path.write_bytes(b"")
    os.chmod(path, 0o600)
    os.chown(path, 65534, -1)
    with pytest.raises(UnsafePath, match="is owned by uid 65534"):
        open_log(path)
