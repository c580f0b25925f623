"""The owner's shutdown stops apps level by level of the stop order the backend told it
(owner.stoporder): what the order accepts, how launches are grouped, the budget, and a
damaged stored order (every launch at once)."""

from __future__ import annotations

import json

import pytest

from owner import stoporder

ORDER = {"s": [["web", "worker"], ["api"], ["db"]]}
APPS = {"k-web": ("s", "web"), "k-db": ("s", "db"), "k-api": ("s", "api"),
        "k-other": ("s", "gone"), "k-t": ("t", "solo"), "k-unknown": None}


def test_launches_stop_level_by_level_and_what_the_order_does_not_name_first() -> None:
    assert stoporder.levels(list(APPS), APPS.get, ORDER) == [
        ["k-web", "k-other", "k-t", "k-unknown"], ["k-api"], ["k-db"]]
    assert stoporder.levels(["k-db", "k-api"], APPS.get, {}) == [["k-db", "k-api"]]
    assert stoporder.levels([], APPS.get, ORDER) == []


def test_the_budget_is_the_longest_policy_of_each_level_summed() -> None:
    groups = stoporder.levels(list(APPS), APPS.get, ORDER)
    policy = {"k-web": 15.0, "k-other": 3.0, "k-api": 40.0, "k-db": 20.0}
    assert stoporder.budget(groups, lambda k: policy.get(k, 0.0)) == 75.0
    assert stoporder.budget([], lambda k: 1.0) == 0.0


@pytest.mark.parametrize("bad, said", [
    ([], "must map each stack"),
    ({"a/b": [["x"]]}, "each stack must be a name"),
    ({"s": ["web"]}, "levels must be a list of lists"),
    ({"s": [["we/b"]]}, "each app must be a name"),
    ({"s": [["web"], ["web"]]}, "an app is named twice"),
    ({"s": [[""]]}, "each app must be a name"),
])
def test_an_order_that_is_not_one_is_refused(bad: object, said: str) -> None:
    assert said in (stoporder.check_order(bad) or "")


def test_an_order_past_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stoporder, "MAX_NAMES", 3)
    assert stoporder.check_order(ORDER) == "must name at most 3 apps"
    assert stoporder.check_order({"s": [["a"], ["b", "c"]]}) is None


def test_a_damaged_stored_order_stops_everything_at_once(caplog) -> None:
    rows = [("s", json.dumps(ORDER["s"])), ("t", "{not json")]
    assert stoporder.parse_rows(rows[:1]) == ORDER
    assert stoporder.parse_rows(rows) == {}
    assert "stored stop order of stack 't' is damaged" in caplog.text
    assert stoporder.parse_rows([("s", json.dumps([["a"], ["a"]]))]) == {}


def test_an_order_that_cannot_be_read_stops_everything_at_once(caplog) -> None:
    import sqlite3

    def failing() -> list[tuple[str, str]]:
        raise sqlite3.OperationalError("disk I/O error")
    assert stoporder.load(failing) == {}
    assert "the stop order cannot be read (disk I/O error)" in caplog.text
    assert stoporder.load(lambda: [("s", json.dumps(ORDER["s"]))]) == ORDER
