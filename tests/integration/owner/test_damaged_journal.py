"""journal.db damaged while tenure was down: the owner refuses to start on it, and what
it and `tenure logs` print names the file and the way out. Set aside, it is the
operator's to keep; the owner starts a new journal and the apps' lines flow again."""

from __future__ import annotations

import json
import sqlite3

import pytest

from owner.journal import Journal, LogSource
from owner.testing import OwnerProcess

CONFIG = """
[stacks.s.apps.talker]
command = ["sh", "-c", "while :; do echo line; sleep 0.1; done"]
"""

GARBAGE = b"\x5a" * 8192


def test_a_damaged_journal_is_set_aside_and_the_owner_starts_a_new_one(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: "line" in cluster.cli_text("logs", "s/talker", "-n", "1"), 10,
                 "a line logged")
    assert cluster.down().code == 0
    execution = cluster.layout.execution
    journal = execution / "journal.db"
    for side in ("-wal", "-shm"):
        (execution / f"journal.db{side}").unlink(missing_ok=True)
    journal.write_bytes(GARBAGE)

    up = cluster.cli("up")
    said = up.stderr + json.dumps(up.out)
    assert up.code != 0 and "STATE_CORRUPT" in said, said
    assert str(journal) in said and "A damaged journal.db" in said, said
    logs = cluster.cli("logs", "s/talker")
    assert logs.code == 1 and logs.out["error"]["code"] == "STATE_CORRUPT", logs.out
    assert "A damaged journal.db" in logs.out["error"]["msg"], logs.out
    assert journal.read_bytes() == GARBAGE                  # refused, not replaced
    cluster.down()

    journal.rename(execution / "journal.db.damaged")
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: "line" in cluster.cli_text("logs", "s/talker", "-n", "1"), 10,
                 "a line logged in the new journal")
    assert (execution / "journal.db.damaged").read_bytes() == GARBAGE


def test_a_row_damaged_under_a_running_owner_fails_logs_with_the_way_out(cluster):
    """Before, the owner sent the row as it was and the backend failed on it: INTERNAL,
    with no file named. The apps and every other command are not touched."""
    import sqlite3
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: "line" in cluster.cli_text("logs", "s/talker", "-n", "1"), 10,
                 "a line logged")
    journal = cluster.layout.execution / "journal.db"
    conn = sqlite3.connect(journal, isolation_level=None, timeout=10)
    try:
        conn.execute("UPDATE records SET ts='noon' WHERE id=1")
    finally:
        conn.close()
    pids = cluster.pids()

    for home in ("running", "down"):
        logs = cluster.cli("logs", "s/talker")
        assert logs.code == 1 and logs.out["error"]["code"] == "STATE_CORRUPT", logs.out
        msg = logs.out["error"]["msg"]
        assert f"{journal} is not a journal this owner can read (record 1 is malformed)" \
            in msg and "A damaged journal.db" in msg, (home, msg)
        if home == "running":
            assert cluster.cli_text("logs", "s/talker", "-n", "1").count("line") == 1
            assert cluster.pids() == pids
            assert cluster.down().code == 0


def test_text_that_is_not_utf8_in_the_journal_refuses_the_start_coded(short_home):
    """An extent's stack that is not UTF-8, as a hand edit or a bad disk would leave it:
    the owner ended INTERNAL (exit 7) with sqlite3's traceback ("Could not decode to
    UTF-8 column 'stack'"); it is a damaged journal, refused with the way out (exit 2)."""
    assert OwnerProcess(short_home).start().stop() == 0   # the home, as an owner makes it
    journal = short_home / "execution" / "journal.db"
    with Journal(journal) as j:
        j.append(LogSource("s", "talker", 0, 1), "stdout", [(b"line", 0)])
        assert j.flush(timeout=30)
    conn = sqlite3.connect(journal, isolation_level=None)
    try:
        conn.execute("UPDATE extents SET stack=CAST(x'ff' AS TEXT)")
    finally:
        conn.close()
    with pytest.raises(RuntimeError) as failed:
        OwnerProcess(short_home).start()
    said = str(failed.value)
    assert said.startswith("owner exited 2:") and "Traceback" not in said, said
    assert f"STATE_CORRUPT: {journal} is not a journal this owner can read (Could not " \
           "decode to UTF-8 column 'stack'" in said and "A damaged journal.db" in said, said
