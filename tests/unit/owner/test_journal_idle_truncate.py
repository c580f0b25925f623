"""The checkpointer's account of how long the WAL file may be, when the writer caught
up just before it went idle. Was: the counters said "empty" (the next commit restarts
the WAL), so the idle writer did not truncate, and no commit came: a flood that ended
right after the writer's own catch-up left its WAL tens of MB long (a flaky test of the
journal on disk showed it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from owner.journalckpt import KEEP_FRAMES, Checkpointer


def test_a_caught_up_wal_keeps_its_length_until_a_commit_or_a_truncate(tmp_path: Path):
    ckpt = Checkpointer(lambda: sqlite3.connect(tmp_path / "j.db"))
    try:
        long = KEEP_FRAMES * 4
        ckpt.committed(long)
        ckpt.checkpointed(0, long, long)          # the writer caught up: no commit since
        assert ckpt.owed() and ckpt.idle()        # the file is still long: truncate it
        ckpt.checkpointed(0, long, long, truncated=True)
        assert not ckpt.owed()
        ckpt.committed(long)
        ckpt.checkpointed(0, long, long)
        ckpt.committed(1)                         # a commit started the WAL over
        assert not ckpt.owed()
    finally:
        ckpt.stop(5)


def test_an_idle_writer_truncates_only_a_wal_that_may_be_longer_than_it_keeps(tmp_path: Path):
    """As docs/owner.md and state.md say: a short WAL is left as it is when the writer
    goes idle (they said it was emptied whatever its length)."""
    ckpt = Checkpointer(lambda: sqlite3.connect(tmp_path / "j.db"))
    try:
        ckpt.committed(KEEP_FRAMES - 1)
        assert not ckpt.idle() and not ckpt.owed()   # short: kept
        ckpt.committed(1)
        assert ckpt.idle()                            # it may be KEEP_BYTES: emptied
    finally:
        ckpt.stop(5)
