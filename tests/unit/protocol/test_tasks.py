"""protocol.tasks.background: a task that fails is logged with what it was; one that
ends or is cancelled is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from protocol.tasks import background

log = logging.getLogger("tenure.test")


async def _fails() -> None:
    raise RuntimeError("boom")


async def _ends() -> int:
    return 1


def test_a_failing_task_is_logged_and_others_are_not(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        failed = background(_fails(), "example", log)
        ended = background(_ends(), "quiet", log)
        waiting = background(asyncio.sleep(3600), "cancelled", log)
        await asyncio.wait([failed, ended])
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert failed.get_name() == "example"
    with caplog.at_level(logging.ERROR, "tenure.test"):
        asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == ["the example loop failed and stopped"]
    assert errors[0].exc_info is not None and "boom" in str(errors[0].exc_info[1])
