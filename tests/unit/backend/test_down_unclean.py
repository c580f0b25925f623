"""`tenure down` with no owner running reads the last owner's receipt
(backend.cli.unclean): every case of "did it stop cleanly, and has a reconcile proven
its launches gone since", from files alone. The real path (kill -9, then `down`) is
tests/fault/test_down_up_after_kill9.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.cli.unclean import refuse_unclean_end, unclean_end
from owner.paths import OwnerPaths
from owner.receipt import Receipt, ReceiptState, write_ack
from protocol.errors import ReconcileRequired, StateCorrupt
from protocol.identity import boot_id
from protocol.layout import Layout


def _home(tmp_path: Path) -> Layout:
    os.chmod(tmp_path, 0o700)
    (tmp_path / "execution").mkdir(mode=0o700)
    return Layout(tmp_path)


def _receipt(layout: Layout, state: ReceiptState, boot: str | None = None,
             failed_stage: str | None = None) -> Receipt:
    rec = Receipt(OwnerPaths(layout.home).receipt, "inst-1", 4242, boot or boot_id(),
                  state=state, failed_stage=failed_stage)
    rec.write()
    return rec


def test_no_receipt_clean_or_another_boot_is_nothing_to_report(tmp_path: Path) -> None:
    layout = _home(tmp_path)
    assert unclean_end(layout) is None
    _receipt(layout, ReceiptState.CLEAN)
    assert unclean_end(layout) is None
    _receipt(layout, ReceiptState.RUNNING, boot="another-boot")
    assert unclean_end(layout) is None   # a new boot id: the old processes are gone
    refuse_unclean_end(layout, {})       # raises nothing


@pytest.mark.parametrize("state", [ReceiptState.RUNNING, ReceiptState.FAILED])
def test_an_owner_that_died_on_this_boot_is_refused_with_what_to_do(
        tmp_path: Path, state: ReceiptState) -> None:
    layout = _home(tmp_path)
    _receipt(layout, state, failed_stage="processes" if state is ReceiptState.FAILED
             else None)
    with pytest.raises(ReconcileRequired) as err:
        refuse_unclean_end(layout, {"guardian": True, "backend": True})
    msg = err.value.msg
    assert msg.startswith("the owner (instance inst-1, pid 4242) died without a clean "
                          f"stop: its receipt says {state}"), msg
    assert "its applications may still run" in msg
    assert "Stopped: guardian, backend. " in msg
    assert "`tenure owner reconcile --prepare`" in msg and "docs/reconcile.md" in msg
    assert err.value.data["previous"] == "inst-1"
    assert err.value.data["stopped"] == {"guardian": True, "backend": True}
    if state is ReceiptState.FAILED:
        assert "failed at stage processes" in msg


def test_the_acknowledgement_of_a_reconcile_ends_the_refusal(tmp_path: Path) -> None:
    layout = _home(tmp_path)
    rec = _receipt(layout, ReceiptState.RUNNING).to_json()
    paths = OwnerPaths(layout.home)
    write_ack(paths.ack, {**rec, "instance": "another-owner"}, boot_id(), [])
    assert unclean_end(layout) is not None   # it proves another owner's launches gone
    write_ack(paths.ack, rec, "another-boot", [])
    assert unclean_end(layout) is not None
    write_ack(paths.ack, rec, boot_id(), ["s/a/0/1"])
    assert unclean_end(layout) is None
    Path(paths.ack).write_text("{not json")
    assert unclean_end(layout) is not None   # an unreadable one proves nothing


def test_an_unreadable_receipt_is_no_proof_of_a_clean_stop(tmp_path: Path) -> None:
    layout = _home(tmp_path)
    Path(OwnerPaths(layout.home).receipt).write_text("{not json")
    os.chmod(OwnerPaths(layout.home).receipt, 0o600)
    with pytest.raises(StateCorrupt) as err:
        refuse_unclean_end(layout, {"guardian": True})
    assert err.value.msg.startswith("no owner runs, and its shutdown receipt cannot be "
                                    "read: "), err.value.msg
    assert "Stopped: guardian. " in err.value.msg
    assert err.value.data["stopped"] == {"guardian": True}
