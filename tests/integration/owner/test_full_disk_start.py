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

NO_XFSZ = "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
FULL = NO_XFSZ + "resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))\n"


def full_during(target: str, limit: str) -> str:
    """A preload: while ``owner.TARGET`` ("module.name" or "module.Class.name") runs,
    no file may grow past ``limit`` (a Python expression, evaluated then): the disk is
    full for that step alone; what follows (the log, the exit) has room again."""
    module, name = target.split(".", 1)
    return NO_XFSZ + f"""
import os
from owner import {module}
_real = {module}.{name}
def _on_a_full_disk(*args, **kw):
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
    try:
        return _real(*args, **kw)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
{module}.{name} = _on_a_full_disk
"""


def refused_start(home: Path, preload: str) -> str:
    """What an owner started with ``preload`` said as it ended: exit status 2, no
    traceback, nothing the disk's failure is not (STATE_CORRUPT, INTERNAL)."""
    with pytest.raises(RuntimeError) as failed:
        OwnerProcess(home, preload=preload).start()
    said = str(failed.value)
    assert said.startswith("owner exited 2:"), said
    for wrong in ("Traceback", "STATE_CORRUPT", "INTERNAL"):
        assert wrong not in said, said
    return said


def test_a_start_on_a_full_disk_fails_coded_and_the_next_one_serves(short_home: Path):
    said = refused_start(short_home, FULL)
    assert f"STORAGE_FAILED: opening {short_home}/execution/owner.db failed: the storage " \
           "failed (OperationalError: " in said, said
    assert not (short_home / "execution" / "owner.db").exists()

    again = OwnerProcess(short_home).start()   # space again: nothing to put back
    try:
        assert again.client().call("status")["owner"]["instance"] == again.instance
    finally:
        assert again.stop() == 0


# The database is made; the disk fills before the owner adds its later tables to it.
FULL_AFTER_CREATE = full_during("store.OwnerStore._expand", "os.path.getsize(os.path.join("
                                "os.environ['TENURE_TEST_HOME'], 'execution', 'owner.db'))")


def test_a_disk_that_fills_during_the_start_is_storage_failed_not_internal(
        short_home: Path, monkeypatch: pytest.MonkeyPatch):
    """It ended INTERNAL (exit 7) with sqlite3's traceback from the owner's store."""
    monkeypatch.setenv("TENURE_TEST_HOME", str(short_home))
    said = refused_start(short_home, FULL_AFTER_CREATE)
    assert "STORAGE_FAILED: the owner's start failed: the storage failed " \
           "(OperationalError: " in said, said

    again = OwnerProcess(short_home).start()   # space again: the tables are added now
    assert again.stop() == 0


# The owner's records are made; the disk is full when its journal is created.
FULL_AT_JOURNAL = full_during("journaltables.open_writer", "0")


def test_a_journal_the_disk_cannot_take_is_storage_failed_not_corrupt(short_home: Path):
    """It was STATE_CORRUPT: "journal unreadable: disk I/O error"."""
    said = refused_start(short_home, FULL_AT_JOURNAL)
    assert f"STORAGE_FAILED: opening the journal {short_home}/execution/journal.db " \
           "failed: the storage failed (OperationalError: " in said, said

    again = OwnerProcess(short_home).start()
    assert again.stop() == 0
