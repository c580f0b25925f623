"""`tenure logs` while tenure is not running: the journal file read directly, read-only,
page by page, with targets matched against the apps it has lines of. A real journal
written by the owner's Journal; the backend's `call` is a fake that finds tenure
stopped (or not)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import stat
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.cli.logs import follow_logs
from backend.cli.offline_logs import Fallback, FollowEnded
from owner.journal import Journal, LogSource
from protocol.errors import BackendUnavailable, BadRequest, NotFound, OwnerUnavailable
from protocol.layout import Layout

STOPPED = BackendUnavailable("no backend generation answers; tenure is not running",
                             {"stopped": {"owner": {"state": "clean"}}})


def args(**kw: Any) -> Any:
    base = {"targets": [], "stream": None, "since": None, "n": 50, "follow": False,
            "json": False, "grep": None}
    return types.SimpleNamespace(**{**base, **kw})


@pytest.fixture
def home(tmp_path: Path) -> Layout:
    lay = Layout(tmp_path)
    os.makedirs(lay.execution, mode=0o700)
    with Journal(lay.execution / "journal.db") as j:
        for i in range(3):
            j.append(LogSource("shop", "web", i, 1), "stdout", [(b"web %d" % i, 0)])
        j.append(LogSource("shop", "db", 0, 1), "stderr", [(b"db says", 0)])
        for n in range(25_000):   # more than a page
            j.append(LogSource("batch", "etl", 0, 1), "stdout", [(b"etl %d" % n, 0)])
        assert j.flush(timeout=60)
    return lay


def logs(a: Any, fallback: Fallback) -> int:
    """What cmd_logs does: a follow of the file ends with FollowEnded, exit 0."""
    try:
        return follow_logs(a, fallback)
    except FollowEnded:
        return 0


def run(lay: Layout, monkeypatch: pytest.MonkeyPatch, raised: Exception = STOPPED,
        **kw: Any) -> tuple[list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        raise raised

    assert logs(args(**kw), Fallback(call, lay)) == 0
    return out.getvalue().splitlines(), err.getvalue()


def test_the_journal_is_read_when_tenure_is_not_running(home, monkeypatch):
    lines, err = run(home, monkeypatch, targets=["shop"], n=10)
    assert lines == ["shop/web/0: web 0", "shop/web/1: web 1", "shop/web/2: web 2",
                     "shop/db/0 (stderr): db says"]
    assert err == (f"tenure: logs: tenure is not running: reading {home.execution}/"
                   "journal.db directly (what the apps wrote until the owner stopped)\n")
    lines, _ = run(home, monkeypatch, targets=["shop/w*/1", "batch/etl"], n=2)
    assert lines == ["batch/etl/0: etl 24998", "batch/etl/0: etl 24999"]
    lines, _ = run(home, monkeypatch, targets=["shop/web/1", "shop/db"], stream="stdout")
    assert lines == ["shop/web/1: web 1"]
    lines, _ = run(home, monkeypatch, since="0", n=0)   # every line, page by page
    assert len(lines) == 25_004


def test_a_follow_prints_what_there_is_and_ends(home, monkeypatch):
    lines, err = run(home, monkeypatch, targets=["shop/db"], follow=True)
    assert lines == ["shop/db/0 (stderr): db says"] and err.endswith("; -f ends there\n")


def test_targets_the_journal_has_no_lines_of_are_named(home, monkeypatch):
    with pytest.raises(NotFound, match="'shop/cache', 'x'"):
        run(home, monkeypatch, targets=["shop/cache", "x", "shop"])
    with pytest.raises(BadRequest, match="name instances by number"):
        run(home, monkeypatch, targets=["shop/web/[01]"])


def test_targets_follow_the_same_rules_and_codes_as_online(home, monkeypatch):
    """Was: `shop/web/1/2` printed instance 1's lines (online: BAD_REQUEST) and
    `shop/web/5` printed nothing, exit 0 (online: NOT_FOUND); `shop/web/*`, the whole
    app online, was refused."""
    with pytest.raises(BadRequest, match="target 'shop/web/1/2': must be STACK, "
                                         "STACK/APP or STACK/APP/N"):
        run(home, monkeypatch, targets=["shop/web/1/2"], n=1)
    with pytest.raises(BadRequest, match="target 'shop/web/x': instance 'x' is not a "
                                         "number"):
        run(home, monkeypatch, targets=["shop/web/x"], n=1)
    with pytest.raises(NotFound, match="'shop/web/5'"):
        run(home, monkeypatch, targets=["shop/web/5"], n=1)
    lines, _ = run(home, monkeypatch, targets=["shop/web/*"])
    assert lines == ["shop/web/0: web 0", "shop/web/1: web 1", "shop/web/2: web 2"]


def test_a_backend_gone_while_tenure_runs_stays_an_error(home, monkeypatch):
    unrelated = BackendUnavailable("no backend generation answers; recovery blocked",
                                   {"stopped": None})
    with pytest.raises(BackendUnavailable):   # the guardian runs: its diagnostics stand
        run(home, monkeypatch, raised=unrelated)



def test_a_follower_whose_tenure_stops_reads_the_rest_from_the_file(home, monkeypatch):
    """`tenure down` while following: the backend is gone while the guardian and owner
    still end; once they have, the rest comes from the file, from where it was."""
    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        if "after" not in params:   # the first page: up to shop/db's line
            return {"records": [], "last_id": 4, "next": 4, "more": False}
        raise BackendUnavailable("no backend generation answers", {"stopped": None})

    polls: list[int] = []

    def stopped(lay: Layout) -> Any:
        polls.append(1)
        return None if len(polls) < 3 else {"owner": {"state": "clean"}}
    monkeypatch.setattr("backend.cli.everyday.stopped", stopped)
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert logs(args(follow=True, targets=["batch/etl"]), Fallback(call, home)) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "batch/etl/0: etl 0" and len(lines) == 25_000   # none before id 5
    assert err.getvalue().startswith("tenure: logs: tenure stopped: reading ")
    assert err.getvalue().endswith("; -f ends there\n") and len(polls) == 3

    polls.clear()
    monkeypatch.setattr("backend.cli.everyday.stopped", lambda lay: None)  # still running
    monkeypatch.setattr("backend.cli.offline_logs.STOPPING_S", 0.05)
    monkeypatch.setattr("backend.cli.logs.FOLLOW_OUTAGE", 0.0)   # a handoff that never ends
    with pytest.raises(BackendUnavailable):
        follow_logs(args(follow=True), Fallback(call, home))


def test_a_missing_or_unreadable_journal_is_named(tmp_path, monkeypatch):
    from protocol.errors import StateCorrupt, Unauthorized
    with pytest.raises(NotFound, match="no app has run on this home"):
        run(Layout(tmp_path), monkeypatch)
    (tmp_path / "execution").mkdir()
    (tmp_path / "execution" / "journal.db").write_bytes(b"")
    with monkeypatch.context() as m:   # a viewer (this test may run as root)
        m.setattr("os.access", lambda path, mode: False)
        with pytest.raises(Unauthorized, match=f"readable only by uid {os.getuid()}: run"):
            run(Layout(tmp_path), monkeypatch)
    (tmp_path / "execution" / "journal.db").write_bytes(b"not a database" * 100)
    with pytest.raises(StateCorrupt, match="is not a journal this owner can read"):
        run(Layout(tmp_path), monkeypatch)


def test_a_follower_kept_waiting_by_a_blocked_recovery_says_so_at_once(home, monkeypatch):
    """Was: each read first waited 5 s for daemons that might be stopping, and nothing
    was said for 120 s, although the guardian's diagnostics said recovery was blocked."""
    blocked = BackendUnavailable("no backend generation answers", {
        "stopped": None, "diagnostics": {"blocked": {"reason": "no valid certificate"}}})
    script: list[Any] = [blocked, {"records": [], "last_id": 4, "next": 4, "more": False},
                         KeyboardInterrupt()]

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step
    monkeypatch.setattr("backend.cli.everyday.stopped", pytest.fail)   # not a shutdown
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(KeyboardInterrupt):
        follow_logs(args(follow=True), Fallback(call, home))
    assert err.getvalue() == ("tenure: logs: no backend answers: recovery blocked: no "
                              "valid certificate (`tenure backend recover`); waiting for "
                              "one for up to 120 s (Ctrl-C ends)\n"
                              "tenure: logs: a backend answers again; following\n")


OWNER_SILENT = OwnerUnavailable("the owner has not answered for 9 s",
                                {"owner_link": {"age": 9.0}})


def test_a_dead_owner_behind_a_running_backend_is_read_from_the_file(home, monkeypatch):
    """Was OWNER_UNAVAILABLE, exit 3, nothing printed: the backend answers, its owner
    died, and what the apps wrote until then was out of reach while the guardian ran
    (the runbook said to stop it first)."""
    lines, err = run(home, monkeypatch, raised=OWNER_SILENT, targets=["shop"], n=10)
    assert lines == ["shop/web/0: web 0", "shop/web/1: web 1", "shop/web/2: web 2",
                     "shop/db/0 (stderr): db says"]
    assert err == (f"tenure: logs: the owner is not running: reading {home.execution}/"
                   "journal.db directly (what the apps wrote until the owner stopped)\n")
    lines, _ = run(home, monkeypatch, raised=OWNER_SILENT, since="0", n=0)
    assert len(lines) == 25_004   # page by page, to the end


def test_an_owner_that_still_accepts_stays_unavailable(home, monkeypatch):
    """Stopped or busy, it accepts on its socket: it may write again, so it is waited
    for or named, never read behind its back."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(home.owner_sock)
        listener.listen(1)
        with pytest.raises(OwnerUnavailable):
            run(home, monkeypatch, raised=OWNER_SILENT, targets=["shop"])
    finally:
        listener.close()


def test_a_follower_of_a_dead_owner_prints_the_file_then_waits_for_an_owner(
        home, monkeypatch):
    """The file's lines past where the follower was, said once; then the wait for an
    owner (logs.read_page), the backend asked first every time: a new owner's lines
    follow on from the last record printed."""
    asked: list[dict[str, Any]] = []

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        asked.append(params)
        if len(asked) == 1:   # the first page, read through the backend: shop/web/0
            return {"records": [], "last_id": 1, "next": 1, "more": False}
        if len(asked) < 8:
            raise OWNER_SILENT
        if len(asked) == 8:   # an owner again: what it wrote after the file's end
            return {"records": [{"id": 25_005, "time": 0.0, "stack": "shop", "app": "web",
                                 "instance": 0, "stream": "stdout", "data": b"back",
                                 "partial": False}], "last_id": 25_005, "next": 25_005,
                    "more": False}
        raise KeyboardInterrupt
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(KeyboardInterrupt):
        follow_logs(args(follow=True, targets=["shop/web"]), Fallback(call, home))
    assert out.getvalue().splitlines() == ["shop/web/1: web 1", "shop/web/2: web 2",
                                           "shop/web/0: back"]
    notes = err.getvalue().splitlines()
    assert notes == [
        f"tenure: logs: the owner is not running: reading {home.execution}/journal.db "
        "directly (what the apps wrote until the owner stopped)",
        "tenure: logs: the owner has not answered for 9 s; following on once it answers "
        "(Ctrl-C ends)",
        "tenure: logs: the owner answers again; following"], notes
    assert asked[7]["after"] == 3   # from the last record the file had of shop/web


def test_reading_a_cleanly_closed_journal_leaves_nothing_beside_it(home, monkeypatch):
    """Was a new journal.db-shm (32 KiB) and an empty journal.db-wal after every read of
    a journal its owner had closed: the read said read-only and wrote two files."""
    before = sorted(os.listdir(home.execution))
    assert before == ["journal.db"], before
    run(home, monkeypatch, targets=["shop/db"])
    assert sorted(os.listdir(home.execution)) == before


def test_an_owner_away_for_its_upgrade_is_waited_for_not_read_around(home, monkeypatch):
    """During `tenure owner upgrade` (its maintenance window open) the owner is gone
    on purpose and the next one is on its way: no file read, the wait as before."""
    from protocol.durable import atomic_write_json
    from protocol.layout import MAINTENANCE_KIND
    atomic_write_json(home.maintenance, {"kind": MAINTENANCE_KIND, "format": 1,
                                         "step": "stopping"})
    with pytest.raises(OwnerUnavailable):
        run(home, monkeypatch, raised=OWNER_SILENT, targets=["shop"])
    atomic_write_json(home.maintenance, {"kind": MAINTENANCE_KIND, "format": 1,
                                         "step": "done"})
    lines, _ = run(home, monkeypatch, raised=OWNER_SILENT, targets=["shop/db"])
    assert lines == ["shop/db/0 (stderr): db says"]


def test_lines_retention_removed_are_said_from_the_file_too(tmp_path, monkeypatch):
    """Was: the marks lived in the owner's memory, so a read of the file while tenure was
    down printed what was kept and said nothing of what its budget had removed."""
    lay = Layout(tmp_path)
    os.makedirs(lay.execution, mode=0o700)
    with Journal(lay.execution / "journal.db", retention_bytes_per_app=64 << 10) as j:
        for n in range(300):
            j.append(LogSource("shop", "web", 0, 1), "stdout", [(b"%04d" % n + b"x" * 996,
                                                                 0)])
        assert j.flush(timeout=60)
    lines, err = run(lay, monkeypatch, targets=["shop/web"], since="0", n=0)
    assert lines and lines[-1].startswith("shop/web/0: 0299")
    gone = int(lines[0].split(": ")[1][:4])
    assert gone > 0 and f"records of shop/web/0 were removed by log retention before they " \
        f"were read (among ids 1-{gone})" in err, err


def test_the_file_answers_the_sources_its_targets_resolved_to(home, monkeypatch):
    """Was: the file's answer had no `resolved`, so a follower that began on the file
    kept its globs and had them resolved again at each page once tenure answered (the
    targets are resolved once, by the first read). It answers them as the backend does."""
    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        raise STOPPED
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    a = args(targets=["shop/w*", "batch"])
    page = Fallback(call, home)(a, "logs", {"targets": a.targets, "tail": 2,
                                            "limit": 100})
    assert page["resolved"] == ["batch", "shop/web"]   # the glob, as the apps it named
    again = Fallback(call, home)(a, "logs", {"targets": page["resolved"], "resolved": True,
                                             "after": 0, "limit": 100})
    assert again["resolved"] == page["resolved"]


@pytest.mark.parametrize("table", ["extents", "meta"])
def test_a_name_that_is_not_utf8_in_the_file_is_state_corrupt(home, monkeypatch, table):
    """Was: the list of the file's apps and its pruned marks were read outside the
    journal's damage check: a name that is not UTF-8 ended `tenure logs` in INTERNAL
    ('a defect of tenure') where the owner answers STATE_CORRUPT."""
    import sqlite3

    from protocol.errors import StateCorrupt
    conn = sqlite3.connect(str(home.execution / "journal.db"))
    if table == "extents":
        conn.execute("UPDATE extents SET stack = CAST(x'ff' AS TEXT) WHERE app = 'db'")
    else:
        conn.execute("INSERT INTO meta VALUES (CAST(x'7072756e65642fff' AS TEXT), '1')")
    conn.commit()
    conn.close()
    with pytest.raises(StateCorrupt):
        run(home, monkeypatch, targets=["shop"], n=10)


def _journal_of_another_home(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    with Journal(other / "journal.db") as j:
        j.append(LogSource("s", "web", 0, 1), "stdout", [(b"a line of ANOTHER journal", 0)])
        assert j.flush(timeout=10)
    return other


@pytest.mark.parametrize("swap", ["journal link", "execution link", "journal fifo",
                                  "wal fifo", "shm link", "execution file"])
def test_a_linked_or_special_journal_is_refused_not_read_or_waited_on(
        tmp_path, monkeypatch, swap):
    """Was read through: a journal.db (or execution/) that was a symlink printed another
    journal's lines as this home's, exit 0, and a FIFO named journal.db blocked the
    command for ever in sqlite3.connect; the owner refuses both (UNSAFE_PATH)."""
    from protocol.errors import UnsafePath
    other = _journal_of_another_home(tmp_path)
    home = tmp_path / "home"
    lay = Layout(home)
    home.mkdir(mode=0o700)
    if swap == "execution link":
        os.symlink(other, lay.execution)
        bad = str(lay.execution)
    elif swap == "execution file":
        lay.execution.write_bytes(b"")
        bad = str(lay.execution)
    else:
        lay.execution.mkdir(mode=0o700)
        if swap == "journal link":
            bad = lay.journal
            os.symlink(other / "journal.db", bad)
        elif swap == "journal fifo":
            bad = lay.journal
            os.mkfifo(bad)
        else:
            with Journal(lay.journal) as j:
                j.append(LogSource("s", "web", 0, 1), "stdout", [(b"ours", 0)])
                assert j.flush(timeout=10)
            bad = lay.journal + ("-wal" if swap == "wal fifo" else "-shm")
            if swap == "wal fifo":
                os.mkfifo(bad)
            else:
                os.symlink(other / "journal.db", bad)
    with _unblocked(bad), pytest.raises(UnsafePath, match=re.escape(f"{bad} is ")) as exc:
        run(lay, monkeypatch, n=1)
    assert exc.value.data["path"] == bad
    assert sys.stdout.getvalue() == ""   # nothing of the other journal printed


@contextlib.contextmanager
def _unblocked(path: str) -> Iterator[None]:
    """While in it, a FIFO at ``path`` that a reader opened is opened for writing and
    closed at once, so that a reader that did not refuse it fails instead of blocking
    the test run for ever."""
    if not stat.S_ISFIFO(os.lstat(path).st_mode):
        yield
        return
    done = threading.Event()

    def writer() -> None:
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:   # no reader yet (ENXIO)
                done.wait(0.01)
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
