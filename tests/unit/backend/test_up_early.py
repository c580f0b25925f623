"""`tenure up --no-wait`'s background child forked as the command starts
(backend.cli.early): a guess from the command line's words that starts nothing until
the command adopts it (background.prestart) and gives its word. Real forks, pipes and
runtime/up.lock; the daemons' start is faked (test_up_background's marks)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli import background, early, upwait
from protocol.layout import Layout
from protocol.procfs import read_stat

from .test_up_background import _fake_daemons, _stopped_home, _wait


@pytest.mark.parametrize(("argv", "home"), [
    (["up", "--no-wait"], "DEFAULT"),
    (["--home", "/h", "up", "--config", "c.toml", "--no-wait"], "/h"),
    (["--json", "--home=/h/./x", "up", "--no-wait"], "/h/x"),
    (["up", "--no-wait", "--home", "/h"], "/h"),
    (["up"], None),                                        # waits: starts them itself
    (["status", "--no-wait"], None),
    (["--home", "/h", "up", "--no-wait", "--home", "/g"], None),   # which one: argparse's
    (["up", "--no-wait", "--help"], None),
    (["up", "--no-wait", "--foreground"], None),
    (["--verbose", "up", "--no-wait"], None),               # unknown: argparse says why
    ([], None),
])
def test_the_command_line_is_read_before_it_is_parsed(
        argv: list[str], home: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_HOME", "/default-home")
    want = "/default-home" if home == "DEFAULT" else home
    assert early._home_of_up_no_wait(argv) == want


def _home(tmp_path: Path) -> Layout:
    """A stopped home as `tenure down` leaves it: guardian state, up.lock, no socket."""
    tmp_path.mkdir(mode=0o700, exist_ok=True)
    layout = Layout(tmp_path)
    layout.runtime.mkdir(mode=0o700)
    Path(layout.guardian_db).touch()
    Path(layout.up_lock).touch(mode=0o600)
    return layout


def _forked(layout: Layout) -> early.Early:
    early.prefork(["--home", str(layout.home), "up", "--no-wait", "--config", "t.toml"])
    child = early.take()
    assert child is not None and early.take() is None     # handed over once
    return child


def test_no_child_where_a_daemon_has_a_socket_or_the_home_no_state(tmp_path: Path) -> None:
    layout = _home(tmp_path)
    Path(layout.guardian_sock).touch()                     # a daemon, or a stale socket
    early.prefork(["--home", str(tmp_path), "up", "--no-wait"])
    assert early.take() is None
    os.unlink(layout.guardian_sock)
    os.unlink(layout.guardian_db)                          # never ran: `up` seals first
    early.prefork(["--home", str(tmp_path), "up", "--no-wait"])
    assert early.take() is None


def test_the_child_forked_first_is_adopted_and_starts_them_on_the_word(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _home(tmp_path)
    marks = _fake_daemons(layout, monkeypatch)
    _stopped_home(tmp_path, monkeypatch)
    monkeypatch.setattr(background, "FRESH_S", 60.0)          # however slow the machine
    child = _forked(layout)
    assert upwait.wait_background_start(layout, timeout=0)   # a guess locks nothing
    pre = background.prestart(layout, child)
    assert pre is not None and pre.pid == child.pid         # adopted, not forked again
    assert not upwait.wait_background_start(layout, timeout=0.05)   # locked for it
    background.start_queued(layout, pre, "[stacks]\n", "/etc/tenure.toml")
    assert _wait(child.pid) == 0
    assert marks.read_text() == "verified\nstarted ['guardian', 'owner']\n"
    assert background.last_background_start(layout)["ok"]
    assert upwait.wait_background_start(layout, timeout=0)   # let go when it ended


def test_a_home_where_a_daemon_answers_cancels_the_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _home(tmp_path)
    marks = _fake_daemons(layout, monkeypatch)
    monkeypatch.setattr(background, "_selected", lambda layout: True)
    monkeypatch.setattr(background, "ping", lambda sock, **kw: {"ok": True})
    child = _forked(layout)
    assert background.prestart(layout, child) is None
    assert upwait.wait_background_start(layout, timeout=30)   # held until it has gone
    assert _wait(child.pid) == 0
    assert marks.read_text() == "verified\n"                 # and nothing started
    assert background.last_background_start(layout) is None


def test_a_child_that_exited_or_guessed_another_home_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _home(tmp_path / "a")
    other = _home(tmp_path / "b")
    _fake_daemons(layout, monkeypatch)
    _stopped_home(tmp_path, monkeypatch)
    wrong = _forked(other)
    pre = background.prestart(layout, wrong)
    assert pre is not None and pre.pid != wrong.pid
    assert _wait(wrong.pid) == 0                             # cancelled: its pipe closed
    pre.cancel()
    assert _wait(pre.pid) == 0
    gone = _forked(layout)
    os.kill(gone.pid, 9)
    _wait(gone.pid)                                          # reaped: it has exited
    pre = background.prestart(layout, gone)
    assert pre is not None and pre.pid != gone.pid
    pre.cancel()
    assert _wait(pre.pid) == 0


def test_the_child_does_not_hold_the_command_output(tmp_path: Path) -> None:
    """A command whose output is a pipe (`tenure up --no-wait | tee`) ends it when it
    exits: the child, which may wait a minute for a word, does not keep it open."""
    _home(tmp_path)
    script = ("import os, sys, time\n"
              "from backend.cli import early\n"
              f"early.prefork(['--home', {str(tmp_path)!r}, 'up', '--no-wait'])\n"
              "child = early.take()\n"
              "print(child.pid, flush=True)\n"
              "os.close(1)\n"
              "time.sleep(60)\n")   # its word pipe stays open: the child waits for it
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.read() == b"", "the child kept the output open"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    for _ in range(300):                                     # it exits on its own
        if _gone(pid):
            break
        select.select([], [], [], 0.1)
    assert _gone(pid)


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    st = read_stat(pid)
    return st is None or st.zombie
