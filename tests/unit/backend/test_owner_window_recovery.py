"""Recovery decisions of the owner maintenance window that need no process: an owner
started beside a window is replaced only when it runs nothing the plan does not name."""

from __future__ import annotations

from typing import Any

import pytest

from backend.cli import ownerwindow, ownerwindow_owner
from protocol.errors import Conflict
from protocol.layout import Layout


def _window(tmp_path: Any, status: dict[str, Any] | None) -> ownerwindow.Window:
    class Fake(ownerwindow.Window):
        def owner_status(self) -> dict[str, Any] | None:
            return status
    return Fake(Layout(tmp_path), api=lambda timeout: None, timeout=1.0,  # type: ignore
                say=lambda line: None)


def test_an_owner_started_beside_the_window_that_runs_launches_is_not_stopped(tmp_path):
    other = {"instance": "b" * 32, "pid": 2 ** 22 + 1, "start_ticks": 1}
    w = _window(tmp_path, {"owner": other, "live": 2, "uncertain": []})
    with pytest.raises(Conflict) as caught:
        ownerwindow_owner.stop_successor(w, {"instance": "a" * 32})
    assert "`tenure down`, then `tenure owner upgrade --continue`" in caught.value.msg
    assert caught.value.data["live"] == 2


def test_nothing_is_stopped_when_the_planned_owner_or_none_answers(tmp_path):
    planned = {"instance": "a" * 32, "pid": 2 ** 22 + 1, "start_ticks": 1}
    for status in (None, {"owner": planned, "live": 3, "uncertain": []}):
        ownerwindow_owner.stop_successor(_window(tmp_path, status), planned)
