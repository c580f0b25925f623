"""An uptime is never negative: `status` measures it once the owner has answered (a
launch may end while it waits), and the CLI never prints "-0.0s"."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from backend.cli.present import dur, span
from backend.testing import FakeOwner, api_call, ready_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


class ListingOwner(FakeOwner):
    def _sockets_list(self, p: dict[str, object]) -> dict[str, object]:
        return {"sockets": [], "fd_store": []}


def test_a_launch_that_ends_while_status_waits_for_the_owner_is_not_negative(
        tmp_path: Path) -> None:
    async def main() -> None:
        owner = ListingOwner()
        async with ready_generation(tmp_path, owner, ONE, {"sockets": 1}) as gen:
            owner.hold("sockets.list")
            answer = asyncio.create_task(gen.api.status(api_call("status")))
            await until(lambda: bool(owner.sent("sockets.list")), "status asks the owner")
            inst = gen.sup.instances["s/a/0"]
            inst.launched_at = time.monotonic()     # a launch answered meanwhile
            owner.release("sockets.list")
            uptime = (await answer)["apps"][0]["uptime"]
            assert uptime == 0.0 and math.copysign(1.0, uptime) == 1.0

    asyncio.run(main())


def test_a_negative_duration_prints_as_zero() -> None:
    assert dur(-0.0) == dur(-0.04) == dur(0.0) == "0.0s"
    assert dur(0.25) == "0.2s" and dur(None) == "-"


def test_a_configured_duration_prints_as_written():
    """A health check's ``interval = 10`` and ``timeout = 5`` print alike (``10s``,
    ``5s``); a measured uptime keeps its tenth of a second."""
    assert [span(x) for x in (5, 5.0, 0.25, 2.5, 10, 90, None)] == [
        "5s", "5s", "0.25s", "2.5s", "10s", "1m30s", "-"]
    assert dur(5.0) == "5.0s"
