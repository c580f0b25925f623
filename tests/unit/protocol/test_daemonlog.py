"""A daemon's log on a disk that refuses writes: each failed write is counted and said
once writes work again, instead of logging's '--- Logging error ---' and a traceback
per record (which filled a full disk's logs with fragments). A real full disk:
tests/integration/stack/test_full_disk.py."""

from __future__ import annotations

import errno
import io
import logging

import pytest

from protocol.daemonlog import DaemonLogHandler


class Disk(io.StringIO):
    """A stream whose writes fail with ENOSPC while ``full``."""

    full = False

    def write(self, s: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(s)


def _logger(stream: io.StringIO) -> logging.Logger:
    handler = DaemonLogHandler(stream)
    handler.setFormatter(logging.Formatter("owner %(levelname)s %(message)s"))
    log = logging.getLogger(f"test-daemonlog-{id(stream)}")
    log.propagate = False
    log.handlers = [handler]
    return log


def test_failed_writes_are_counted_and_said_once_the_disk_takes_them(capsys) -> None:
    disk = Disk()
    log = _logger(disk)
    log.warning("before")
    disk.full = True
    for i in range(3):
        log.error("lost %d", i)
    disk.full = False
    log.warning("after")
    log.warning("later")
    assert disk.getvalue().splitlines() == [
        "owner WARNING before",
        "owner WARNING 3 log writes failed (No space left on device); records from then "
        "may be missing",
        "owner WARNING after", "owner WARNING later"]
    assert capsys.readouterr().err == ""   # no '--- Logging error ---' anywhere


def test_a_notice_that_fails_too_is_counted_with_the_record() -> None:
    disk = Disk()
    log = _logger(disk)
    disk.full = True
    log.error("lost")
    log.error("lost too")   # its notice fails first: the record is not tried
    disk.full = False
    log.warning("after")
    assert disk.getvalue().splitlines()[0].startswith("owner WARNING 2 log writes failed")


def test_a_record_that_cannot_be_formatted_keeps_loggings_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    disk = Disk()
    log = _logger(disk)
    log.warning("%d", "not a number")
    assert "--- Logging error ---" in capsys.readouterr().err
    log.warning("next")
    assert disk.getvalue() == "owner WARNING next\n"
