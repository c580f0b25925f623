"""The owner link: a complete table, and `current` only while connected and fresh."""

from __future__ import annotations

from protocol.link import STALE_AFTER, TRANSITIONS, Link, LinkEvent, LinkState


def test_table_is_complete() -> None:
    assert set(TRANSITIONS) == {(s, e) for s in LinkState for e in LinkEvent}


def test_break_reconnect_and_recover() -> None:
    link = Link(since=0.0, seen=0.0)
    link.handle(LinkEvent.SEEN, 10.0)
    assert link.current(10.0) and not link.current(10.0 + STALE_AFTER + 0.1)
    link.handle(LinkEvent.BROKE, 11.0, "reset")
    assert (link.state, link.since) == (LinkState.RECONNECTING, 11.0)
    assert not link.current(11.0)
    link.handle(LinkEvent.FAILED, 12.0, "refused")
    link.handle(LinkEvent.FAILED, 13.0, "refused again")
    assert (link.state, link.since, link.reason) == (LinkState.LOST, 12.0, "refused again")
    wire = link.to_wire(14.0)
    assert wire["age"] == 4.0 and wire["current"] is False and wire["state"] == "lost"
    link.handle(LinkEvent.SEEN, 15.0)
    assert (link.state, link.since, link.reason) == (LinkState.CONNECTED, 15.0, None)


def test_another_owner_is_never_adopted() -> None:
    link = Link()
    link.handle(LinkEvent.CHANGED, 5.0, "instance b")
    for event in LinkEvent:
        link.handle(event, 6.0)
    assert link.state is LinkState.OWNER_CHANGED and not link.current(6.0)


def test_a_failed_exchange_is_a_break_first_then_lost() -> None:
    link = Link(since=0.0, seen=0.0)
    link.exchange_failed(1.0, "TRANSPORT_LOST")
    assert (link.state, link.since) == (LinkState.RECONNECTING, 1.0)
    link.exchange_failed(2.0, "CONNECT_FAILED")
    assert (link.state, link.since, link.reason) == (LinkState.LOST, 2.0, "CONNECT_FAILED")
    link.exchange_failed(3.0, "CONNECT_FAILED")
    assert (link.state, link.since) == (LinkState.LOST, 2.0)   # lost since the first failure
    link.handle(LinkEvent.SEEN, 4.0)
    assert link.current(4.0)
