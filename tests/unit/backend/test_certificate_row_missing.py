"""recovery.db whose certificate row is gone (a hand edit, a damaged page rebuilt) reads
as no valid certificate, and the next certificate or invalidation writes the row again.
Was: reading it raised TypeError, which the certificate loop does not catch, so every
generation ended 0.5 s after it started (exit 8), a forced recovery's as well. Fake
owner and fake sleep: nothing sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.certify import certificate_loop
from backend.instance import State
from backend.store import RecoveryStore
from backend.testing import FakeOwner, fake_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def _delete_row(store: RecoveryStore) -> None:
    store.db.execute("DELETE FROM certificate")


def test_a_missing_row_reads_as_no_certificate(tmp_path: Path):
    store = RecoveryStore(str(tmp_path / "recovery.db"))
    try:
        _delete_row(store)
        assert store.read() == {"valid": False, "body": None, "updated_at": None}
    finally:
        store.close()


def test_invalidate_and_publish_write_the_row_again(tmp_path: Path):
    store = RecoveryStore(str(tmp_path / "recovery.db"))
    try:
        _delete_row(store)
        store.invalidate("launch")
        seen = store.read()
        assert seen["valid"] is False and seen["body"] == {"invalidated": "launch"}
        _delete_row(store)
        store.publish({"cursor": 3, "at": 1.0})
        assert store.read()["valid"] is True
        assert store.read()["body"] == {"cursor": 3, "at": 1.0}
        assert store.db.execute("SELECT count(*) FROM certificate").fetchone()[0] == 1
    finally:
        store.close()


def test_the_certificate_loop_survives_a_missing_row_and_writes_it(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            _delete_row(gen.recovery)
            rounds: list[float] = []

            async def sleep(delay: float) -> None:
                rounds.append(delay)
                await asyncio.sleep(0)
            loop = asyncio.create_task(certificate_loop(gen, sleep=sleep))
            await until(lambda: len(rounds) >= 3 or loop.done(), "three rounds")
            assert not loop.done(), loop.exception()   # was: TypeError ended it
            loop.cancel()
            assert gen.certificate_writes == 1 and gen.recovery.read()["valid"] is True
        finally:
            await gen.close()
    asyncio.run(main())
