"""A launch that no owner can take waits for one instead of failing the app.

Was: five attempts half a second apart, then LAUNCH_FAILED, backoff and another launch,
each one a failed start, until the start limit gave up (`failed`, "launch not answered
by the owner (CONNECT_FAILED)"): an owner restarted by its service manager, or stopped
and started again by `tenure up`, found every app given up. Against the reconciler
and a fake owner; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.config import parse_config
from backend.instance import State
from backend.owner_mutations import LAUNCH_TRIES
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep, until
from protocol.errors import ConnectFailed, Internal, ShuttingDown, TenureError, TransportLost

APP = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
       'backoff = { initial = 0, max = 0 }\nstart_limit = { burst = 2, interval = 60 }\n')
AWAY_FOR = 3 * LAUNCH_TRIES   # more failures than a launch ever took


class AwayOwner(FakeOwner):
    """Raises ``error`` for the first ``count`` launch calls, then launches."""

    def __init__(self, error: TenureError, count: int) -> None:
        super().__init__()
        self.error, self.left = error, count

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.left > 0:
            self.left -= 1
            raise self.error
        return super()._launch(p)


async def _run(owner: AwayOwner, until_state: State, answers: bool = True) -> Any:
    """The app against ``owner`` until it is in ``until_state`` and nothing runs."""
    sup = Supervisor(owner, 1, sleep=no_sleep)
    sup.owner_answers = lambda: answers or owner.left == 0
    try:
        sup.ensure(parse_config(APP, "t").apps()[0], 0, True)
        inst = sup.instances["s/a/0"]
        await until(lambda: inst.state is until_state and not sup._tasks, str(until_state),
                    turns=5_000)
    finally:
        await sup.aclose()
    return inst


@pytest.mark.parametrize("error,answers", [
    (ConnectFailed("no socket at owner.sock"), True),      # the owner is gone
    (ShuttingDown("the owner is shutting down"), True),     # it is going
    (TransportLost("connection lost"), False),              # the link says it is away
])
def test_a_launch_waits_for_an_owner_and_spends_no_start(error: TenureError,
                                                         answers: bool) -> None:
    async def main() -> None:
        owner = AwayOwner(error, AWAY_FOR)
        inst = await _run(owner, State.READY, answers)
        assert inst.state is State.READY and inst.pid is not None
        keys = {p["launch_key"] for p in owner.sent("launch")}
        assert len(owner.sent("launch")) == AWAY_FOR + 1 and len(keys) == 1
        assert inst.restarts == 0 and inst.last_error is None
    asyncio.run(main())


def test_a_launch_an_answering_owner_keeps_failing_is_still_given_up() -> None:
    async def main() -> None:
        owner = AwayOwner(Internal("the owner failed"), 10 * AWAY_FOR)
        inst = await _run(owner, State.FAILED)
        assert inst.state is State.FAILED
        assert len(owner.sent("launch")) == 2 * LAUNCH_TRIES   # two starts, then the limit
    asyncio.run(main())


def test_a_launch_waiting_for_an_owner_ends_when_the_generation_is_fenced() -> None:
    async def main() -> None:
        owner = AwayOwner(ConnectFailed("no socket at owner.sock"), 10**9)
        sup = Supervisor(owner, 1, sleep=no_sleep)
        try:
            sup.ensure(parse_config(APP, "t").apps()[0], 0, True)
            await until(lambda: len(owner.sent("launch")) > AWAY_FOR, "waiting",
                        turns=5_000)
            sup.fence("a newer generation holds the owner")
            await until(lambda: not sup._tasks and sup.in_flight == 0, "ended")
            assert sup.instances["s/a/0"].state is State.STARTING   # for the next one
        finally:
            await sup.aclose()
    asyncio.run(main())
