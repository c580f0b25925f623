"""A check a release adds for new configs (backend.config.check_new) refuses a plan,
but a config an older release applied is still adopted: each generation parses the
applied config as it starts, and refusing it there left a home with no backend after an
upgrade (or a restart onto a newer installed release)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.generation import _warn_unplannable
from backend.testing import FakeOwner, run_generation
from protocol.errors import ConfigInvalid

HELD = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
        'ready = { kind = "tcp", port = 8080 }\n'
        '[stacks.s.apps.a.sockets.http]\nlisten = "[::]:8080"\n')


def test_a_plan_of_it_is_refused(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        with pytest.raises(ConfigInvalid) as info:
            await gen.api.plan_text(HELD, "/x.toml")
        assert info.value.data["key"] == "stacks.s.apps.a.ready.port"
    run_generation(tmp_path, '[stacks.t.apps.b]\ncommand = ["sleep", "1000"]\n', body)


def test_applied_it_is_adopted_and_said(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config(HELD, "/x.toml")   # what a generation does as it starts
    _warn_unplannable(config, HELD)
    assert "would not be accepted as a new one by this release" in caplog.text
    assert "8080 is the port of the app's socket 'http'" in caplog.text
