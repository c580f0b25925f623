"""Each app's ``log_retention`` (tenure.toml) brought to the owner's journal.

The owner keeps budgets durably (``logs.retention``, capability ``logRetention@1``);
the backend tells it the whole set whenever it differs from what the owner was last
told: a second after a generation's start (a new generation cannot know what an older
one said), from a loop of its own (a large prune must not hold up the heartbeat), and
before an operation's first step, so that an app it starts is journalled under its own
budget from its first line. A failed call is tried again a second later. An
owner without the capability keeps the default for every app; that is said once in the
backend's log and in ``status`` (``log_retention_unsupported``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from protocol.errors import StaleEpoch, TenureError

from .model import Config

__all__ = ["CAPABILITY", "LogBudgets", "budgets_of"]

log = logging.getLogger(__name__)

CAPABILITY = ("logRetention", 1)
CALL_TIMEOUT = 600.0   # a smaller budget prunes at once: gigabytes may take a while, and
                       # a call that times out costs the whole owner connection

Budgets = dict[tuple[str, str], int]


def budgets_of(config: Config) -> Budgets:
    """The apps of ``config`` with a ``log_retention`` of their own."""
    return {(s.name, a.name): a.log_retention for s in config.stacks.values()
            for a in s.apps.values() if a.log_retention is not None}


class LogBudgets:
    def __init__(self) -> None:
        self.told: Budgets | None = None   # what the owner was last told (None: not yet)
        self.unsupported = False           # budgets wanted of an owner without the call
        self._failing = False              # the last call failed (said once per run)
        self._one = asyncio.Lock()         # one call at a time (the loop, an operation)

    def due(self, config: Config) -> bool:
        return budgets_of(config) != self.told

    async def sync(self, owner: Any, epoch: int, capabilities: Mapping[str, int],
                   config: Config) -> None:
        """Tell the owner ``config``'s budgets unless it was told them already. Raises
        nothing: a failure is logged and the next call tries again. Calls made together
        go one after the other: the second finds the budgets told."""
        async with self._one:
            await self._sync(owner, epoch, capabilities, config)

    async def _sync(self, owner: Any, epoch: int, capabilities: Mapping[str, int],
                    config: Config) -> None:
        want = budgets_of(config)
        if want == self.told:
            return
        if capabilities.get(CAPABILITY[0]) != CAPABILITY[1]:
            if want and not self.unsupported:
                log.warning("the owner predates log_retention (logRetention@1): every app "
                            "keeps the default until it is restarted on this release")
            self.unsupported, self.told = bool(want), want
            return
        try:
            await owner.call("logs.retention", {"budgets": [
                {"stack": st, "app": app, "bytes": n} for (st, app), n in sorted(want.items())]},
                epoch=epoch, timeout=CALL_TIMEOUT)
        except StaleEpoch:   # a newer generation holds the owner and tells its own
            self.told = want
            return
        except TenureError as exc:
            if not self._failing:
                log.warning("log budgets not set yet (%s); trying again every second",
                            exc.msg)
            self._failing = True
            return
        if self._failing:
            log.info("log budgets set")
        self.told, self.unsupported, self._failing = want, False, False
