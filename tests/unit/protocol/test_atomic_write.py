"""protocol.durable.atomic_write: replaces atomically, refuses links, and fsyncs the file
and its directory unless told the file is only a report on running daemons; JSON in its
two layouts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol import durable
from protocol.errors import UnsafePath


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What atomic_write fsyncs, by the path behind each descriptor."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    return seen


def test_the_file_and_its_directory_are_fsynced(tmp_path: Path, fsyncs: list[str]):
    target = tmp_path / "state.json"
    record = {"kind": "tenure-test", "format": 1, "a": 1}
    durable.atomic_write_json(target, record)
    assert fsyncs == [f"{target}.tmp-{os.getpid()}", str(tmp_path)]
    assert durable.read_json(target, "tenure-test") == record


def test_without_sync_the_replacement_is_the_same_and_nothing_is_fsynced(
        tmp_path: Path, fsyncs: list[str]):
    target = tmp_path / "state.json"
    durable.atomic_write(target, b"old\n")
    fsyncs.clear()
    durable.atomic_write(target, b"new\n", sync=False)
    assert fsyncs == []
    assert target.read_bytes() == b"new\n" and oct(target.stat().st_mode & 0o777) == "0o600"
    assert os.listdir(tmp_path) == ["state.json"]   # no temporary file left


def test_a_symlink_is_refused_and_left_alone(tmp_path: Path, fsyncs: list[str]):
    (tmp_path / "elsewhere").write_bytes(b"keep\n")
    link = tmp_path / "state.json"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePath):
        durable.atomic_write(link, b"new\n", sync=False)
    assert (tmp_path / "elsewhere").read_bytes() == b"keep\n" and fsyncs == []


def test_json_is_sorted_per_line_or_compact_in_its_own_order(tmp_path: Path) -> None:
    """Files people read are indented with sorted keys; compact ones (a handoff's
    checkpoint, read by programs only) keep the maps' order on one line: sorting costs
    the encoder a third more inside the handoff's pause."""
    obj = {"b": 1, "a": {"z": 2, "y": 3}}
    durable.atomic_write_json(tmp_path / "read.json", obj)
    durable.atomic_write_json(tmp_path / "compact.json", obj, compact=True)
    assert (tmp_path / "read.json").read_text() == \
        '{\n "a": {\n  "y": 3,\n  "z": 2\n },\n "b": 1\n}\n'
    assert (tmp_path / "compact.json").read_text() == '{"b": 1, "a": {"z": 2, "y": 3}}\n'
