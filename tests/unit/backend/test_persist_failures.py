"""A save of the apps' state that fails (a full disk) is retried every round and,
meanwhile, no observation is acknowledged to the owner; the failure is logged when it
begins and when it ends. Before, the first failure ended the persist loop for good:
nothing was saved or acknowledged again. Fake owner, no sleep."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from backend.certify import persist_round
from backend.instance import State
from backend.testing import FakeOwner, fake_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_a_failing_save_is_retried_and_holds_back_the_acknowledgement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        assert gen.store is not None and gen.sup is not None
        real = gen.store.save_instances
        full = {"on": True}

        def save(wires, removed):   # type: ignore[no-untyped-def]
            if full["on"]:
                raise sqlite3.OperationalError("database or disk is full")
            real(wires, removed)

        monkeypatch.setattr(gen.store, "save_instances", save)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            gen.cursor = 7   # observations processed
            with caplog.at_level(logging.WARNING, "tenure.backend"):
                for _ in range(3):
                    await persist_round(gen)
                assert gen.save_failing and gen.sup.dirty   # kept for the next round
                assert owner.sent("observations.ack") == []
                errors = [r.getMessage() for r in caplog.records
                          if r.levelno == logging.ERROR]
                assert len(errors) == 1 and "could not save the apps' state" in errors[0]
                full["on"] = False
                await persist_round(gen)
            assert not gen.save_failing and not gen.sup.dirty
            assert "saved again" in caplog.records[-1].getMessage()
            assert [p["cursor"] for p in owner.sent("observations.ack")] == [7]
            assert gen.store.instances()["s/a/0"]["state"] == "ready"
        finally:
            await gen.close()
    asyncio.run(main())
