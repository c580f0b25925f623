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


MANY = {"apps": [app(f"s/a/{i}", 100 + i, float(i), 1024 * i) for i in range(30)]}


def test_rows_are_cut_to_the_height_given_with_a_line_for_the_rest() -> None:
    lines = render(pick(MANY, "cpu", None), height=10).splitlines()
    assert len(lines) == 10
    assert lines[0].startswith("30 instances, 30 running;") and lines[1].startswith("INSTANCE")
    assert lines[2].startswith("s/a/29") and lines[-1] == "(23 more)"
    assert render(pick(MANY, "cpu", 3), height=10) == render(pick(MANY, "cpu", 3))
    assert render(pick(MANY, "cpu", None)).splitlines()[-1].startswith("s/a/0")
    assert render(pick(MANY, "cpu", None), height=2).splitlines()[1] == "(30 more)"


def test_on_a_small_terminal_the_title_and_summary_stay_on_the_screen(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A frame taller than the terminal scrolled the title, the summary and the top
    rows away: what stayed on the screen was the bottom of the list."""
    import os
    import shutil
    import sys
    import time

    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) > 1:   # the first is the priming pause; then one frame drawn
            raise KeyboardInterrupt
    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a: os.terminal_size((120, 12)))
    args = SimpleNamespace(n=None, every=2.0, once=False, json=False, sort="cpu")
    assert run(args, lambda: MANY, lambda snap, text: print(text)) == 0
    frame = capsys.readouterr().out.removeprefix("\x1b[H\x1b[2J")
    lines = frame.splitlines()
    assert len(lines) == 11 and frame.endswith("\n")   # the cursor's line is the 12th
    assert lines[0].startswith("every 2s: tenure top") and lines[1] == ""
    assert lines[2].startswith("30 instances") and lines[4].startswith("s/a/29")
    assert lines[-1] == "(24 more)"
