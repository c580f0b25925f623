"""`tenure down` waits for the owner as long as the owner says its shutdown may take
(its longest stop policy, from its status), and never less than its own timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.cli import down, upwait


@pytest.mark.parametrize(("status", "wait"), [
    ({"stop_budget": 140.0}, 140.0 + upwait.OWNER_STAGES_S),
    ({"stop_budget": 0}, upwait.OWNER_STAGES_S),
    ({}, 0.0),                          # an older owner: its status has no budget
    (None, 0.0),                        # it did not answer
    ({"stop_budget": "soon"}, 0.0), ({"stop_budget": True}, 0.0),
    ({"stop_budget": -1.0}, 0.0),
])
def test_the_owners_shutdown_budget(status: dict[str, Any] | None, wait: float) -> None:
    assert upwait.shutdown_budget(status) == wait


def test_down_waits_for_the_owners_longest_stop_policy(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Any) -> None:
    from protocol.layout import Layout
    waited: dict[str, float] = {}
    status = {"owner": {"pid": 4242, "start_ticks": 7, "instance": "i"}, "live": 1,
              "stop_budget": 300.0}

    def locate(layout: Layout, sock: str, module: str) -> Any:
        return (status, (4242, 7, False)) if module == "owner" else (None, None)

    def terminate(pid: int, ticks: int | None, timeout: float) -> None:
        waited[str(pid)] = timeout
    monkeypatch.setattr(down, "_locate", locate)
    monkeypatch.setattr(down, "_terminate", terminate)
    monkeypatch.setattr(down, "_stop_guardianless_backend", lambda *a: None)
    monkeypatch.setattr(down, "shutdown_receipt", lambda *a: {"state": "clean"})
    out = down.stop_all(Layout(tmp_path))
    assert out["owner"] is True and waited == {"4242": 300.0 + upwait.OWNER_STAGES_S}


@pytest.mark.parametrize(("detail", "ok", "count"), [
    ("4 stopped", True, 4), ("4 stopped, 1 unclaimed", True, 4), ("0 stopped", True, 0),
    ("RuntimeError: 2 launches not confirmed stopped", False, None), ("", True, None)])
def test_the_receipt_says_how_many_it_stopped(detail: str, ok: bool,
                                              count: int | None) -> None:
    """A `down` after one cut short counted what still ran when it asked (3), where the
    owner's shutdown had stopped 4."""
    rec = {"stages": [{"stage": "applications", "ok": ok, "detail": detail}]}
    assert down._stopped_count(rec) == count


def test_an_owner_that_ended_mid_shutdown_is_not_said_to_have_had_a_full_disk(
        tmp_path: Path) -> None:
    """An owner killed (kill -9) during `down` left its receipt `running`; `down` said
    "it could not write its receipt: a full disk?"."""
    from owner.receipt import Receipt
    from protocol.layout import Layout
    execution = tmp_path / "execution"
    execution.mkdir()
    Receipt(str(execution / "owner-receipt.json"), "inst-1", 4242, "boot").write()
    got = down.shutdown_receipt(Layout(tmp_path), "inst-1")
    assert got["state"] == "running"
    assert got["detail"] == ("the owner ended without recording its shutdown: it was "
                             "killed or died during it, or could not write its receipt "
                             "(a full disk); its log says which stages it went through")
