"""A guardian that meets the unexpected as it starts (the machine refuses it a thread,
say) ends coded: INTERNAL on one line with its cause, exit 7, not a bare traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from guardian import start
from guardian.paths import GuardianPaths


def test_the_unexpected_at_start_ends_coded(tmp_path: Path, monkeypatch: Any,
                                            caplog: Any) -> None:
    def refused(self: GuardianPaths) -> None:
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(GuardianPaths, "prepare", refused)
    with caplog.at_level(logging.CRITICAL):
        assert start.run(GuardianPaths(tmp_path)) == start.EXIT_INTERNAL == 7
    assert "INTERNAL: the guardian could not go on: RuntimeError: can't start new " \
        "thread" in caplog.text
