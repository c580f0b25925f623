"""The background start of `tenure up --no-wait` (backend.cli.background.in_background):
the command returns at once; the child's work runs detached, and an error of its own
ends in logs/up.log with its traceback and exit status 1, never silently."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from backend import queuefile
from backend.cli import background, upwait
from backend.cli.background import in_background
from protocol.errors import StorageFailed
from protocol.layout import Layout


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_work_runs_in_a_child_of_its_own_session(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    marker = tmp_path / "ran"

    def work() -> None:
        marker.write_text(f"{os.getpid()} {os.getsid(0)}")
    pid = in_background(layout, work)
    assert pid != os.getpid() and _wait(pid) == 0
    child, session = map(int, marker.read_text().split())
    assert child == pid and session == pid
    log = layout.logs / "up.log"
    assert log.read_text().endswith(" tenure up --no-wait: the daemons answer\n")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    last = background.last_background_start(layout)
    assert last is not None and last["ok"] and last["at"] in log.read_text()


def test_an_error_in_the_child_is_logged_with_its_traceback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)

    def work() -> None:
        raise RuntimeError("the release would not verify")
    assert _wait(in_background(layout, work)) == 1
    text = (layout.logs / "up.log").read_text()
    assert "tenure up --no-wait: starting the daemons failed" in text
    assert "RuntimeError: the release would not verify" in text and "Traceback" in text
    last = background.last_background_start(layout)
    assert last is not None and not last["ok"]
    assert last["error"] == "RuntimeError: the release would not verify"


def test_the_last_record_of_up_log_is_the_one_reported(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert background.last_background_start(layout) is None          # no log
    layout.logs.mkdir(mode=0o700)
    log = layout.logs / "up.log"
    log.write_text("noise without a record\n")
    os.chmod(log, 0o600)
    assert background.last_background_start(layout) is None
    log.write_text("2026-01-01T10:00:00 tenure up --no-wait: starting the daemons failed\n"
                   "Traceback ...\nConnectFailed: owner did not come up\n"
                   "2026-01-01T10:05:00 tenure up --no-wait: the daemons answer\n")
    assert background.last_background_start(layout) == {"at": "2026-01-01T10:05:00",
                                                     "ok": True}
    os.chmod(log, 0o666)                                          # not ours alone: unread
    assert background.last_background_start(layout) is None


def _stopped_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    """A home whose guardian has a release selected and where nothing answers."""
    monkeypatch.setattr(background, "_selected", lambda layout: True)
    monkeypatch.setattr(background, "ping", lambda sock, **kw: None)
    return Layout(tmp_path)


def _fake_daemons(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In the forked child: verification and the daemons' start leave marks instead."""
    marks = layout.home / "marks"

    def mark(what: str) -> None:
        with open(marks, "a") as f:
            f.write(what + "\n")

    def verified(layout: Layout) -> dict[str, None]:
        mark("verified")
        return {"owner": None, "guardian": None}
    monkeypatch.setattr(background, "direct_commands", verified)
    monkeypatch.setattr(background, "ensure_daemons",
                        lambda layout, fg, direct: mark(f"started {sorted(direct)}"))
    return marks


def _prestarted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **knobs: float
                ) -> tuple[Layout, Path, background.Prestart]:
    """A stopped home, the fake daemons' marks and the background start forked for it
    (``knobs``: background's constants for this test, e.g. FRESH_S)."""
    layout = _stopped_home(tmp_path, monkeypatch)
    marks = _fake_daemons(layout, monkeypatch)
    for name, value in knobs.items():
        monkeypatch.setattr(background, name, value)
    early = background.prestart(layout)
    assert early is not None
    return layout, marks, early


def test_the_child_verifies_first_and_starts_the_daemons_when_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, marks, early = _prestarted(tmp_path, monkeypatch,
                                       FRESH_S=60.0)   # however slow the machine
    queued = background.start_queued(layout, early, "[stacks]\n", "/etc/tenure.toml")
    assert _wait(early.pid) == 0
    assert marks.read_text() == "verified\nstarted ['guardian', 'owner']\n"
    assert queued["starting"] == ["owner", "guardian"]
    assert queuefile.read_queued(Path(layout.queued_config))["source"] == "/etc/tenure.toml"
    assert background.last_background_start(layout)["ok"]


def test_a_word_that_comes_late_has_the_release_verified_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, marks, early = _prestarted(tmp_path, monkeypatch, FRESH_S=0.0)
    background.start_queued(layout, early, None, None)
    assert _wait(early.pid) == 0
    assert marks.read_text() == "verified\nverified\nstarted ['guardian', 'owner']\n"


def test_a_command_that_gives_up_before_its_word_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, marks, early = _prestarted(tmp_path, monkeypatch)
    early.cancel()                 # a config that does not parse, or the command died
    early.cancel()                 # twice is harmless (cmd_up's finally after a refusal)
    assert _wait(early.pid) == 0
    assert marks.read_text() == "verified\n"
    assert background.last_background_start(layout) is None     # no record: nothing started


def test_a_command_that_never_says_a_word_is_not_waited_for_forever(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, marks, early = _prestarted(tmp_path, monkeypatch, WORD_WAIT_S=0.05)
    try:
        assert _wait(early.pid) == 0       # while its pipe is still open
    finally:
        early.cancel()
    assert marks.read_text() == "verified\n"
    assert "no word from the command in 0 s: nothing started" in \
        (layout.logs / "up.log").read_text()
    assert background.last_background_start(layout) is None


def test_a_config_that_cannot_be_queued_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _stopped_home(tmp_path, monkeypatch)
    told, word = os.pipe()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(queuefile, "atomic_write_json", full)
    with pytest.raises(StorageFailed, match="No space left on device; nothing was started"):
        background.start_queued(layout, background.Prestart(0, word), "[stacks]\n",
                             "/etc/tenure.toml")
    assert os.read(told, 1) == b""          # closed without the word
    os.close(told)
    assert not Path(layout.queued_config).exists()


def test_a_background_start_that_cannot_fork_starts_and_queues_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _stopped_home(tmp_path, monkeypatch)
    before = set(os.listdir("/proc/self/fd"))

    def no_fork() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_fork)
    with pytest.raises(StorageFailed, match="temporarily unavailable; nothing was started"):
        background.prestart(layout)
    assert set(os.listdir("/proc/self/fd")) == before        # no pipe end left open
    assert not Path(layout.queued_config).exists()


def test_a_child_gone_before_its_word_leaves_the_config_queued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _stopped_home(tmp_path, monkeypatch)
    told, word = os.pipe()
    os.close(told)                          # the child died (its error is in up.log)
    with pytest.raises(StorageFailed, match="config stays queued"):
        background.start_queued(layout, background.Prestart(0, word), "[stacks]\n",
                             "/etc/tenure.toml")
    assert Path(layout.queued_config).exists()


def test_down_and_up_wait_while_the_child_starts_the_daemons(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert upwait.wait_background_start(layout, timeout=0)   # none ever ran
    go_r, go_w = os.pipe()

    def work() -> None:
        os.read(go_r, 1)            # "spawning": until the test lets it finish
    pid = in_background(layout, work)
    try:
        assert not upwait.wait_background_start(layout, timeout=0.05)
    finally:
        os.write(go_w, b"x")
        os.close(go_w)
        os.close(go_r)
    assert upwait.wait_background_start(layout, timeout=30)
    assert _wait(pid) == 0
