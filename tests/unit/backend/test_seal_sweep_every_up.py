"""A seal tree an interrupted first `tenure up` left under runtime/ (11 MB) was swept
only by a later first run: every later `up` kept it. Every `up` sweeps now."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from backend.cli import firstrun
from backend.cli.sealtmp import PREFIX, STALE_AFTER_S
from protocol.layout import Layout


class _Guardian:
    def call(self, method: str, params: Any = None, **kw: Any) -> Any:
        assert method == "status"
        return {"selector": {"current": "ab" * 32}}


def test_an_up_with_a_release_selected_sweeps_a_seal_left_behind(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    layout = Layout(home)
    layout.runtime.mkdir(mode=0o700)
    left = layout.runtime / f"{PREFIX}interrupted"
    (left / "release").mkdir(parents=True)
    (left / "release" / "x.py").write_text("")
    old = time.time() - STALE_AFTER_S - 5
    os.utime(left, (old, old))
    assert firstrun.ensure_release(layout, _Guardian()) is None   # type: ignore[arg-type]
    assert not left.exists()
