"""How current a daemon's view of the owner is: the connection's state and the age of the
last thing the owner told it. The backend and the guardian both keep one; every answer
about runtime state carries it, so a stale world is never shown as current.

States (stable wire values)::

    connected       the owner answers; ``seen`` is the last exchange
    reconnecting    the connection broke at ``since``; trying again
    lost            reconnecting has failed since ``since`` (``reason``); still trying
    owner-changed   another owner instance answers: never adopted automatically (for a
                    backend generation this is terminal: the guardian moves control)

Events: ``Seen`` (any answer or event from the owner), ``Broke`` (the connection is gone),
``Failed`` (a reconnect attempt failed), ``Changed`` (another instance answered). The
table below is complete (checked at import). The caller passes ``now``, the wall time
shown (``since``, ``last_seen``); how long ago the owner last said anything (``age``,
staleness) is measured on the link's ``clock``, CLOCK_MONOTONIC: on the wall clock a
step forward of a few seconds, or a resume from suspend, made every command refuse
(OWNER_UNAVAILABLE "not answered for 3600 s") and status show every app `unknown`
until the next word.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["STALE_AFTER", "Link", "LinkEvent", "LinkState"]

STALE_AFTER = 5.0   # seconds without a word from the owner: the view is stale


class LinkState(StrEnum):
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    LOST = "lost"
    OWNER_CHANGED = "owner-changed"


class LinkEvent(StrEnum):
    SEEN = "seen"
    BROKE = "broke"
    FAILED = "failed"
    CHANGED = "changed"


@dataclass
class Link:
    state: LinkState = LinkState.CONNECTED
    since: float = 0.0        # wall time the current state began
    seen: float = 0.0         # wall time of the last word from the owner
    reason: str | None = None
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    seen_at: float = field(default=float("-inf"))  # ``clock`` at the last word: the age

    def __post_init__(self) -> None:
        if self.seen and self.seen_at == float("-inf"):   # made as heard at wall time seen
            self.seen_at = self.clock() - max(0.0, time.time() - self.seen)

    def heard(self, ago: float = 0.0) -> None:
        """Take the last word as ``ago`` seconds old (tests make a link stale with it)."""
        self.seen_at = self.clock() - ago

    def handle(self, event: LinkEvent, now: float, reason: str | None = None) -> None:
        TRANSITIONS[(self.state, event)](self, now, reason)

    def _set_state(self, new: LinkState, now: float, reason: str | None) -> None:
        if new is not self.state:
            self.state, self.since = new, now
        self.reason = reason

    def exchange_failed(self, now: float, reason: str) -> None:
        """A call to the owner failed: a break of a connected link (``reconnecting``),
        else one more failed attempt (``lost``)."""
        self.handle(LinkEvent.BROKE if self.state is LinkState.CONNECTED
                    else LinkEvent.FAILED, now, reason)

    def age(self) -> float:
        """Seconds since the last word from the owner (on ``clock``)."""
        return max(0.0, self.clock() - self.seen_at)

    def current(self) -> bool:
        """Whether what the backend knows may be shown as the present."""
        return self.state is LinkState.CONNECTED and self.age() <= STALE_AFTER

    def to_wire(self) -> dict[str, Any]:
        age = self.age()
        if age == float("inf"):   # never heard from: as old as the wall clock says
            age = max(0.0, time.time() - self.seen)
        return {"state": str(self.state), "since": self.since, "reason": self.reason,
                "last_seen": self.seen, "age": round(age, 3), "current": self.current()}


def _seen(link: Link, now: float, reason: str | None) -> None:
    link.seen, link.seen_at = now, link.clock()
    link._set_state(LinkState.CONNECTED, now, None)


def _broke(link: Link, now: float, reason: str | None) -> None:
    link._set_state(LinkState.RECONNECTING, now, reason)


def _failed(link: Link, now: float, reason: str | None) -> None:
    link._set_state(LinkState.LOST, now if link.state is not LinkState.LOST else link.since,
                    reason)


def _changed(link: Link, now: float, reason: str | None) -> None:
    link._set_state(LinkState.OWNER_CHANGED, now, reason)


def _stay(link: Link, now: float, reason: str | None) -> None:
    """owner-changed is terminal: only a new Link (a new attachment) starts over."""


Handler = Callable[[Link, float, "str | None"], None]
TRANSITIONS: dict[tuple[LinkState, LinkEvent], Handler] = {
    (LinkState.CONNECTED, LinkEvent.SEEN): _seen,
    (LinkState.CONNECTED, LinkEvent.BROKE): _broke,
    (LinkState.CONNECTED, LinkEvent.FAILED): _failed,
    (LinkState.CONNECTED, LinkEvent.CHANGED): _changed,
    (LinkState.RECONNECTING, LinkEvent.SEEN): _seen,
    (LinkState.RECONNECTING, LinkEvent.BROKE): _broke,
    (LinkState.RECONNECTING, LinkEvent.FAILED): _failed,
    (LinkState.RECONNECTING, LinkEvent.CHANGED): _changed,
    (LinkState.LOST, LinkEvent.SEEN): _seen,
    (LinkState.LOST, LinkEvent.BROKE): _failed,
    (LinkState.LOST, LinkEvent.FAILED): _failed,
    (LinkState.LOST, LinkEvent.CHANGED): _changed,
    (LinkState.OWNER_CHANGED, LinkEvent.SEEN): _stay,
    (LinkState.OWNER_CHANGED, LinkEvent.BROKE): _stay,
    (LinkState.OWNER_CHANGED, LinkEvent.FAILED): _stay,
    (LinkState.OWNER_CHANGED, LinkEvent.CHANGED): _stay,
}
assert set(TRANSITIONS) == {(s, e) for s in LinkState for e in LinkEvent}
