"""`tenure up --foreground` waits for SIGINT or SIGTERM and then stops everything, as
`tenure down` does (docs/cli.md). SIGTERM used to end the command at once, by its default
action, and leave the daemons and the applications running."""

from __future__ import annotations

import signal

import pytest

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_up_foreground_stops_everything(cluster, sig):
    config = cluster.write_config(APP)
    args = ["up", "--foreground", "--config", str(config)]
    if cluster.release is not None:
        args += ["--release", str(cluster.release)]
    fg = cluster.follow(*args)
    try:
        cluster.wait_ready(1)
        assert fg.poll() is None
        fg.send_signal(sig)
        out, err = fg.communicate(timeout=120)
    finally:
        if fg.poll() is None:
            fg.kill()
            fg.communicate()
    assert fg.returncode == 0, (out, err)
    assert cluster.cli("status").code == 3       # tenure is not running
    assert cluster.leftovers() == []
