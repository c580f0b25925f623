"""A new generation asks for its first recovery certificate every 0.5 s until it has
one, not every 5 s after a first round that found it busy: until then the certificate
on disk is its predecessor's (after an upgrade, another release's), which recovery
refuses. And a generation whose owner holds a newer epoch never writes one. Fake owner
and fake sleep: nothing sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.certify import (
    CERTIFICATE_PERIOD,
    FIRST_CERTIFICATE,
    certificate_loop,
    publish_certificate,
)
from backend.generation import Generation
from backend.instance import State
from backend.testing import FakeOwner, fake_generation, run_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_the_first_certificate_is_retried_soon_until_one_is_written(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            call = object()   # busy: an owner call in flight
            gen.sup.mutations._calls[call] = ("stop", "s/a/0/1", 0.0)
            delays: list[float] = []

            async def sleep(delay: float) -> None:
                delays.append(delay)
                if len(delays) == 4:
                    del gen.sup.mutations._calls[call]   # quiet from the fourth round on
                await asyncio.sleep(0)
            loop = asyncio.create_task(certificate_loop(gen, sleep=sleep))
            await until(lambda: len(delays) >= 6, "six rounds")
            loop.cancel()
            assert delays[:6] == [FIRST_CERTIFICATE] * 4 + [CERTIFICATE_PERIOD] * 2
            assert gen.certificate_writes == 1
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_generation_behind_the_owners_epoch_never_certifies(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
        owner.epoch += 1              # a newer generation's grant
        assert await publish_certificate(gen) is False
        assert gen.sup.fenced and gen.certificate_writes == 0
        assert not gen.recovery.read()["valid"]
    run_generation(tmp_path, ONE, body, ready=False)
