"""`tenure op list --open` (what docs/cli.md tells the operator to run after an `up`
that timed out: it did not exist, exit 2), and the age an `inspect` of a lost owner
shows, which is a duration like every other."""

from __future__ import annotations

from typing import Any

import pytest

from backend.cli import plans, render_inspect
from backend.cli.cmdline import parser
from protocol.errors import BadRequest


def asked(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    def call(args: Any, method: str, params: Any = None, **kw: Any) -> Any:
        calls.append((method, params))
        return {"operations": []} if method == "op.list" else {}
    monkeypatch.setattr(plans, "_call", call)
    monkeypatch.setattr(plans, "_out", lambda *a: None)
    plans.cmd_op(parser(argv).parse_args(argv))
    return calls


def test_op_list_open_asks_for_the_operations_still_running(monkeypatch) -> None:
    assert asked(monkeypatch, ["op", "list", "--open"]) == [("op.list", {"open": True})]
    assert asked(monkeypatch, ["op", "list"]) == [("op.list", {})]
    with pytest.raises(BadRequest, match="--open"):
        asked(monkeypatch, ["op", "show", "op-1", "--open"])


def test_inspect_shows_how_long_ago_a_lost_owner_was_heard_as_a_duration() -> None:
    """Was `last seen age: 8.078`."""
    text = render_inspect.inspect({"instances": [{
        "key": "s/a/0", "generation": 1, "state": "unknown", "last_state": "ready",
        "last_seen_age": 8.078}]})
    assert "8.078" not in text and "8.1s ago" in text, text
