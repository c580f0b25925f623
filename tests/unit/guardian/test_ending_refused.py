"""An activation's ending that the storage refuses (a full disk) is recorded once it
takes writes. Was: Coordinator.end raised the storage's error (it caught only tenure's
own), Handoff.fail then raised too, and the activation stayed `created` for good: every
later `guardian upgrade` was refused as OPERATION_IN_PROGRESS until the guardian was
restarted."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from guardian.phases import Kind, Phase
from guardian.testing import FakeCoordinator
from protocol.errors import HandoffFailed


def test_an_ending_the_disk_refuses_is_recorded_once_it_takes_writes(tmp_path: Path):
    async def main() -> None:
        co = FakeCoordinator(tmp_path)
        try:
            act = co.state.create_activation(Kind.UPGRADE, "r", "q", 0)
            advance, refusals = co.state.advance, [3]

            def full(*args: Any, **kw: Any) -> Any:
                if refusals[0] > 0:
                    refusals[0] -= 1
                    raise sqlite3.OperationalError("database or disk is full")
                return advance(*args, **kw)
            co.state.advance = full  # type: ignore[method-assign]
            ended = co.end(act, Phase.ABORTED, HandoffFailed("the candidate never answered"))
            assert ended.phase is Phase.CREATED           # not yet: said, and tried again
            co.end(act, Phase.UNCERTAIN, HandoffFailed("a second ending"))   # refused too:
            assert len(co._ending_later) == 1            # the first one's retry stands
            for _ in range(100):
                await asyncio.sleep(0)
                if co.state.activation(act.id).final:
                    break
            done = co.state.activation(act.id)
            assert done.phase is Phase.ABORTED and refusals == [0]
            assert co.slept == [1.0, 2.0] and co._ending_later == set()
            assert co.state.open_activations() == []
        finally:
            await co.cancel_tasks()
            co.state.close()
    asyncio.run(main())
