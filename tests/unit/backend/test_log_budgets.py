"""backend.logbudgets: the config's log_retention told to the owner whole, once per
change, again after a failed call; an owner without logRetention@1 is not called and
the generation says so once. A fake owner; nothing sleeps."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from backend.config import parse_config
from backend.logbudgets import LogBudgets
from protocol.errors import StaleEpoch, TransportLost

CAPS = {"logRetention": 1}


def _config(**budgets: str) -> Any:
    text = "".join(f'[stacks.s.apps.{app}]\ncommand = ["x"]\n'
                   + (f'log_retention = "{size}"\n' if size else "")
                   for app, size in budgets.items())
    return parse_config(text, "t.toml")


class Owner:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, int | None]] = []
        self.fail = False

    async def call(self, method: str, params: Any, *, epoch: int | None = None,
                   timeout: float | None = None) -> Any:
        self.calls.append((method, params, epoch))
        if self.fail:
            raise TransportLost("logs.retention: connection lost")
        return {}


def test_budgets_are_told_whole_and_once_per_change() -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        cfg = _config(web="256MiB", db="", cron="1G")
        assert lb.due(cfg)
        await lb.sync(owner, 7, CAPS, cfg)
        assert owner.calls == [("logs.retention", {"budgets": [
            {"stack": "s", "app": "cron", "bytes": 1 << 30},
            {"stack": "s", "app": "web", "bytes": 256 << 20}]}, 7)]
        assert not lb.due(cfg)
        await lb.sync(owner, 7, CAPS, _config(web="256MiB", db="", cron="1G"))
        assert len(owner.calls) == 1   # the same budgets: not told again
        await lb.sync(owner, 7, CAPS, _config(web="256MiB", db=""))   # cron back to default
        assert owner.calls[-1][1] == {"budgets": [{"stack": "s", "app": "web",
                                                   "bytes": 256 << 20}]}
    asyncio.run(main())


def test_a_failed_call_is_due_again(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        cfg = _config(web="2MiB")
        owner.fail = True
        await lb.sync(owner, 1, CAPS, cfg)   # raises nothing
        await lb.sync(owner, 1, CAPS, cfg)
        assert lb.due(cfg) and caplog.text.count("log budgets not set yet") == 1
        owner.fail = False
        await lb.sync(owner, 1, CAPS, cfg)
        assert not lb.due(cfg) and len(owner.calls) == 3
    asyncio.run(main())


def test_an_owner_without_the_call_is_not_asked_and_it_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        with caplog.at_level(logging.WARNING):
            await lb.sync(owner, 1, {}, _config(web="2MiB"))
            await lb.sync(owner, 1, {}, _config(web="4MiB"))
        assert owner.calls == [] and lb.unsupported
        assert caplog.text.count("the owner predates log_retention") == 1
        await lb.sync(owner, 1, {}, _config(web=""))   # nothing wanted: nothing to say
        assert not lb.unsupported
    asyncio.run(main())


def test_a_fenced_generation_stops_telling() -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()

        async def fenced(method: str, params: Any, *, epoch: int | None = None,
                         timeout: float | None = None) -> Any:
            owner.calls.append((method, params, epoch))
            raise StaleEpoch("epoch 1 is not 2", {"current": 2})
        owner.call = fenced  # type: ignore[method-assign]
        cfg = _config(web="2MiB")
        await lb.sync(owner, 1, CAPS, cfg)
        assert not lb.due(cfg) and len(owner.calls) == 1   # not asked again every second
    asyncio.run(main())
