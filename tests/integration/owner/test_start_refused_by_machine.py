"""An owner the machine refuses a thread as it starts (a pids limit reached) ends coded:
INTERNAL with the cause on one line, exit 7. It ended with a bare traceback and exit 1,
which owner.md gives to a shutdown with a failed stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from owner.testing import OwnerProcess

NO_THREADS = ("import threading\n"
              "def refused(self):\n"
              "    raise RuntimeError(\"can't start new thread\")\n"
              "threading.Thread.start = refused\n")


def test_an_owner_refused_a_thread_at_start_ends_coded(short_home: Path) -> None:
    owner = OwnerProcess(short_home, preload=NO_THREADS)
    with pytest.raises(RuntimeError) as exited:
        owner.start()
    said = str(exited.value)
    assert said.startswith("owner exited 7:"), said
    assert "INTERNAL: the owner could not go on: RuntimeError: can't start new thread" \
        in said, said
