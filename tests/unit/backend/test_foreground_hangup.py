"""`up --foreground` whose terminal closed (SIGHUP) during the start: writing its notice
to the hung-up terminal failed (EIO), the error escaped before the down, and the daemons
it had started ran on with nobody to stop them."""

from __future__ import annotations

import errno
import signal
from types import SimpleNamespace
from typing import Any

from backend.cli import lifecycle


class _HungUp:
    def write(self, text: str) -> int:
        raise OSError(errno.EIO, "Input/output error")

    def flush(self) -> None:
        raise OSError(errno.EIO, "Input/output error")


def test_a_stop_during_the_start_runs_the_down_with_the_terminal_gone(monkeypatch: Any
                                                                     ) -> None:
    downs = []

    def stopped(args: Any) -> int:
        raise lifecycle._Stopped()
    monkeypatch.setattr(lifecycle, "_up", stopped)
    monkeypatch.setattr(lifecycle, "_calm", lambda args: None)
    monkeypatch.setattr(lifecycle, "cmd_down", lambda args: downs.append(args) or 0)
    monkeypatch.setattr("sys.stderr", _HungUp())
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        args = SimpleNamespace(no_wait=False, foreground=True)
        assert lifecycle.cmd_up(args) == 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert downs == [args]
