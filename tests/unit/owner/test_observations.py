"""The observation ring: cursors, gaps, its bound, and events that come back as sent."""

from __future__ import annotations

from typing import Any

from owner.observations import RING_SIZE, ObservationRing


def test_events_come_back_as_they_were_emitted_with_cursors() -> None:
    pushed: list[tuple[int, dict[str, Any]]] = []
    ring = ObservationRing(publish=lambda c, e: pushed.append((c, e)))
    ring.emit("exit", launch_key="s/a/0/1", pid=7, code=None, signal="SIGKILL",
              core=False)
    ring.emit("notify", launch_key="s/a/0/1", pid=8, fields={"READY": "1"})
    ring.emit("launch_failed", launch_key="s/b/0/1", spawn={"errno": 2, "hint": None,
                                                              "path": "/x"})
    got = ring.read(0, 10)
    assert [e["cursor"] for e in got["events"]] == [1, 2, 3] and not got["gap"]
    assert [{k: v for k, v in e.items() if k != "cursor"} for e in got["events"]] == \
        [e for _, e in pushed]
    assert got["events"][1]["fields"] == {"READY": "1"}
    assert got["events"][2]["spawn"]["path"] == "/x"


def test_the_ring_is_bounded_and_a_reader_behind_it_gets_a_gap() -> None:
    ring = ObservationRing()
    for i in range(RING_SIZE + 10):
        ring.emit("intent", stack="s", intent="running", revision=i)
    assert ring.oldest == 11 and ring.cursor == RING_SIZE + 10
    behind = ring.read(5, 3)
    assert behind["gap"] and [e["cursor"] for e in behind["events"]] == [11, 12, 13]
    current = ring.read(ring.cursor - 1, 10)
    assert not current["gap"] and current["events"][0]["revision"] == RING_SIZE + 9
