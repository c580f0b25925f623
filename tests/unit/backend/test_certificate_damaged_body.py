"""A stored certificate whose ``at`` or ``cursor`` recovery cannot use is rewritten by
the next quiet round, not kept as "the same snapshot": the backend and the guardian judge
a body by one check (protocol.certificate). Was: same_snapshot compared neither field,
so a body whose ``at`` was not a time, or whose cursor was a bool or negative, stayed on
disk for good while the backend said it was certified and recovery blocked. Fake owner;
real SQLite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from backend.certify import publish_certificate, same_snapshot
from backend.generation import Generation
from backend.testing import FakeOwner, run_generation
from guardian.recovery import read_certificate

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'

BODY = {"activation": "a1", "epoch": 3, "release": "r", "owner": {"instance": "o"},
        "inventory_digest": "d", "launches": 2, "cursor": 100, "config_revision": "c",
        "at": 1000.0}

DAMAGED = [{"at": "noon"}, {"at": float("inf")}, {"at": float("nan")}, {"at": None},
           {"cursor": True}, {"cursor": -1}, {"cursor": 99.5}, {"cursor": "100"}]


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_stored_body_recovery_refuses_is_not_the_same_snapshot(damage: dict[str, Any]):
    assert same_snapshot({"valid": True, "body": {**BODY, **damage}}, BODY) is False


@pytest.mark.parametrize("missing", ["at", "cursor"])
def test_a_stored_body_without_at_or_cursor_is_not_the_same_snapshot(missing: str):
    old = {k: v for k, v in BODY.items() if k != missing}
    assert same_snapshot({"valid": True, "body": old}, BODY) is False


@pytest.mark.parametrize("damage", ['"noon"', "1e400", "true", "-1"])
def test_the_next_round_rewrites_a_damaged_at_or_cursor(tmp_path: Path, damage: str):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert await publish_certificate(gen) is True and gen.certificate_writes == 1
        field = "$.at" if damage in ('"noon"', "1e400") else "$.cursor"
        gen.recovery.db.execute(f"UPDATE certificate SET body = json_set(body, '{field}', "
                                f"json('{damage}'))")
        path = str(tmp_path / "recovery.db")
        assert read_certificate(path)["damaged"]   # recovery cannot use it
        assert await publish_certificate(gen) is True
        assert gen.certificate_writes == 2         # was: 1, kept as the same snapshot
        cert = read_certificate(path)
        assert cert["valid"] is True and "damaged" not in cert
    os.chmod(tmp_path, 0o700)
    run_generation(tmp_path, ONE, body)
