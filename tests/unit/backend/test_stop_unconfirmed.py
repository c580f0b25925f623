"""A stop the backend has to ask again says why while it does: `status` and `inspect`
showed `stopping` with no reason (only the backend's log said it) when the owner
refused the stop or the backend could not invalidate its certificate before it (a full
disk). Against the reconciler and a fake owner; each retry waits for the test."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.instance import State
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep, until
from protocol.errors import Internal

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
REFUSED = ("stop not confirmed by the owner: the owner could not record the stop; trying "
           "again each second")
NOT_SENT = ("stop not sent: invalidating the recovery certificate before stop failed: the "
            "storage failed (OSError: No space left on device); the call stopped there; "
            "trying again each second")


@pytest.mark.parametrize("where, said", [("owner", REFUSED), ("certificate", NOT_SENT)])
def test_a_stop_asked_again_gives_its_reason_until_one_is_confirmed(where: str,
                                                                    said: str) -> None:
    async def main() -> None:
        owner, pauses = FakeOwner(), asyncio.Queue[asyncio.Future[None]]()
        failing = [False]

        def refuse(method: str, p: dict[str, Any]) -> None:
            if method == "stop" and failing[0]:
                raise Internal("the owner could not record the stop")

        def invalidate(method: str) -> None:
            if method == "stop" and failing[0]:
                raise OSError(errno.ENOSPC, "No space left on device")

        async def pause(_delay: float) -> None:
            done = asyncio.get_running_loop().create_future()
            await pauses.put(done)
            await done
        owner.before = refuse if where == "owner" else None
        sup = Supervisor(owner, 1, sleep=pause,
                         on_mutation=invalidate if where == "certificate" else None)
        try:
            app = parse_config(APP, "t").apps()[0]
            sup.ensure(app, 0, True)
            inst = sup.instances["s/a/0"]
            await until(lambda: inst.state is State.READY, "ready")
            failing[0] = True
            sup.ensure(app, 0, False)
            (await pauses.get()).set_result(None)   # one failure, then another
            second = await pauses.get()
            assert inst.state is State.STOPPING
            assert sup.why("s/a/0") == said
            failing[0] = False
            second.set_result(None)
            await until(lambda: inst.state is State.STOPPED, "stopped")
            assert sup.why("s/a/0") is None and not sup.mutations._stop_trouble
        finally:
            await sup.aclose()
    asyncio.run(main())


def test_status_and_inspect_show_it(tmp_path: Path) -> None:
    """Through the API's answers and the CLI's rendering of them."""
    from backend.cli import render, render_inspect
    from backend.testing import api_call, ready_generation

    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, APP) as gen:
            def refuse(method: str, p: dict[str, Any]) -> None:
                if method == "stop":
                    raise Internal("the owner could not record the stop")
            owner.before = refuse
            stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s/a",
                                                             timeout=30)))
            await until(lambda: bool(owner.sent("stop")), "a stop sent")
            await until(lambda: gen.sup.why("s/a/0") is not None, "refused")
            st = await gen.api.status(api_call("status"))
            assert st["apps"][0]["reason"] == REFUSED
            assert REFUSED in render.status(st)
            seen = await gen.api.inspect(api_call("inspect", target="s/a/0"))
            assert f"detail:            {REFUSED}" in render_inspect.inspect(seen)
            owner.before = None   # the next try, a second later, is confirmed
            await asyncio.wait_for(stop, 10)
            st = await gen.api.status(api_call("status"))
            assert (st["apps"][0]["state"], st["apps"][0]["reason"]) == ("stopped", None)
    asyncio.run(main())


def test_a_stop_under_way_says_its_signal_and_when_sigkill_comes() -> None:
    """An app that ignores SIGTERM showed `stopping` with nothing said for its whole
    stop timeout (`stop --timeout 8` exited 4, `(not settled in time)`)."""
    async def main() -> None:
        owner = FakeOwner()
        sup = Supervisor(owner, 1, sleep=no_sleep)
        try:
            app = parse_config(APP + 'stop = { signal = "INT", timeout = 20 }\n',
                               "t").apps()[0]
            sup.ensure(app, 0, True)
            inst = sup.instances["s/a/0"]
            await until(lambda: inst.state is State.READY, "ready")
            assert sup.why("s/a/0") is None
            owner.hold("stop")
            sup.ensure(app, 0, False)
            await until(lambda: bool(owner.sent("stop")), "the stop sent")
            assert inst.state is State.STOPPING
            assert sup.why("s/a/0") == "SIGINT sent 0s ago; SIGKILL in 20s"
            sent = sup.mutations._stop_sent[inst.launch_key]
            sup.mutations._stop_sent[inst.launch_key] = sent - 23.2   # past its timeout
            assert sup.why("s/a/0") == "SIGINT sent 23s ago; SIGKILL sent 3s ago"
            sup.owner_answers = lambda: False   # what the owner does then is not known
            assert sup.why("s/a/0") is None
            sup.owner_answers = lambda: True
            owner.release("stop")
            await until(lambda: inst.state is State.STOPPED, "stopped")
            assert sup.why("s/a/0") is None
        finally:
            await sup.aclose()
    asyncio.run(main())
