"""`tenure top`'s snapshot: totals that are unknown say so (they read 0 while the owner
was out of reach), and -n 0 or a negative -n are not taken for 'no instances'."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from backend.cli.top import pick, render, run
from protocol.errors import BadRequest


def app(key: str, pid: int | None, cpu: float | None, rss: int | None) -> dict[str, Any]:
    return {"key": key, "state": "ready" if pid else "stopped", "pid": pid,
            "cpu_percent": cpu, "rss": rss, "restarts": 0, "uptime": 1.0 if pid else None}


STALE = {"apps": [app("s/a/0", 10, None, None), app("s/b/0", 11, None, None)],
         "owner_link": {"current": False, "state": "stopped"}}


def test_totals_nobody_measured_are_unknown_not_zero() -> None:
    snap = pick(STALE, "cpu", None)
    assert (snap["cpu_percent"], snap["rss"]) == (None, None)
    head = render(snap).splitlines()[0]
    assert head.startswith("2 instances, 2 running; cpu -, mem -;"), head
    known = pick({"apps": [app("s/a/0", 10, 1.25, 2048), app("s/b/0", 11, None, None),
                           app("s/c/0", None, None, None)]}, "cpu", None)
    assert (known["cpu_percent"], known["rss"]) == (1.2, 2048)
    nothing_runs = pick({"apps": [app("s/c/0", None, None, None)]}, "cpu", None)
    assert (nothing_runs["cpu_percent"], nothing_runs["rss"]) == (0, 0)


def test_n_zero_shows_no_rows_but_says_there_are_instances() -> None:
    assert render(pick(STALE, "cpu", 0)).splitlines()[1] == "(-n 0: none shown)"
    assert render(pick({"apps": []}, "cpu", None)).splitlines()[1] == "no instances"


def test_a_negative_n_is_refused() -> None:
    args = SimpleNamespace(n=-1, every=2.0, once=True, json=True, sort="cpu")
    with pytest.raises(BadRequest, match="-n -1"):
        run(args, lambda: STALE, lambda snap, text: None)
