"""`tenure logs` against a real journal in a temporary directory: pages, tails, the end
of a non-following read, and terminal escapes (no processes, no sleeps)."""

from __future__ import annotations

import io
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.cli.logs import (
    FOLLOW_OUTAGE,
    OWNER_WAIT_S,
    TENURE_FLAG,
    follow_logs,
    neutralise,
    since,
    through_handoffs,
)
from backend.targets import exact_source
from owner.journal import Journal, LogSource
from owner.notes import TENURE, write_note
from owner.service_shapes import LOGS_PAGE_BYTES
from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    OwnerUnavailable,
    ShuttingDown,
    TransportLost,
)

WEB = LogSource("shop", "web", 0, 1)
DB = LogSource("shop", "db", 0, 1)


class Owner:
    """Answers the CLI's `logs` calls as the backend and owner do, from a real journal."""

    def __init__(self, journal: Journal, out: io.StringIO) -> None:
        self.journal, self.out = journal, out
        self.calls: list[dict[str, Any]] = []
        self.printed_at_call: list[int] = []
        self.after_first: Any = None

    def __call__(self, args: Any, method: str, params: dict[str, Any]) -> Any:
        assert method == "logs"
        self.calls.append(dict(params))
        self.printed_at_call.append(self.out.getvalue().count("\n"))
        p = dict(params)
        for target in p.pop("targets", []):   # the backend's part: one exact target here
            p.update(zip(("stack", "app", "instance"), exact_source(target), strict=False))
        page = self.journal.read_page(p.pop("after", 0), p.pop("limit"),
                                      max_bytes=LOGS_PAGE_BYTES, tail=p.pop("tail", None),
                                      **p)
        if self.after_first is not None and len(self.calls) == 1:
            self.after_first()
        return page.to_wire()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def args(**kw: Any) -> Any:
    base = {"targets": [], "stream": None, "since": None, "n": 50, "follow": False,
            "json": False, "grep": None}
    return types.SimpleNamespace(**{**base, **kw})


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    yield j
    j.close()


def run(journal: Journal, out: io.StringIO, monkeypatch: pytest.MonkeyPatch,
        **kw: Any) -> Owner:
    monkeypatch.setattr(sys, "stdout", out)
    owner = Owner(journal, out)
    assert follow_logs(args(**kw), owner) == 0
    return owner


def test_n_of_long_lines_is_printed_page_by_page(journal, monkeypatch):
    for i in range(30):
        journal.append(WEB, "stdout", [(b"%05d " % (i * 1000 + j) + b"x" * 300, 0)
                                       for j in range(1000)])
        journal.append(DB, "stdout", [(b"db", 0)])
    assert journal.flush(timeout=30)
    out = io.StringIO()
    owner = run(journal, out, monkeypatch, targets=["shop/web"], n=25_000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 25_000
    assert lines[0].startswith("shop/web/0: 05000 ") and lines[-1].startswith(
        "shop/web/0: 29999 ")
    assert owner.calls[0] == {"targets": ["shop/web"], "tail": 25_000, "limit": 10_000}
    assert len(owner.calls) >= 8  # ~8 MiB of answer in pages of at most 1 MiB
    assert all("tail" not in c and c["after"] > 0 for c in owner.calls[1:])
    assert 0 < owner.printed_at_call[-1] < 25_000  # printed before the last page came


def test_without_follow_the_read_stops_at_the_end_it_started_with(journal, monkeypatch):
    journal.append(WEB, "stdout", [(b"old %d" % i, 0) for i in range(20_000)])
    assert journal.flush(timeout=30)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    owner = Owner(journal, out)

    def more_output() -> None:
        journal.append(WEB, "stdout", [(b"new", 0)] * 5)
        assert journal.flush(timeout=30)

    owner.after_first = more_output
    assert follow_logs(args(since="0"), owner) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 20_000 and not any(line.endswith("new") for line in lines)


def test_escape_sequences_are_neutralised_on_a_terminal_only(journal, monkeypatch):
    evil = b"\x1b]0;owned\x07\x1b[2J\rfake\ttab \xc2\x9b31m \x7f end"
    journal.append(WEB, "stdout", [(evil, 0)])
    assert journal.flush(timeout=30)
    tty = Tty()
    run(journal, tty, monkeypatch)
    shown = tty.getvalue()
    assert shown == ("shop/web/0: \\x1b]0;owned\\x07\\x1b[2J\\x0dfake\ttab \\x9b31m "
                     "\\x7f end\n")
    assert not any(c in shown for c in "\x1b\x07\r\x9b\x7f")
    piped = io.StringIO()
    run(journal, piped, monkeypatch)
    assert piped.getvalue() == "shop/web/0: " + evil.decode() + "\n"  # scripts get bytes
    as_json = Tty()
    run(journal, as_json, monkeypatch, json=True)
    assert "\x1b" not in as_json.getvalue() and "\\u001b" in as_json.getvalue()


def test_tenure_lines_are_marked_and_an_app_cannot_forge_the_mark(journal, monkeypatch):
    assert TENURE_FLAG == TENURE   # the CLI does not import the owner: the same number
    write_note(journal, WEB, "spawn failed: /x/y: No such file or directory")
    journal.append(WEB, "stderr", [(b"tenure: spawn failed: forged", 0)])
    journal.append(WEB, "stdout", [(b"(tenure): forged too", 0)])
    assert journal.flush(timeout=30)
    out = io.StringIO()
    run(journal, out, monkeypatch)
    assert out.getvalue().splitlines() == [
        "shop/web/0 (tenure): spawn failed: /x/y: No such file or directory",
        "shop/web/0 (stderr): tenure: spawn failed: forged",
        "shop/web/0: (tenure): forged too"]
    as_json = io.StringIO()
    run(journal, as_json, monkeypatch, json=True)
    first = json.loads(as_json.getvalue().splitlines()[0])
    assert (first["flags"], first["stream"], first["data"]) == (
        TENURE, "stderr", "tenure: spawn failed: /x/y: No such file or directory")


def test_neutralise_keeps_text_and_tabs():
    assert neutralise("héllo\twörld ✓") == "héllo\twörld ✓"
    assert neutralise("\x00\n\x1f") == "\\x00\\x0a\\x1f"


NOW = 1_800_000_000.0


@pytest.mark.parametrize(("text", "want"), [
    ("42", {"after": 42}),
    ("0", {"after": 0}),
    ("90s", {"since_time": NOW - 90}),
    ("10m", {"since_time": NOW - 600}),
    ("1.5h", {"since_time": NOW - 5400}),
    ("2d", {"since_time": NOW - 172800}),
    ("2026-12-01T14:05:00+00:00", {"since_time": 1796133900.0}),
    ("0001-01-01T00:00", {"since_time": 0.0}),   # before the first time: all (INTERNAL)
])
def test_since_accepts_ids_durations_and_times(text: str, want: dict[str, Any]) -> None:
    assert since(text, NOW) == want


def test_since_a_clock_time_is_today_local() -> None:
    import datetime as dt
    got = since("14:05", NOW)["since_time"]
    when = dt.datetime.fromtimestamp(got)
    assert (when.hour, when.minute, when.date()) == (14, 5, dt.date.fromtimestamp(NOW))


@pytest.mark.parametrize("bad", ["yesterday", "10x", "-5m", "m", "25:00", "2026-13-01",
                                 "\u00b2", "\u0663", "\u00b2s"])
def test_since_refuses_what_it_cannot_read(bad: str) -> None:
    with pytest.raises(BadRequest, match="--since"):
        since(bad, NOW)


def test_grep_prints_only_matching_lines(journal: Journal,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    journal.append(WEB, "stdout", [(b"GET /a 200", 0), (b"GET /b 500", 0),
                                   (b"POST /c 500", 0)])
    assert journal.flush(10)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert follow_logs(args(grep=r" 5\d\d$"), Owner(journal, out)) == 0
    assert out.getvalue().splitlines() == ["shop/web/0: GET /b 500", "shop/web/0: POST /c 500"]
    with pytest.raises(BadRequest, match="--grep"):
        follow_logs(args(grep="("), Owner(journal, out))
    with pytest.raises(BadRequest, match="--grep"):   # was OverflowError, a traceback
        follow_logs(args(grep="a{99999999999}"), Owner(journal, out))


class Ended(Exception):
    """Ends a follow in a test (Ctrl-C does for a user)."""


def scripted(journal: Any, owner: Any, line: bytes, script: list[Any]) -> Any:
    """A ``call`` that plays ``script``: an exception is raised (the call recorded), 'more
    output' writes ``line`` to the journal first, anything else asks ``owner``."""
    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        step = script.pop(0)
        if isinstance(step, Exception):
            owner.calls.append(dict(params))
            raise step
        if step == "more output":
            journal.append(WEB, "stdout", [(line, 0)])
            assert journal.flush(timeout=30)
        return owner(a, method, params)
    return call


def test_a_follow_waits_for_a_silent_owner_and_goes_on_where_it_was(journal, monkeypatch):
    """Was: the follow ended with OWNER_UNAVAILABLE (exit 3) once the owner had been
    silent for 5 s, e.g. stopped for a moment or busy."""
    journal.append(WEB, "stdout", [(b"before", 0)])
    assert journal.flush(timeout=30)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    sleeps: list[float] = []
    monkeypatch.setattr("backend.cli.logs.time.sleep", sleeps.append)
    owner = Owner(journal, out)
    link = {"current": False, "age": 7.4, "process": "pid 12 is stopped (SIGSTOP or a "
            "debugger); kill -CONT 12 continues it"}
    silent = OwnerUnavailable("the owner has not answered for 7 s", {"owner_link": link})
    call = scripted(journal, owner, b"while silent",
                    ["page", silent, silent, silent, "more output", "page", Ended()])
    with pytest.raises(Ended):
        follow_logs(args(follow=True), call)
    assert out.getvalue().splitlines() == ["shop/web/0: before", "shop/web/0: while silent"]
    assert err.getvalue().splitlines() == [
        "tenure: logs: the owner has not answered for 7 s (pid 12 is stopped (SIGSTOP or "
        "a debugger); kill -CONT 12 continues it); following on once it answers (Ctrl-C "
        "ends)",
        "tenure: logs: the owner answers again; following"]
    asked = [c.get("after") for c in owner.calls[1:]]
    assert asked == [1, 1, 1, 1, 2, 2], asked   # the same page asked again, none skipped
    assert sleeps.count(OWNER_WAIT_S) == 3


def test_without_follow_a_silent_owner_ends_the_read_at_once(journal, monkeypatch):
    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        raise OwnerUnavailable("the owner has not answered for 7 s", {})

    monkeypatch.setattr("backend.cli.logs.time.sleep", pytest.fail)
    with pytest.raises(OwnerUnavailable):
        follow_logs(args(), call)


def test_a_follow_through_an_owner_restart_says_it_does_not_answer(journal, monkeypatch):
    """An owner that has just exited (a maintenance window) was 'not answered for 0 s'."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    gone = OwnerUnavailable("the owner did not answer", {"owner_link": {
        "current": True, "age": 0.3, "process": "pid 12 has exited"}})
    owner = Owner(journal, io.StringIO())
    script = ["page", gone, "page", Ended()]

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        return owner(a, method, params)

    with pytest.raises(Ended):
        follow_logs(args(follow=True), call)
    assert err.getvalue().splitlines()[0] == (
        "tenure: logs: the owner does not answer (pid 12 has exited); following on once "
        "it answers (Ctrl-C ends)")


def test_a_follow_waits_out_a_backend_handoff_and_goes_on_where_it_was(journal, monkeypatch):
    """Was: `tenure logs -f` ended with SHUTTING_DOWN (exit 1) or BACKEND_UNAVAILABLE
    (exit 3) during `tenure backend upgrade`, while `tenure events -f` lived on."""
    journal.append(WEB, "stdout", [(b"before", 0)])
    assert journal.flush(timeout=30)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    owner = Owner(journal, out)
    call = scripted(journal, owner, b"after the handoff", [
        "page", ShuttingDown("server is draining; retry against the next one"),
        BackendUnavailable("no backend generation answers"),
        TransportLost("logs: connection lost"), "more output", "page", Ended()])
    with pytest.raises(Ended):
        follow_logs(args(follow=True), call)
    assert out.getvalue().splitlines() == ["shop/web/0: before",
                                           "shop/web/0: after the handoff"]
    assert err.getvalue() == ""    # a routine handoff, nothing to say
    asked = [c.get("after") for c in owner.calls[1:]]
    assert asked == [1, 1, 1, 1, 2, 2], asked   # the same page asked again, none skipped


def test_a_follow_gives_up_on_a_backend_away_longer_than_the_outage(monkeypatch):
    clock = iter(range(0, 10_000, 50))
    monkeypatch.setattr("backend.cli.logs.time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    asked: list[int] = []

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        asked.append(1)
        raise BackendUnavailable("no backend generation answers")

    with pytest.raises(BackendUnavailable):
        follow_logs(args(follow=True), call)
    assert FOLLOW_OUTAGE == 120 and len(asked) == 3   # at 0, 50 and 100 s, not at 150 s
    asked.clear()
    with pytest.raises(BackendUnavailable):   # without -f: at once
        follow_logs(args(), call)
    assert asked == [1]


def test_a_follow_says_once_that_no_backend_has_answered_and_when_one_does(monkeypatch):
    """Was: a follower of a hung (or SIGSTOPped) backend waited its 120 s in silence."""
    clock = iter(range(0, 10_000, 2))
    monkeypatch.setattr("backend.cli.logs.time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("backend.cli.logs.time.sleep", lambda s: None)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    silent = iter([BackendUnavailable("backend pid 7 is alive but NOT ANSWERING")] * 5)

    def ask() -> str:
        exc = next(silent, None)
        if exc is not None:
            raise exc
        return "page"

    assert through_handoffs(True, ask) == "page"
    assert err.getvalue().splitlines() == [
        "tenure: logs: no backend has answered for 6 s (backend pid 7 is alive but NOT "
        "ANSWERING); waiting for one for up to 120 s (Ctrl-C ends)",
        "tenure: logs: a backend answers again; following"]


@pytest.mark.parametrize("n", [-1, -5])
def test_a_negative_n_is_a_usage_error(journal, n):
    with pytest.raises(BadRequest, match=f"-n {n}"):
        follow_logs(args(n=n), Owner(journal, io.StringIO()))


class Piped(io.TextIOWrapper):
    """stdout as a pipe: text over a byte stream, not a terminal."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")

    def getvalue(self) -> str:   # what Owner counts
        return self.written().decode(errors="replace")

    def written(self) -> bytes:
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue()


def test_piped_output_is_the_apps_bytes_and_json_carries_them(journal, monkeypatch):
    """Was: bytes that are not UTF-8 became U+FFFD piped and in --json, although piped
    output was documented as not changed."""
    raw = b"caf\xe9 \xff\xfe end \x1b[1m"
    journal.append(WEB, "stdout", [(raw, 0), ("ok ✓".encode(), 0)])
    assert journal.flush(timeout=30)
    piped = Piped()
    run(journal, piped, monkeypatch)
    assert piped.written() == b"shop/web/0: " + raw + "\nshop/web/0: ok ✓\n".encode()
    as_json = Piped()
    run(journal, as_json, monkeypatch, json=True)
    first, second = map(json.loads, as_json.written().splitlines())
    import base64
    assert base64.b64decode(first["data_base64"]) == raw
    assert first["data"] == raw.decode(errors="replace")
    assert second["data"] == "ok ✓" and "data_base64" not in second
    tty = Tty()
    run(journal, tty, monkeypatch)
    assert tty.getvalue().splitlines()[0] == "shop/web/0: caf\ufffd \ufffd\ufffd end \\x1b[1m"


def cut_line(journal: Journal) -> bytes:
    """A line of 40,000 bytes, cut by the owner into three records, with a line of
    another instance between its records."""
    line = b"".join(b"%05d " % i for i in range(6667))[:40_000]
    journal.append(WEB, "stdout", [(line[:16384], 1)])
    journal.append(DB, "stdout", [(b"db between", 0)])
    journal.append(WEB, "stdout", [(line[16384:32768], 1), (line[32768:], 0)])
    journal.append(WEB, "stdout", [(b"short", 0)])
    assert journal.flush(timeout=30)
    return line


def test_a_line_cut_into_records_is_printed_once_and_grep_sees_it_whole(journal,
                                                                         monkeypatch):
    """Was: a line longer than 16 KiB was printed as three prefixed lines, and --grep
    matched each piece apart."""
    line = cut_line(journal)
    monkeypatch.setattr("backend.cli.logs.PAGE_RECORDS", 2)   # its records in two pages
    piped = Piped()
    run(journal, piped, monkeypatch)
    assert piped.written().splitlines() == [b"shop/db/0: db between",
                                            b"shop/web/0: " + line, b"shop/web/0: short"]
    across = Piped()   # a pattern that spans the first cut
    run(journal, across, monkeypatch, grep=line[16380:16390].decode())
    assert across.written().splitlines() == [b"shop/web/0: " + line]
    as_json = Piped()
    run(journal, as_json, monkeypatch, json=True)
    recs = [json.loads(r) for r in as_json.written().splitlines()]
    assert [r["flags"] for r in recs] == [1, 0, 1, 0, 0]   # --json: the records


def test_n_counts_records_and_a_tail_that_begins_inside_a_cut_line_prints_its_end(
        journal, monkeypatch):
    """What docs/cli.md says of -n with lines longer than 16 KiB."""
    line = cut_line(journal)
    piped = Piped()
    run(journal, piped, monkeypatch, n=3)   # the last two records of the line, and short
    assert piped.written().splitlines() == [b"shop/web/0: " + line[16384:],
                                            b"shop/web/0: short"]


KEPT = 64 << 10   # bytes an app keeps in these journals: about 65 lines of 1000 bytes


def lines(tag: bytes, n: int) -> list[tuple[bytes, int]]:
    return [(b"%s %04d " % (tag, i) + b"x" * 990, 0) for i in range(n)]


def written(journal: Journal, src: LogSource, data: list[tuple[bytes, int]],
            stream: str = "stdout") -> list[int]:
    """Append ``data`` and return the ids it was given (one append, flushed, takes the
    next ids)."""
    before = journal.last_id()
    journal.append(src, stream, data)
    assert journal.flush(timeout=30)
    return list(range(before + 1, journal.last_id() + 1))


def pruned_above(journal: Journal, ids: list[int], after: int, **flt: Any) -> int:
    """The highest of ``ids`` above ``after`` that the journal no longer has."""
    kept = {r.id for r in journal.read(0, 10_000, **flt)}
    lost = [i for i in ids if i > after and i not in kept]
    assert lost, "the test meant retention to prune above the read"
    return max(lost)


def test_a_follower_behind_retention_says_the_gap_once_and_follows_on(tmp_path,
                                                                      monkeypatch):
    """Was: `tenure logs -f` went from one app's record 35076 to 61464 without a word:
    retention had pruned those between before the follower read them."""
    with Journal(tmp_path / "j.db", retention_bytes_per_app=KEPT) as j:
        j.set_retention({("shop", "db"): 1 << 20})   # db keeps all it writes here
        web = written(j, WEB, lines(b"web", 20))
        written(j, DB, lines(b"db", 20))
        after = j.last_id()
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        # small pages: several are cut among db's records below web's gap, and the
        # owner names the gap in each of them
        monkeypatch.setattr("backend.cli.logs.PAGE_RECORDS", 7)
        polls: list[float] = []

        def poll(seconds: float) -> None:
            polls.append(seconds)
            if len(polls) == 1:
                for _ in range(60):   # web outruns its budget; db's ids come between
                    web.extend(written(j, WEB, lines(b"web", 3)))
                    written(j, DB, lines(b"db", 4))
            elif len(polls) == 3:
                raise Ended
        monkeypatch.setattr("backend.cli.logs.time.sleep", poll)
        owner = Owner(j, out)
        answers: list[dict[str, Any]] = []

        def call(a: Any, method: str, params: dict[str, Any]) -> Any:
            answers.append(owner(a, method, params))
            return answers[-1]
        with pytest.raises(Ended):
            follow_logs(args(follow=True, n=1000), call)
        last = pruned_above(j, web, after, app="web")
        assert err.getvalue().splitlines() == [
            f"tenure: logs: records of shop/web/0 were removed by log retention before "
            f"they were read (among ids {after + 1}-{last}); following on"]
        assert sum(1 for a in answers if a.get("pruned")) > 1   # said once, named often
        kept = j.read(after, 10_000)
        assert len(out.getvalue().splitlines()) == 40 + len(kept)


def test_other_apps_ids_and_other_sources_pruned_say_nothing(tmp_path, monkeypatch):
    """A follower of one instance: another app's records between its ids, that app's
    pruning, its own pruning below what it read and another instance's pruning above it
    are none of its gaps. ``--since`` an id of that other instance says where it goes
    on from; with ``--json`` the record after the gap carries it too."""
    web1, ids1 = LogSource("shop", "web", 1, 1), []
    with Journal(tmp_path / "j.db", retention_bytes_per_app=KEPT) as j:
        written(j, WEB, lines(b"web0", 20))
        after = j.last_id()
        err = io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        polls: list[float] = []

        def poll(seconds: float) -> None:
            polls.append(seconds)
            if len(polls) == 1:
                for _ in range(60):
                    ids1.extend(written(j, web1, lines(b"web1", 3), "stderr"))
                    written(j, DB, lines(b"db", 4))
                written(j, WEB, lines(b"web0 new", 5))
            elif len(polls) == 3:
                raise Ended
        monkeypatch.setattr("backend.cli.logs.time.sleep", poll)
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(Ended):
            follow_logs(args(targets=["shop/web/0"], follow=True, n=1000), Owner(j, out))
        assert len(out.getvalue().splitlines()) == 25 and err.getvalue() == ""
        last = pruned_above(j, ids1, after, app="web", instance=1)
        first = j.read(after, 1, app="web", instance=1)[0].id
        assert run(j, Piped(), monkeypatch, targets=["shop/web/1"], stream="stdout",
                   since=str(after)) and err.getvalue() == ""   # it wrote no stdout
        as_json = Piped()
        run(j, as_json, monkeypatch, targets=["shop/web/1"], since=str(after), json=True)
        said = (f"tenure: logs: records of shop/web/1 were removed by log retention before "
                f"they were read (among ids {after + 1}-{last}); printing those kept after "
                "them")
        assert err.getvalue().splitlines() == [said]
        recs = [json.loads(r) for r in as_json.written().splitlines()]
        assert recs[0]["id"] == first
        assert recs[0]["retention_gap"] == {"after": after, "last_id": last}
        assert not any("retention_gap" in r for r in recs[1:])
