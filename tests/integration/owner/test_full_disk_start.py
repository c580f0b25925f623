"""An owner that starts on a disk that cannot take its database: regression for a home
that could never start again. The first start failed with STATE_CORRUPT ("owner.db is
not a readable database: disk I/O error") and left an empty owner.db; every later start,
with space again, refused it as truncated. Now the start ends STORAGE_FAILED (exit 2,
no traceback), leaves no owner.db, and the next start serves. The write fails for real:
the owner runs with a file size limit of 8 KiB (RLIMIT_FSIZE, SIGXFSZ ignored): its log
fits, its database's first pages do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from owner.testing import OwnerProcess

FULL = ("import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))\n")


def test_a_start_on_a_full_disk_fails_coded_and_the_next_one_serves(short_home: Path):
    with pytest.raises(RuntimeError) as failed:
        OwnerProcess(short_home, preload=FULL).start()
    said = str(failed.value)
    assert said.startswith("owner exited 2:"), said
    assert f"STORAGE_FAILED: opening {short_home}/execution/owner.db failed: the storage " \
           "failed (OperationalError: " in said, said
    assert "Traceback" not in said and "STATE_CORRUPT" not in said, said
    assert not (short_home / "execution" / "owner.db").exists()

    again = OwnerProcess(short_home).start()   # space again: nothing to put back
    try:
        assert again.client().call("status")["owner"]["instance"] == again.instance
    finally:
        assert again.stop() == 0


# The database is made; the disk fills before the owner adds its later tables to it.
FULL_AFTER_CREATE = FULL.replace("resource.setrlimit", "_ = ") + """
import os
from owner import store
_expand = store.OwnerStore._expand
def _expand_on_a_full_disk(self):
    size = os.path.getsize(os.path.join(os.environ["TENURE_TEST_HOME"], "execution",
                                        "owner.db"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    try:
        _expand(self)
    finally:   # the write failed for real; what follows (the log, the exit) has room
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
store.OwnerStore._expand = _expand_on_a_full_disk
"""


def test_a_disk_that_fills_during_the_start_is_storage_failed_not_internal(
        short_home: Path, monkeypatch: pytest.MonkeyPatch):
    """It ended INTERNAL (exit 7) with sqlite3's traceback from the owner's store."""
    monkeypatch.setenv("TENURE_TEST_HOME", str(short_home))
    with pytest.raises(RuntimeError) as failed:
        OwnerProcess(short_home, preload=FULL_AFTER_CREATE).start()
    said = str(failed.value)
    assert said.startswith("owner exited 2:"), said
    assert "STORAGE_FAILED: the owner's start failed: the storage failed " \
           "(OperationalError: " in said, said
    assert "Traceback" not in said and "INTERNAL" not in said, said

    again = OwnerProcess(short_home).start()   # space again: the tables are added now
    assert again.stop() == 0


# The owner's records are made; the disk is full when its journal is created.
FULL_AT_JOURNAL = FULL.replace("resource.setrlimit", "_ = ") + """
from owner import journal
_open_writer = journal.open_writer
def _open_writer_on_a_full_disk(path):
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    try:
        return _open_writer(path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
journal.open_writer = _open_writer_on_a_full_disk
"""


def test_a_journal_the_disk_cannot_take_is_storage_failed_not_corrupt(short_home: Path):
    """It was STATE_CORRUPT: "journal unreadable: disk I/O error"."""
    with pytest.raises(RuntimeError) as failed:
        OwnerProcess(short_home, preload=FULL_AT_JOURNAL).start()
    said = str(failed.value)
    assert said.startswith("owner exited 2:"), said
    assert f"STORAGE_FAILED: opening the journal {short_home}/execution/journal.db " \
           "failed: the storage failed (OperationalError: " in said, said

    again = OwnerProcess(short_home).start()
    assert again.stop() == 0
