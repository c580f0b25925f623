"""The stop order told to the owner (owner.stoporder): each stack's apps in the reverse
of their start order along ``after`` (backend.config.order_apps), so that the owner's
own shutdown (`tenure down`, the machine's) stops ``web`` before the ``db`` it starts
after, with no backend left to ask.

Told whenever it differs from what this generation told last (a new generation cannot
know what an older one said): by the generation's loop that also tells the log budgets,
a second after the start and within a second of an apply. Only stacks of more than one
level are told (for the others the order says nothing). An owner without the capability
``stopOrder@1`` stops every app at once, as before; that is said once in the log. A
failed call is tried again a second later.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from protocol.errors import StaleEpoch, TenureError

from .config import order_apps
from .model import Config

__all__ = ["CAPABILITY", "StopOrderTeller", "stop_order_of"]

log = logging.getLogger(__name__)

CAPABILITY = ("stopOrder", 1)

Order = dict[str, list[list[str]]]


def stop_order_of(config: Config) -> Order:
    """Each stack of ``config`` with more than one level: its levels, the first to stop
    first."""
    out: Order = {}
    for stack in config.stacks.values():
        levels = order_apps(stack)
        if len(levels) > 1:
            out[stack.name] = [list(level) for level in reversed(levels)]
    return out


class StopOrderTeller:
    def __init__(self) -> None:
        self.told: Order | None = None   # what the owner was last told (None: not yet)
        self._failing = False            # the last call failed (said once a run)
        self._unsupported = False        # an order wanted of an owner without the call
        self._of: tuple[str, Order] | None = None   # (config revision, its order)

    async def sync(self, owner: Any, epoch: int, capabilities: Mapping[str, int],
                   config: Config) -> None:
        """Tell the owner ``config``'s stop order unless it was told it already. Raises
        nothing: a failure is logged and the next call tries again."""
        if self._of is None or self._of[0] != config.revision:   # once a config
            self._of = (config.revision, stop_order_of(config))
        want = self._of[1]
        if want == self.told:
            return
        if capabilities.get(CAPABILITY[0]) != CAPABILITY[1]:
            if want and not self._unsupported:
                log.warning("the owner predates stopOrder@1: its shutdown stops every app "
                            "at once, not in the reverse of their start order, until it "
                            "is restarted on this release")
            self._unsupported, self.told = bool(want), want
            return
        try:
            await owner.call("stack.stop_order", {"stacks": want}, epoch=epoch)
        except StaleEpoch:   # a newer generation holds the owner and tells its own
            self.told = want
            return
        except TenureError as exc:
            if not self._failing:
                log.warning("stop order not told to the owner yet (%s); trying again "
                            "every second", exc.msg)
            self._failing = True
            return
        if self._failing:
            log.info("stop order told to the owner")
        self._failing, self.told = False, want
