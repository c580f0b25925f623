"""`tenure up --foreground` waits for SIGINT, SIGTERM or SIGHUP (its terminal closed) and
then stops everything, as `tenure down` does (docs/cli.md). SIGHUP ended the command and
left tenure running with nobody to stop it. SIGTERM used to end the command at once, by its default
action, and leave the daemons and the applications running; a signal that came while
tenure was still starting did the same (Ctrl-C only ended the wait)."""

from __future__ import annotations

import os
import signal
import time

import pytest

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
WAITING = "tenure: running in the foreground"


def _foreground(cluster):
    args = ["up", "--foreground", "--config", str(cluster.write_config(APP))]
    if cluster.release is not None:
        args += ["--release", str(cluster.release)]
    return cluster.follow(*args)


def _ended(cluster, fg) -> None:
    try:
        out, err = fg.communicate(timeout=120)
    finally:
        if fg.poll() is None:
            fg.kill()
            fg.communicate()
    assert fg.returncode == 0, (out, err)
    assert cluster.cli("status").code == 3       # tenure is not running
    assert cluster.leftovers() == []


@pytest.mark.parametrize("sigs", [[signal.SIGTERM], [signal.SIGINT], [signal.SIGHUP],
                                  [signal.SIGINT, signal.SIGTERM]])
def test_a_signal_to_up_foreground_stops_everything(cluster, sigs):
    """Two at once: the second, delivered as the wait ended, killed the command before
    its down (a review found it)."""
    fg = _foreground(cluster)
    assert fg.stderr is not None
    line = ""
    while WAITING not in line and fg.poll() is None:   # ends with the command at worst
        line = fg.stderr.readline()
    assert WAITING in line, line
    for sig in sigs:
        fg.send_signal(sig)
    _ended(cluster, fg)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_tenure_starts_stops_everything_once_started(cluster, sig):
    fg = _foreground(cluster)
    deadline = time.monotonic() + 60
    while not os.path.exists(cluster.layout.owner_sock) and time.monotonic() < deadline:
        time.sleep(0.01)
    fg.send_signal(sig)
    _ended(cluster, fg)
