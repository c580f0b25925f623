"""Stops share the owner's looks for orphans, but never one that may have missed the
children of a process the stop's launch lost: such a look began before that process
was found gone. Was: a look shared within 2 ms let a stop confirm 'stopped' while the
child of a helper that died meanwhile (re-parented to the owner, unseen) ran on."""

from __future__ import annotations

from typing import Any

from owner.procs import ProcessTable
from owner.targets import GroupTarget


class _Tree:
    """A launch's tracked processes: ``dies`` are found gone at the next refresh."""

    def __init__(self, dies: list[int], ends: list[int] | None = None) -> None:
        self.lost_at = float("-inf")
        self.dies = dies
        self.refreshes = 0
        self.known = {pid: 1 for pid in ends or []}   # tracked, ending right after a refresh

    def refresh(self, leader_unreaped: bool) -> None:
        self.refreshes += 1
        if self.dies:
            self.dies.pop()
            self.lost_at = 100.0 + self.refreshes
        elif self.known and self.refreshes > 1:   # found gone by this refresh
            self.known.clear()
            self.lost_at = 100.0 + self.refreshes

    def alive(self) -> list[int]:
        return []   # what is tracked has ended by the time it is asked


class _Launch:
    def __init__(self, tree: _Tree) -> None:
        self.exit = object()      # the leader is reaped
        self.tree = tree
        self.spawned = None


def test_a_stop_is_not_confirmed_until_a_look_begun_after_its_last_loss() -> None:
    asked: list[float] = []
    tree = _Tree(dies=[7])
    target = GroupTarget(_Launch(tree), asked.append)  # type: ignore[arg-type]
    assert target.group_alive() is True      # it lost one just now: not yet confirmed
    assert asked == [float("-inf")]
    assert target.group_alive() is False     # the next check: a look begun after it
    assert asked == [float("-inf"), 101.0] and tree.refreshes == 2


def test_a_look_is_shared_only_when_it_began_after_the_loss(monkeypatch: Any) -> None:
    table = ProcessTable.__new__(ProcessTable)
    looks: list[float] = []
    now = [50.0]
    monkeypatch.setattr("owner.proctrack.time.monotonic", lambda: now[0])
    table._adopt_orphans = lambda: looks.append(now[0]) or []  # type: ignore[method-assign]
    table._looked_at = table._look_began = float("-inf")
    table._adopt_orphans_shared(float("-inf"))
    assert looks == [50.0]
    now[0] = 50.015
    table._adopt_orphans_shared(float("-inf"))   # shared: within a poll interval
    table._adopt_orphans_shared(49.0)            # shared: it began after the loss
    assert looks == [50.0]
    table._adopt_orphans_shared(50.0005)         # a loss after it began: a look of its own
    assert looks == [50.0, 50.015]
    now[0] = 50.1
    table._adopt_orphans_shared(float("-inf"))   # too old to share
    assert looks == [50.0, 50.015, 50.1]


def test_a_process_that_ended_since_the_refresh_is_taken_up_before_a_confirmation() -> None:
    """Was: a tracked process that ended between the check's refresh and its count of
    the living let the stop confirm with it still tracked: the next stop of the launch
    found it gone then, and answered `stopped` for a launch with nothing left (and its
    children, the owner's now, were confirmed unseen). It is taken up as a loss: not
    confirmed until a look begun after it."""
    asked: list[float] = []
    tree = _Tree(dies=[], ends=[9])
    target = GroupTarget(_Launch(tree), asked.append)  # type: ignore[arg-type]
    assert target.group_alive() is True      # 9 ended after the refresh: a loss now
    assert tree.known == {} and asked == [float("-inf")]
    assert target.group_alive() is False     # after a look begun after that loss
    assert asked == [float("-inf"), 102.0]
