"""The owner link: a complete table, and `current` only while connected and fresh, its
freshness measured on a monotonic clock whatever the wall clock does."""

from __future__ import annotations

from protocol.link import STALE_AFTER, TRANSITIONS, Link, LinkEvent, LinkState


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _link(clock: Clock) -> Link:
    return Link(since=0.0, seen=0.0, clock=clock)


def test_table_is_complete() -> None:
    assert set(TRANSITIONS) == {(s, e) for s in LinkState for e in LinkEvent}


def test_break_reconnect_and_recover() -> None:
    clock = Clock()
    link = _link(clock)
    assert not link.current()   # never heard from
    clock.t = 10.0
    link.handle(LinkEvent.SEEN, 1010.0)
    assert link.current() and link.seen == 1010.0
    clock.t = 10.0 + STALE_AFTER + 0.1
    assert not link.current()
    clock.t = 11.0
    link.handle(LinkEvent.BROKE, 1011.0, "reset")
    assert (link.state, link.since) == (LinkState.RECONNECTING, 1011.0)
    assert not link.current()
    link.handle(LinkEvent.FAILED, 1012.0, "refused")
    link.handle(LinkEvent.FAILED, 1013.0, "refused again")
    assert (link.state, link.since, link.reason) == (LinkState.LOST, 1012.0, "refused again")
    clock.t = 14.0
    wire = link.to_wire()
    assert wire["age"] == 4.0 and wire["current"] is False and wire["state"] == "lost"
    assert wire["last_seen"] == 1010.0
    link.handle(LinkEvent.SEEN, 1015.0)
    assert (link.state, link.since, link.reason) == (LinkState.CONNECTED, 1015.0, None)


def test_a_wall_clock_step_does_not_make_a_fresh_link_stale() -> None:
    """Was: the age was wall time minus the wall time of the last word, so a step of the
    wall clock forward (an NTP step, a resume from suspend) made every command refuse
    with OWNER_UNAVAILABLE ('not answered for 3600 s') until the owner's next word."""
    clock = Clock()
    link = _link(clock)
    link.handle(LinkEvent.SEEN, 1000.0)
    clock.t = 1.0                     # one second later, the wall clock an hour ahead
    wire = link.to_wire()
    assert link.current() and wire["current"] is True and wire["age"] == 1.0


def test_another_owner_is_never_adopted() -> None:
    link = Link()
    link.handle(LinkEvent.CHANGED, 5.0, "instance b")
    for event in LinkEvent:
        link.handle(event, 6.0)
    assert link.state is LinkState.OWNER_CHANGED and not link.current()


def test_a_failed_exchange_is_a_break_first_then_lost() -> None:
    link = _link(Clock())
    link.exchange_failed(1.0, "TRANSPORT_LOST")
    assert (link.state, link.since) == (LinkState.RECONNECTING, 1.0)
    link.exchange_failed(2.0, "CONNECT_FAILED")
    assert (link.state, link.since, link.reason) == (LinkState.LOST, 2.0, "CONNECT_FAILED")
    link.exchange_failed(3.0, "CONNECT_FAILED")
    assert (link.state, link.since) == (LinkState.LOST, 2.0)   # lost since the first failure
    link.handle(LinkEvent.SEEN, 4.0)
    assert link.current()
