"""Each app's ``log_retention`` (tenure.toml) brought to the owner's journal.

The owner keeps budgets durably (``logs.retention``, capability ``logRetention@1``);
the backend tells it the whole set whenever it differs from what the owner was last
told: a second after a generation's start (a new generation cannot know what an older
one said), from a loop of its own (a large prune must not hold up the heartbeat), and
before an operation's first step, so that an app it starts is journalled under its own
budget from its first line. What an operation tells raises budgets only: a smaller
budget prunes at once, gigabytes may take minutes, and lowering one loses nothing an app
about to start would write, so the loop lowers it a second later. A failed call is
tried again a second later.

The owner keeps the budget of an app it is not told of while the app has lines (one
taken out of the config keeps them within the budget it had until the backend's
retention forgets them, ``removed_app_logs_days``) when asked to (``keep``, capability
``logRetentionKeep@1``; an owner without it gives such an app the default), and answers
the budgets in force. So
an app of the config without a budget of its own that the owner still holds one for
(its ``log_retention`` was removed, or it came back into the config) is told the
owner's default. An
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
KEEP = ("logRetentionKeep", 1)   # the owner keeps a removed app's budget when asked
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
        self.default: int | None = None    # the owner's budget for every other app
        self.held: Budgets = {}            # the budgets in force, as the owner answered
        self.unsupported = False           # budgets wanted of an owner without the call
        self._failing = False              # the last call failed (said once per run)
        self._one = asyncio.Lock()         # one call at a time (the loop, an operation)

    def due(self, config: Config) -> bool:
        return self.wanted(config) != self.told

    def wanted(self, config: Config) -> Budgets:
        """``config``'s budgets, and the owner's default for each app of ``config``
        without one of its own that the owner holds a budget for (owner.journal
        keeps the budget of an app it is not told of while the app has lines)."""
        want = budgets_of(config)
        if self.default is not None:
            want |= {key: self.default for key in self.held
                     if key not in want and config.app(*key) is not None}
        return want

    async def sync(self, owner: Any, epoch: int, capabilities: Mapping[str, int],
                   config: Config, *, lower: bool = True) -> None:
        """Tell the owner ``config``'s budgets unless it was told them already. Raises
        nothing: a failure is logged and the next call tries again. Calls made together
        go one after the other: the second finds the budgets told. ``lower=False``: a
        budget ``config`` lowers stays as told for now (see :meth:`raised`)."""
        async with self._one:
            want = self.wanted(config)
            await self._sync(owner, epoch, capabilities, want if lower else self.raised(want))

    def raised(self, want: Budgets) -> Budgets:
        """What to tell the owner so that no app's budget is below ``want`` and none is
        lowered: each app's larger of what it was told and what it wants (the owner's
        default standing for no budget of its own), and an app told of but no longer
        wanted (taken out of the config) what it was told. Told that, the owner prunes
        nothing. ``want`` itself while what the owner holds is not known (nothing told
        yet by this generation, or its default never answered)."""
        told, default = self.told, self.default
        if told is None or default is None:
            return want
        kept = {k: n for k, n in told.items() if k not in want}
        return kept | {k: max(n, told.get(k, default)) for k, n in want.items()}

    async def _sync(self, owner: Any, epoch: int, capabilities: Mapping[str, int],
                    want: Budgets) -> None:
        if want == self.told:
            return
        if capabilities.get(CAPABILITY[0]) != CAPABILITY[1]:
            if want and not self.unsupported:
                log.warning("the owner predates log_retention (logRetention@1): every app "
                            "keeps the default until it is restarted on this release")
            self.unsupported, self.told = bool(want), want
            return
        try:
            keep = {"keep": True} if capabilities.get(KEEP[0]) == KEEP[1] else {}
            answer = await owner.call("logs.retention", {"budgets": [
                {"stack": st, "app": app, "bytes": n} for (st, app), n in sorted(want.items())],
                **keep}, epoch=epoch, timeout=CALL_TIMEOUT)
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
        default = answer.get("default") if isinstance(answer, dict) else None
        self.default = default if isinstance(default, int) else None
        self.held = _held(answer)


def _held(answer: Any) -> Budgets:
    """The budgets in force a ``logs.retention`` answer lists (a malformed entry is
    left out: an app not held is told nothing more than its config says)."""
    listed = answer.get("budgets") if isinstance(answer, dict) else None
    return {(b["stack"], b["app"]): b["bytes"] for b in listed or ()
            if isinstance(b, dict) and isinstance(b.get("stack"), str)
            and isinstance(b.get("app"), str) and isinstance(b.get("bytes"), int)}
