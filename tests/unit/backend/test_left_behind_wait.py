"""A launch that waits until what the last run left running is stopped is withdrawn by
a stop asked meanwhile.

Was: the launch waited, then was sent whatever had happened since. A `tenure stop`
during the wait found no process under the new launch key (the owner answers NotFound)
and marked the instance stopped; the launch went out after it, and its process ran
untracked: status said `stopped`, and only `tenure down` ended it. A `tenure restart`
in the wait ran two copies of the app. Against the reconciler and a fake owner whose
stop of the leftovers waits for the test; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from backend.config import parse_config
from backend.instance import Instance, State
from backend.model import App
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep, until
from protocol.errors import RequestTimedOut

APP = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
       'backoff = { initial = 0, max = 0 }\n')
KEY = "s/a/0"


@contextlib.asynccontextmanager
async def reconciling(owner: FakeOwner) -> AsyncIterator[tuple[Supervisor, App, Instance]]:
    """A reconciler against ``owner`` with the app's instance asked to run; closed
    after."""
    sup = Supervisor(owner, 1, sleep=no_sleep)
    try:
        app = parse_config(APP, "t").apps()[0]
        sup.ensure(app, 0, True)
        yield sup, app, sup.instances[KEY]
    finally:
        await sup.aclose()


class SlowLeftovers(FakeOwner):
    """The stop of a launch that exited (the stop of what it left running) waits until
    ``leftovers_gone`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.leftovers_gone = asyncio.Event()

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "stop" and params is not None and \
                self.rows.get(params["launch_key"], {}).get("state") == "exited":
            await self.leftovers_gone.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


@pytest.mark.parametrize("then_start", [False, True], ids=["stop", "restart"])
def test_a_stop_during_the_wait_withdraws_the_launch(then_start: bool) -> None:
    async def main() -> None:
        owner = SlowLeftovers()
        async with reconciling(owner) as (sup, app, inst):
            await until(lambda: inst.state is State.READY, "ready")
            first = inst.launch_key
            sup.on_observation({**owner.exit(first, 1), "descendants": 1})
            await until(lambda: inst.state is State.STARTING and sup.leaving(KEY)
                        and inst.launch_key != first, "waiting for the leftovers")
            waiting = inst.launch_key
            # status: why the run ended, and what it waits for (explain.reason says
            # nothing of a starting instance)
            assert sup.why(KEY) == "exited 1; stopping 1 process(es) the last run left " \
                                   "running"
            if then_start:                 # tenure restart: stop, start once it is down
                started = sup.start_when_down(KEY, 60.0, stop=True)
            else:                          # tenure stop
                sup.ensure(app, 0, False)
            await until(lambda: inst.state is State.STOPPING, "stopping")
            owner.leftovers_gone.set()
            want = State.READY if then_start else State.STOPPED
            await until(lambda: not sup.leaving(KEY) and sup.in_flight == 0
                        and inst.state is want, "settled", turns=2_000)
            launched = [p["launch_key"] for p in owner.sent("launch")]
            assert waiting not in launched, launched
            assert list(owner.live) == ([inst.launch_key] if then_start else [])
            assert inst.state is (State.READY if then_start else State.STOPPED)
            if then_start:
                assert started.result() is True
    asyncio.run(main())


def test_a_stop_while_the_launch_is_sent_stops_what_it_started() -> None:
    """The stop reached the owner before the launch it raced was spawned: NotFound read
    as 'already gone', the instance was stopped, and the process the launch then
    started ran untracked."""
    async def main() -> None:
        owner = FakeOwner()   # as an owner that predates waiting for a launch under way:
        owner.hold("launch")  # a stop of a key not spawned yet answers NotFound
        async with reconciling(owner) as (sup, app, inst):
            await until(lambda: bool(owner.sent("launch")), "the launch sent")
            sup.ensure(app, 0, False)
            await until(lambda: bool(owner.sent("stop")), "the stop sent")
            for _ in range(50):
                await asyncio.sleep(0)
            assert inst.state is State.STOPPING   # not taken for gone while it launches
            owner.release("launch")
            await until(lambda: inst.state is State.STOPPED and sup.in_flight == 0, "stopped")
            assert owner.live == {} and len(owner.sent("stop")) == 2
    asyncio.run(main())


class FlakyLaunch(FakeOwner):
    """The first launch call's answer is lost: the backend tries again."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 1

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.lost:
            self.lost -= 1
            raise RequestTimedOut("launch: no answer in time")
        return super()._launch(p)


def test_a_stop_between_two_tries_of_a_launch_withdraws_it() -> None:
    """A launch tried again (its answer lost) was sent after a stop that found nothing
    under its key had marked the instance stopped."""
    async def main() -> None:
        owner = FlakyLaunch()
        pauses: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

        async def pause(_delay: float) -> None:
            done = asyncio.get_running_loop().create_future()
            await pauses.put(done)
            await done
        sup = Supervisor(owner, 1, sleep=pause)
        try:
            app = parse_config(APP, "t").apps()[0]
            sup.ensure(app, 0, True)
            inst = sup.instances[KEY]
            retry = await pauses.get()            # the first try failed: it waits
            sup.ensure(app, 0, False)
            await until(lambda: bool(owner.sent("stop")), "the stop sent")
            retry.set_result(None)
            await until(lambda: inst.state is State.STOPPED and sup.in_flight == 0, "stopped")
            assert len(owner.sent("launch")) == 1 and owner.live == {}
        finally:
            await sup.aclose()
    asyncio.run(main())


class OneTurn(FakeOwner):
    """A launch waits for its turn among the owner calls (a stack stop may hold them
    all) until ``turn`` is set; then it is sent, or withdrawn."""

    def __init__(self) -> None:
        super().__init__()
        self.turn = asyncio.Event()

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "launch":
            await self.turn.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


def test_a_stop_while_the_launch_waits_for_its_turn_withdraws_it() -> None:
    """Was: sent once its turn came, the app's program ran (its start-up side effects
    with it), then was stopped by the stop that had waited for it."""
    async def main() -> None:
        owner = OneTurn()
        async with reconciling(owner) as (sup, app, inst):
            await until(lambda: sup.mutations._launch_in_flight(inst.launch_key),
                        "the launch waits")
            sup.ensure(app, 0, False)
            await until(lambda: bool(owner.sent("stop")), "the stop sent")
            owner.turn.set()
            await until(lambda: inst.state is State.STOPPED and sup.in_flight == 0, "stopped")
            assert owner.sent("launch") == [] and owner.live == {}
    asyncio.run(main())
