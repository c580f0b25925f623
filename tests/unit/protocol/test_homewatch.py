"""protocol.homewatch: a home deleted, moved or replaced is seen; a second claim on the
same home path is refused while the first is held."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path

import pytest

from protocol.errors import AlreadyRunning, HomeLost
from protocol.homewatch import HomeMark, claim, claim_name, watch
from protocol.procholders import parse_unix_listeners


def test_an_untouched_home_is_not_lost(tmp_path: Path) -> None:
    mark = HomeMark.take(tmp_path)
    (tmp_path / "file").write_text("x")   # what is inside does not matter
    assert mark.lost() is None


def test_a_deleted_home_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    mark = HomeMark.take(home)
    home.rmdir()
    loss = mark.lost()
    assert isinstance(loss, HomeLost) and loss.code.value == "HOME_LOST"
    assert loss.data == {"home": str(home), "now": "missing"}


def test_a_moved_home_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    mark = HomeMark.take(home)
    home.rename(tmp_path / "moved")
    assert mark.lost() is not None and mark.lost().data["now"] == "missing"


def test_a_home_made_again_at_the_same_path_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    mark = HomeMark.take(home)
    keep = tmp_path / "old"
    home.rename(keep)        # kept, so the new directory cannot reuse its inode
    home.mkdir()
    loss = mark.lost()
    assert loss is not None and loss.data["now"] == "replaced"
    assert "another directory" in loss.msg


def test_a_home_replaced_by_a_file_or_a_symlink_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    mark = HomeMark.take(home)
    home.rename(tmp_path / "old")
    home.symlink_to(tmp_path / "old")   # even to the same directory: never followed
    assert mark.lost() is not None and "another file" in mark.lost().msg
    home.unlink()
    home.write_text("")
    assert mark.lost() is not None


def test_a_mark_needs_a_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError):
        HomeMark.take(tmp_path / "f")
    with pytest.raises(FileNotFoundError):
        HomeMark.take(tmp_path / "none")


class Sleeps:
    """A fake sleep that runs ``then`` at its ``at``-th call."""

    def __init__(self, at: int, then: object) -> None:
        self.calls: list[float] = []
        self.at, self.then = at, then

    async def __call__(self, delay: float) -> None:
        self.calls.append(delay)
        if len(self.calls) == self.at:
            self.then()  # type: ignore[operator]


def test_the_watch_looks_until_the_home_is_lost_then_reports_it_once(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    seen: list[HomeLost] = []
    sleeps = Sleeps(3, home.rmdir)
    loss = asyncio.run(watch(HomeMark.take(home), seen.append, interval=0.25, sleep=sleeps))
    assert sleeps.calls == [0.25, 0.25, 0.25]   # two looks found it, the third did not
    assert seen == [loss] and loss.data["now"] == "missing"


class Unreadable(HomeMark):
    """A mark whose first looks fail with EACCES, then find the home lost."""

    fails = 3

    def lost(self) -> HomeLost | None:
        if Unreadable.fails:
            Unreadable.fails -= 1
            raise PermissionError(13, "Permission denied", self.path)
        return HomeLost("gone", {})


def test_a_look_that_fails_is_logged_once_and_the_watch_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mark = Unreadable(str(tmp_path), 0, 0)
    seen: list[HomeLost] = []
    with caplog.at_level(logging.WARNING, "tenure.home"):
        asyncio.run(watch(mark, seen.append, sleep=Sleeps(0, None)))
    assert len(seen) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "still watching" in warnings[0].getMessage()
    assert any("HOME_LOST" in r.getMessage() for r in caplog.records)


def test_a_second_claim_on_the_same_path_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = claim("owner", tmp_path)
    assert first is not None
    try:
        assert not first.get_inheritable()   # applications never inherit it
        with pytest.raises(AlreadyRunning) as err:
            claim("owner", tmp_path)
        assert err.value.data == {"home": str(tmp_path), "pid": os.getpid(),
                                  "home_lost": True}
        assert f"(pid {os.getpid()})" in err.value.msg
        other = claim("owner", tmp_path / "sub")   # another path: its own name
        assert other is not None
        other.close()
        guardian = claim("guardian", tmp_path)   # another kind: its own name
        assert guardian is not None
        guardian.close()
    finally:
        first.close()
    again = claim("owner", tmp_path)   # released with the socket
    assert again is not None
    again.close()


def test_a_name_bound_by_something_else_does_not_block_a_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(claim_name("owner", tmp_path))   # bound, never listening
    try:
        with caplog.at_level(logging.WARNING, "tenure.home"):
            assert claim("owner", tmp_path) is None
        assert "not by tenure" in caplog.text
    finally:
        squatter.close()


def _full_listener(name: bytes) -> tuple[socket.socket, list[socket.socket]]:
    """A listener bound to ``name`` with a queue of one, and the connections that fill
    it: a connect to it then gets no answer."""
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(name)
    held.listen(0)
    fillers = []
    for _ in range(3):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(name)
        fillers.append(c)
    return held, fillers


def _fill(name: bytes, as_uid: int | None) -> tuple[int, int]:
    """A child (as ``as_uid``, when given) that binds ``name``, listens with a queue of
    one and fills it, so that a connect to it gets no answer. Returns (pid, pipe fd to
    end it by closing)."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child
        try:
            os.close(ready_r)
            os.close(stop_w)
            if as_uid is not None:
                os.setgroups([])
                os.setgid(as_uid)
                os.setuid(as_uid)
            kept = _full_listener(name)   # held open until the child ends
            os.write(ready_w, b"x")
            os.read(stop_r, 1)
            del kept
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    assert os.read(ready_r, 1) == b"x"
    os.close(ready_r)
    return pid, stop_w


def _end(child: tuple[int, int]) -> None:
    os.close(child[1])
    os.waitpid(child[0], 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hold the name as another uid")
def test_another_user_who_fills_the_names_queue_does_not_block_a_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Anyone may bind an abstract name: a user who bound the owner's name and filled its
    queue made the owner refuse to start (ALREADY_RUNNING, 'another owner … still
    runs'), since a connect that got no answer was taken for one of ours."""
    child = _fill(claim_name("owner", tmp_path), as_uid=65534)
    try:
        with caplog.at_level(logging.WARNING, "tenure.home"):
            assert claim("owner", tmp_path) is None
        assert f"uid 65534, pid {child[0]}" in caplog.text, caplog.text
    finally:
        _end(child)


def test_a_daemon_of_ours_whose_queue_is_full_is_still_named(tmp_path: Path) -> None:
    """Our own claim never accepts, so refused starts fill its queue: it is then found
    through /proc, by its pid."""
    child = _fill(claim_name("owner", tmp_path), as_uid=None)
    try:
        with pytest.raises(AlreadyRunning) as err:
            claim("owner", tmp_path)
        assert err.value.data["pid"] == child[0], err.value.data
    finally:
        _end(child)


def test_unix_listeners_are_read_by_their_abstract_name() -> None:
    data = (b"Num       RefCount Protocol Flags    Type St Inode Path\n"
            b"0000: 00000002 00000000 00010000 0001 01 77 @tenure-owner-ab\n"
            b"0000: 00000002 00000000 00000000 0001 03 78 @tenure-owner-ab\n"
            b"0000: 00000002 00000000 00010000 0001 01 79 @tenure-owner-abc\n"
            b"0000: 00000002 00000000 00010000 0001 01 80 /run/x.sock\n")
    assert parse_unix_listeners(data, b"\0tenure-owner-ab") == [77]


def test_claim_names_are_abstract_and_fit_an_address() -> None:
    name = claim_name("owner", "/" + "x" * 4000)
    assert name.startswith(b"\0tenure-owner-") and len(name) < 108
    assert claim_name("owner", "/a/../a") != claim_name("owner", "/b")


def test_a_name_whose_holder_cannot_be_found_does_not_block_a_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Was: a name whose queue was full and whose socket no process held (its fd handed
    away over a unix socket, in flight) made the owner refuse to start (ALREADY_RUNNING,
    'held by a process tenure cannot identify'): any local user could keep an owner from
    starting on a known home path (/var/lib/tenure). A daemon of ours is always found
    through /proc; this holder is not one."""
    held, fillers = _full_listener(claim_name("owner", tmp_path))
    carrier, sink = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    socket.send_fds(carrier, [b"x"], [held.fileno()])
    held.close()                      # in flight only: no fd table shows it
    try:
        with caplog.at_level(logging.WARNING, "tenure.home"):
            assert claim("owner", tmp_path) is None
        assert "cannot identify" in caplog.text and "going on without it" in caplog.text
    finally:
        for s in (carrier, sink, *fillers):
            s.close()
