"""Two `tenure up` at once on a home that is down: one starts the owner and the guardian,
the other waits for it and finds them running; both succeed. Each used to start a pair
of its own: the loser's guardian exited ALREADY_RUNNING, and as it stopped what it had
started it stopped the owner the winner's guardian had pinned, so one `up` failed at once
and the other waited 120 s for a backend that never came."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

APP = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_two_ups_at_once_start_one_owner_and_one_guardian(cluster: Any) -> None:
    cluster.up(APP)
    owner_before = cluster.cli("owner", "status", check=True).out["owner"]["pid"]
    assert cluster.down().ok
    with ThreadPoolExecutor(2) as pool:
        ups = list(pool.map(lambda _: cluster.cli("up", "--timeout", "60", timeout=150),
                            range(2)))
    assert [u.code for u in ups] == [0, 0], [(u.code, u.stderr[-600:]) for u in ups]
    started = [u.out["started"] for u in ups]
    assert sorted(s["owner"] for s in started) == [False, True], started
    assert sorted(s["guardian"] for s in started) == [False, True], started
    owner = cluster.cli("owner", "status", check=True).out["owner"]["pid"]
    assert owner != owner_before
    status = cluster.cli("status", check=True).out
    assert status["owner"]["pid"] == owner and status["backend"]["pid"]
    assert [r["state"] for r in status["apps"]] == ["ready"]


def test_two_first_ups_at_once_say_once_that_they_selected_the_release(cluster: Any
                                                                      ) -> None:
    """Was: both printed `sealed and selected release …` (the same one)."""
    with ThreadPoolExecutor(2) as pool:
        ups = list(pool.map(lambda _: cluster.cli(
            "up", "--timeout", "60", "--release", str(cluster.release), timeout=150),
            range(2)))
    assert [u.code for u in ups] == [0, 0], [(u.code, u.stderr[-600:]) for u in ups]
    sealed = [u.out["release_sealed"] for u in ups]
    assert sorted(map(bool, sealed)) == [False, True], sealed
    current = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    assert current in sealed, (current, sealed)
    assert cluster.down().ok and cluster.leftovers() == []
