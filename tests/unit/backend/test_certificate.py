"""Recovery certificates are honest: an owner mutation is never sent before the
certificate stopped vouching, and a failure to invalidate neither sends it nor leaks the
in-flight count (which would make every later drain time out); stack intents and applies
invalidate first too; a publish that raced with a change does not vouch; an unchanged
snapshot is not written again. Fake owner, no sleep."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.certify import CURSOR_SLACK, publish_certificate, same_snapshot
from backend.config import parse_config
from backend.instance import State
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, api_call, fake_generation, no_sleep, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


call = api_call


class Flaky:
    """An invalidation that fails the next ``failures`` times (disk full), then works."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.log: list[str] = []

    def __call__(self, reason: str) -> None:
        self.log.append(reason)
        if self.failures > 0:
            self.failures -= 1
            raise OSError(28, "No space left on device")


def test_a_failed_invalidation_does_not_leak_the_in_flight_count():
    async def main() -> None:
        owner, flaky = FakeOwner(), Flaky(2)
        sup = Supervisor(owner, 1, on_mutation=flaky, sleep=no_sleep)
        try:
            sup.ensure(parse_config(ONE, "t").apps()[0], 0, True)
            await until(lambda: sup.instances["s/a/0"].state is State.READY, "ready")
            assert sup.in_flight == 0
            assert flaky.log == ["launch", "launch", "launch"]
            assert len(owner.sent("launch")) == 1   # only once the certificate stopped vouching
        finally:
            await sup.aclose()
    asyncio.run(main())


def test_an_invalidation_that_keeps_failing_waits_sends_nothing_and_spends_no_start():
    """A full disk is not the app's failure: the launch waits, sent once the certificate
    can be invalidated, and spends none of the app's tries or starts. Was: given up after
    LAUNCH_TRIES, so an app that exited on a full disk was `failed` (start limit) within
    seconds, its RESTARTS counting launches never sent."""
    async def main() -> None:
        owner, flaky = FakeOwner(), Flaky(10**6)
        sup = Supervisor(owner, 1, on_mutation=flaky, sleep=no_sleep)
        try:
            sup.ensure(parse_config(ONE, "t").apps()[0], 0, True)
            inst = sup.instances["s/a/0"]
            await until(lambda: len(flaky.log) > 20, "tried again and again")
            assert inst.state is State.STARTING and owner.sent("launch") == []
            assert sup.in_flight == 1 and inst.restarts == 0   # a drain names it
            # said as the backend's own full disk, not as the owner's failure (was:
            # "launch failed in the owner: ...", INTERNAL)
            assert sup.reason("s/a/0") == (
                "launch not sent: invalidating the recovery certificate before launch "
                "failed: the storage failed (OSError: No space left on device); the call "
                "stopped there; trying again each second")
            flaky.failures = 0                          # the disk takes writes again
            await until(lambda: inst.state is State.READY, "launched")
            assert len(owner.sent("launch")) == 1 and inst.restarts == 0
            assert sup.reason("s/a/0") is None and sup.in_flight == 0
        finally:
            await sup.aclose()
    asyncio.run(main())


def test_a_stop_waits_for_the_invalidation_and_is_sent_once_it_worked():
    async def main() -> None:
        owner, flaky = FakeOwner(), Flaky()
        sup = Supervisor(owner, 1, on_mutation=flaky, sleep=no_sleep)
        try:
            app = parse_config(ONE, "t").apps()[0]
            sup.ensure(app, 0, True)
            await until(lambda: sup.instances["s/a/0"].state is State.READY, "ready")
            flaky.failures, flaky.log = 3, []
            sup.ensure(app, 0, False)
            await until(lambda: sup.instances["s/a/0"].state is State.STOPPED, "stopped")
            assert flaky.log == ["stop"] * 4 and len(owner.sent("stop")) == 1
            assert sup.in_flight == 0 and owner.live == {}
        finally:
            await sup.aclose()
    asyncio.run(main())


def test_an_unchanged_snapshot_is_not_written_again(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            assert await publish_certificate(gen) is True
            first = gen.recovery.read()
            assert first["valid"] and gen.certificate_writes == 1
            for _ in range(3):
                assert await publish_certificate(gen) is True
            gen.cursor += 40  # notify messages (WATCHDOG=1) only move the cursor
            assert await publish_certificate(gen) is True
            assert gen.certificate_writes == 1 and gen.recovery.read() == first

            await gen.api.restart(call("restart", target="s/a", timeout=30.0))
            assert await publish_certificate(gen) is True
            second = gen.recovery.read()
            assert gen.certificate_writes == 2 and second["valid"]
            assert second["body"]["inventory_digest"] != first["body"]["inventory_digest"]
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_change_while_the_owner_answers_keeps_the_certificate_invalid(tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            owner.before = lambda m, p: gen.invalidate("launch") if m == "inventory" else None
            assert await publish_certificate(gen) is False
            assert gen.recovery.read()["valid"] is False and gen.certificate_writes == 0
        finally:
            await gen.close()
    asyncio.run(main())


def test_stack_intents_invalidate_the_certificate_before_the_owner_call(tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        seen: list[tuple[str, bool]] = []
        owner.before = lambda m, p: seen.append((p["intent"], gen.recovery.read()["valid"])) \
            if m == "stack.set_intent" else None
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            assert await publish_certificate(gen)
            review = await gen.api.stack_stop(call("stack.stop", stack="s", dry_run=True,
                                                   digest=None, timeout=30.0))
            await gen.api.stack_stop(call("stack.stop", stack="s", dry_run=False,
                                          digest=review["digest"], timeout=30.0))
            assert await publish_certificate(gen)
            await gen.api.stack_start(call("stack.start", stack="s"))
            assert seen == [("stopped", False), ("running", False)]
        finally:
            await gen.close()
    asyncio.run(main())


def test_an_apply_invalidates_the_certificate_before_committing_the_config(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            assert await publish_certificate(gen)
            new = ONE + 'env = { V = "2" }\n'
            plan = await gen.api.plan(call("plan", config_text=new, source="v2.toml"))
            await gen.api.apply(call("apply", plan=plan["id"], request_id=None))
            cert = gen.recovery.read()
            assert cert["valid"] is False and cert["body"]["invalidated"] == "apply"
            assert gen.store.config()["revision"] == plan["config_revision"]
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_round_that_writes_nothing_keeps_the_certificate_error(tmp_path: Path):
    """A generation that is not quiet writes no certificate (publish answers False): on
    a full disk its stops and launches are retried and keep it so. Was: such a round
    cleared the error, and `status` stopped saying that a crash would block, with the
    disk still full."""
    import sqlite3

    from backend.certify import certificate_loop

    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        rounds = []

        def refusing(body):
            raise sqlite3.OperationalError("database or disk is full")

        async def one_round(_: float) -> None:
            rounds.append(gen.certificate_error)
            if len(rounds) == 3:
                raise asyncio.CancelledError
            gen.invalidate("launch")
            if len(rounds) == 2:
                gen.api.busy = lambda: True   # a step under way: nothing is written

        gen.recovery.publish = refusing
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            with pytest.raises(asyncio.CancelledError):
                await certificate_loop(gen, one_round)
            assert rounds[0] is None and rounds[1] is not None and rounds[2] is rounds[1]
        finally:
            await gen.close()
    asyncio.run(main())


BODY = {"activation": "a1", "epoch": 3, "release": "r", "owner": {"instance": "o"},
        "inventory_digest": "d", "launches": 2, "cursor": 100, "config_revision": "c",
        "at": 1000.0}


@pytest.mark.parametrize(("stored", "body", "same"), [
    ({"valid": True, "body": BODY}, {**BODY, "at": 2000.0}, True),
    ({"valid": True, "body": BODY}, {**BODY, "cursor": 100 + CURSOR_SLACK - 1}, True),
    ({"valid": True, "body": BODY}, {**BODY, "cursor": 100 + CURSOR_SLACK}, False),
    ({"valid": True, "body": BODY}, {**BODY, "cursor": 99}, False),
    ({"valid": True, "body": BODY}, {**BODY, "inventory_digest": "e"}, False),
    ({"valid": True, "body": BODY}, {**BODY, "epoch": 4}, False),
    ({"valid": True, "body": BODY}, {**BODY, "config_revision": "c2"}, False),
    ({"valid": False, "body": {**BODY, "invalidated": "stop"}}, BODY, False),
    ({"valid": False, "body": None}, BODY, False),
])
def test_same_snapshot(stored, body, same):
    assert same_snapshot(stored, body) is same


def test_a_certificate_the_storage_refuses_is_kept_as_an_error_until_one_is_written(
        tmp_path: Path):
    """gen.certificate_error ({error, since}) is what `status` and `backend status` say:
    set at the first round whose write failed, kept through the next, cleared by the
    first that writes."""
    import sqlite3

    from backend.certify import certificate_loop

    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        publish, failures, rounds = gen.recovery.publish, [2], []

        def refusing(body):
            if failures[0] > 0:
                failures[0] -= 1
                raise sqlite3.OperationalError("database or disk is full")
            publish(body)

        async def one_round(_: float) -> None:
            rounds.append(gen.certificate_error)
            if len(rounds) == 4:
                raise asyncio.CancelledError
            gen.invalidate("launch")   # something to write each round

        gen.recovery.publish = refusing
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            with pytest.raises(asyncio.CancelledError):
                await certificate_loop(gen, one_round)
            first = rounds[1]
            assert rounds[0] is None and first is not None
            assert first["error"] == "database or disk is full" and rounds[2] is first
            assert rounds[3] is None and gen.recovery.read()["valid"]
        finally:
            await gen.close()
    asyncio.run(main())


def test_an_unsaved_state_leaves_a_certificate_that_still_vouches_valid(tmp_path: Path,
                                                                        monkeypatch):
    """The apps' state could not be saved (a full disk) while the stored certificate
    still vouched for the same world: the round raised the save's error, taken for a
    certificate that cannot be written, and `backend status` said a crash would block.
    It vouches; only a new certificate that cannot be written is a failure."""
    import backend.certify as certify

    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "ready")
            assert await publish_certificate(gen)

            def full(g) -> None:
                raise OSError(28, "No space left on device")
            monkeypatch.setattr(certify, "persist", full)
            assert await publish_certificate(gen)          # the same world: it vouches
            gen.recovery.invalidate("launch")              # a change since: a new one due
            with pytest.raises(OSError):
                await publish_certificate(gen)
        finally:
            await gen.close()
    asyncio.run(main())
