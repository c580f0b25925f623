"""`tenure up --config` on a stopped home queues the config, then starts the daemons and
waits for them. Ctrl-C during that wait left them running but took the config out of
the queue (as if nothing had been started): the backend they started applied the config
before it, while the command had said the config it applies goes on. A Ctrl-C before
either was spawned, or a failure to start them, leaves nothing queued."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from backend.cli import daemons, firstrun, lifecycle, upwait
from protocol.layout import Layout


def _args() -> argparse.Namespace:
    return argparse.Namespace(release=None, foreground=False, timeout=5.0, json=False,
                              no_wait=False)


@pytest.mark.parametrize(("raised", "spawned", "kept"), [
    (KeyboardInterrupt, True, True),     # a daemon spawned: it may apply it
    (KeyboardInterrupt, False, False),   # Ctrl-C before any: nothing would, ever
    (OSError, True, False)])
def test_the_config_stays_queued_when_the_wait_is_interrupted(
        tmp_path: Path, monkeypatch: Any, raised: type[BaseException], spawned: bool,
        kept: bool) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    layout = Layout(home)

    def starting(layout: Any, foreground: bool, spawning: set[str]) -> Any:
        if spawned:
            spawning.add("owner")
        raise raised()
    monkeypatch.setattr(firstrun, "place_first_release", lambda layout, release: None)
    monkeypatch.setattr(daemons, "ensure_daemons", starting)
    monkeypatch.setattr(upwait, "BACKGROUND_WAIT_S", 1.0)
    with pytest.raises(raised):
        lifecycle._up_daemons(_args(), layout, ('[stacks.s.apps.a]\ncommand = ["x"]\n',
                                                "t.toml"))
    assert os.path.exists(layout.queued_config) is kept
