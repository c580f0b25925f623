"""An apply's start step: an instance that became ready counts as started even when the
step only looks after it crashed again and gave up (a crash loop's outcome must not
depend on when the step's coroutine ran); one that never became ready fails the step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend import instance as im
from backend.model import App, Backoff, Readiness, ReadyKind, RestartMode, StartLimit
from backend.operations import OperationRunner
from backend.steps import StepGate
from backend.store import BackendStore
from backend.supervisor import Supervisor
from backend.testing import FakeOwner

APP = App(name="loop", stack="s", command=("x",), restart=RestartMode.ON_FAILURE,
          backoff=Backoff(initial=0.01, max=0.01), start_limit=StartLimit(burst=1))
# ready only when a probe passes: a process that exits at once never becomes ready
PROBED = App(name="loop", stack="s", command=("x",), restart=RestartMode.ON_FAILURE,
             ready=Readiness(kind=ReadyKind.EXEC, command=("true",)),
             backoff=Backoff(initial=0.01, max=0.01), start_limit=StartLimit(burst=1))


def _runner(tmp_path: Path, sup: Supervisor) -> OperationRunner:
    store = BackendStore(str(tmp_path / "backend.db"))
    return OperationRunner(store, sup, lambda: None, lambda c: None, "g",  # type: ignore
                           set, StepGate(), lambda why: None)


@pytest.mark.parametrize("became_ready", [True, False])
def test_the_start_step_counts_a_ready_that_did_not_last(tmp_path: Path, became_ready: bool):
    async def main() -> None:
        sup = Supervisor(FakeOwner(), 1)
        key = sup.ensure(APP if became_ready else PROBED, 0, False)
        runner = _runner(tmp_path, sup)
        waiting = asyncio.create_task(runner._wait_up([key], 5.0))
        await asyncio.sleep(0)                     # the step waits now
        inst = sup.instances[key]
        # everything happens before the step's coroutine runs again: launched (ready at
        # once without a probe), exited, and the start limit allows no second start
        for ev in (im.Start(), im.Launched(10, 1), im.Exited(3, None), im.BackoffElapsed()):
            inst.handle(ev, 0.0)
        assert inst.state is im.State.FAILED
        sup.wake()
        if became_ready:
            await waiting
        else:
            with pytest.raises(RuntimeError, match="failed to start"):
                await waiting
        runner.store.close()
    asyncio.run(main())
