"""protocol.durable.read_private refuses, with UNSAFE_PATH and without waiting, whatever
is not a private regular file at the path: a symlink, a directory, a FIFO (which an
open without O_NONBLOCK would wait on until a writer came)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.durable import read_private
from protocol.errors import UnsafePath


def test_a_private_file_is_read(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"data")
    os.chmod(f, 0o600)
    assert read_private(f) == b"data"


def test_tail_reads_the_end_of_a_file_of_any_size(tmp_path: Path) -> None:
    f = tmp_path / "log"
    f.write_bytes(b"x" * 5000 + b"the end\n")
    os.chmod(f, 0o600)
    assert read_private(f, max_size=100, tail=8) == b"the end\n"
    assert read_private(f, tail=1 << 20) == f.read_bytes()


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "world-writable"])
def test_anything_else_is_unsafe(tmp_path: Path, kind: str) -> None:
    p = tmp_path / "x"
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p, 0o600)
    elif kind == "symlink":
        (tmp_path / "target").write_bytes(b"data")
        p.symlink_to(tmp_path / "target")
    else:
        p.write_bytes(b"data")
        os.chmod(p, 0o666)
    with pytest.raises(UnsafePath):
        read_private(p)
    before = set(os.listdir(f"/proc/{os.getpid()}/fd"))
    with pytest.raises(UnsafePath):
        read_private(p)
    assert set(os.listdir(f"/proc/{os.getpid()}/fd")) <= before   # nothing left open
