"""What retention removed of each source (owner.journalpruned): a read from an id below
what retention pruned of a source names that source and the highest id it lost, exactly;
other apps' records between a source's ids, and what was pruned below the read, name
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from owner.journal import Journal, LogSource
from owner.journalretention import MIN_RETENTION
from owner.testing import read_all

KIB = 1 << 10
WEB0, WEB1 = LogSource("s", "web", 0, 1), LogSource("s", "web", 1, 1)
DB = LogSource("s", "db", 0, 1)


def write(j: Journal, src: LogSource, n: int, stream: str = "stdout",
          size: int = 1000) -> list[int]:
    """Append ``n`` lines of ``size`` bytes and return their ids (ids are given in
    commit order: one append, flushed, takes the next ``n``)."""
    before = j.last_id()
    j.append(src, stream, [(b"x" * size, 0)] * n)
    assert j.flush(timeout=30)
    assert j.last_id() == before + n
    return list(range(before + 1, before + n + 1))


def lost_above(written: list[int], j: Journal, after: int, **flt: object) -> int:
    """The highest id of ``written`` above ``after`` the journal no longer has (0: none)."""
    kept = {r.id for r in j.read(0, 10_000, **flt)}   # type: ignore[arg-type]
    return max((i for i in written if i > after and i not in kept), default=0)


def test_a_read_behind_retention_names_each_source_and_the_last_id_it_lost(
        tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        web0 = write(j, WEB0, 20)
        web1: list[int] = []
        after = j.read_page(0, 1000, app="web").next   # a reader has read these
        assert after == web0[-1]
        for _ in range(60):   # web's own lines, and db's between them
            web0 += write(j, WEB0, 3)
            web1 += write(j, WEB1, 1, "stderr")
            write(j, DB, 4)
        p0 = lost_above(web0, j, after, app="web", instance=0)
        p1 = lost_above(web1, j, after, app="web", instance=1)
        assert p0 > after and p1 > after
        page = j.read_page(after, 1000, app="web")
        assert page.pruned == [
            {"stack": "s", "app": "web", "instance": 0, "stream": "stdout", "after": after,
             "last_id": p0},
            {"stack": "s", "app": "web", "instance": 1, "stream": "stderr", "after": after,
             "last_id": p1}]
        assert page.to_wire()["pruned"] == page.pruned
        assert j.read_page(after, 1000, app="web", instance=1).pruned == [page.pruned[1]]
        assert j.read_page(after, 1000, app="web", stream="stdout").pruned == [page.pruned[0]]
        # a read from above what was pruned of web: nothing, though db lost records there
        assert j.read_page(max(p0, p1), 1000, app="web").pruned == []
        assert j.read_page(max(p0, p1), 1000, stack="s").pruned != []   # db's


def test_other_apps_between_a_sources_ids_and_pruning_below_the_read_name_nothing(
        tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        web = write(j, WEB0, 100)   # more than web keeps: its oldest are pruned
        after = j.read_page(0, 1000, app="web").next
        assert after == web[-1] and lost_above(web, j, 0, app="web") > 0
        for _ in range(40):
            write(j, DB, 10)   # db's ids between web's, and db pruned meanwhile
            write(j, WEB0, 1)
        page = j.read_page(after, 1000, app="web")
        assert len(page.records) == 40 and page.pruned == []
        assert page.records[1].id - page.records[0].id == 11   # the ids jump
        tail = j.read_page(0, 1000, app="web", tail=10)   # the last 10 are all kept
        assert len(tail.records) == 10 and tail.pruned == []


def test_a_tail_longer_than_what_is_kept_names_what_was_pruned(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        web = write(j, WEB0, 200)
        page = j.read_page(0, 1000, app="web", tail=1000)
        assert 0 < len(page.records) < 200
        assert page.pruned == [{"stack": "s", "app": "web", "instance": 0,
                                "stream": "stdout", "after": 0,
                                "last_id": lost_above(web, j, 0, app="web")}]


def test_extents_from_before_a_reopen_and_a_cut_extent_are_named_exactly(
        tmp_path: Path) -> None:
    """A reopened journal has no summaries of its extents (their rows are read), and a
    budget that shrank cuts the head of an extent rather than deleting it whole."""
    with Journal(tmp_path / "j.db") as j:
        web = write(j, WEB0, 6 * 64, size=16 * KIB)   # 6 MiB in one extent
        write(j, DB, 5)
    with Journal(tmp_path / "j.db") as j:
        j.set_retention({("s", "web"): MIN_RETENTION})   # cuts the head of that extent
        cut = lost_above(web, j, 0, app="web")
        assert 0 < cut < web[-1]
        assert j.read_page(0, 10, app="web").pruned[0]["last_id"] == cut
        more = write(j, WEB0, 2 * 64, size=16 * KIB)
        lost = lost_above(web + more, j, 0, app="web")
        assert lost > cut
        assert [g["last_id"] for g in j.read_page(0, 10, app="web").pruned] == [lost]
        assert j.read_page(lost, 10, app="web").pruned == []


def test_a_file_read_without_the_owner_says_what_the_file_stored(tmp_path: Path) -> None:
    """The marks are stored with the journal: a bare connection given them (the CLI's
    read while tenure is down) names what was pruned as the owner did; without them the
    answer has no ``pruned`` (a reader then says nothing rather than something false)."""
    import sqlite3

    from owner.journalpruned import Pruned
    from owner.journalread import Filters, read_at
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        write(j, WEB0, 200)
        said = j.read_page(0, 10, app="web").to_wire()["pruned"]
        assert said
    conn = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    try:
        page = read_at(conn, 0, 10, None, Filters(app="web"), path="journal.db")
        stored = Pruned()
        stored.load(conn)
        told = read_at(conn, 0, 10, None, Filters(app="web"), pruned=stored, path="journal.db")
    finally:
        conn.close()
    assert page.records and page.pruned is None and "pruned" not in page.to_wire()
    assert told.pruned == said


def test_what_was_pruned_is_said_after_a_reopen(tmp_path: Path) -> None:
    """Was: kept in memory only, so an owner restarted (an upgrade, a reboot) said
    nothing of what was pruned before it, and a reader behind lost lines silently."""
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        web = write(j, WEB0, 100)
        write(j, WEB1, 100, "stderr")
        before = j.read_page(0, 10, app="web").pruned
        assert before[0]["last_id"] == lost_above(web, j, 0, app="web", instance=0)
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        assert j.read_page(0, 10, app="web").pruned == before
        more = write(j, WEB0, 100)   # later pruning marks higher, as before
        assert j.read_page(0, 10, app="web", instance=0).pruned[0]["last_id"] == \
            lost_above(web + more, j, 0, app="web", instance=0)


def test_the_stored_marks_are_bounded_as_those_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from owner import journalpruned
    monkeypatch.setattr(journalpruned, "MAX_PER_APP", 4)
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        for i in range(12):   # a source per instance, each pruned in turn
            write(j, LogSource("s", "web", i, 1), 100)
        kept = {g["instance"] for g in j.read_page(0, 10, app="web").pruned}
        assert 0 < len(kept) <= 4 and 11 in kept
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        rows = conn.execute("SELECT key FROM meta WHERE key LIKE 'pruned/%'").fetchall()
    finally:
        conn.close()
    assert {int(k.split("/")[3]) for (k,) in rows} == kept
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        assert {g["instance"] for g in j.read_page(0, 10, app="web").pruned} == kept


def test_the_extent_summaries_kept_in_memory_are_bounded() -> None:
    """A quiet app between chatty ones starts an extent per append: the summaries must
    not grow with them (the oldest give way, and their rows are read when pruned)."""
    from owner.journalpruned import MAX_SUMMARIES, Pruned
    p = Pruned()
    for i in range(1, 3 * MAX_SUMMARIES):
        p.wrote(("s", "quiet"), i * 5000, (0, "stdout"), i * 5000)
    assert len(p._extents) == MAX_SUMMARIES
    assert ((("s", "quiet"), (3 * MAX_SUMMARIES - 1) * 5000)) in p._extents


def test_a_malformed_stored_mark_is_ignored_not_fatal(tmp_path: Path) -> None:
    """A row that is not a mark (odd digits, an unknown stream, a bad id) is skipped as an
    older owner's answer says less; was: `²` as an instance made the journal unopenable
    (int() refused what isdigit() let through)."""
    import sqlite3
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        write(j, WEB0, 100)
        good = j.read_page(0, 10, app="web").pruned
    conn = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    try:
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
            ("pruned/s/web/²/stdout", 5), ("pruned/s/web/٣/stdout", 5),
            ("pruned/s/web/" + "9" * 5000 + "/stdout", 5), ("pruned/s/web/2/stdin", 5),
            ("pruned/s/web/3/stdout", "x"), ("pruned/s/web/4/stdout", -1),
            ("pruned/s//6/stdout", 5),
            ("pruned/s/web/7", 5)])
    finally:
        conn.close()
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        assert j.read_page(0, 10, app="web").pruned == good


def test_forgetting_a_source_forgets_its_marks_too(tmp_path: Path) -> None:
    """A job template has a source per record, each forgotten when the record is: their
    marks must not pile up in meta with nothing left to say them of."""
    import sqlite3
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        write(j, WEB0, 100)
        write(j, WEB1, 100)
        marks = {g["instance"] for g in j.read_page(0, 10, app="web").pruned}
        assert marks == {0, 1}
        j.forget([("s", "web", 0)])
        assert [g["instance"] for g in j.read_page(0, 10, app="web").pruned] == [1]
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        keys = [k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'pruned/%'")]
    finally:
        conn.close()
    assert keys == ["pruned/s/web/1/stdout"]


def test_forgetting_an_app_forgets_every_instance_and_every_mark(tmp_path: Path) -> None:
    """forget_apps finds the app's instances in its rows and in its marks alone (an
    instance whose every line retention pruned): nothing of the app is left in meta."""
    import sqlite3
    other = LogSource("s", "api", 0, 1)
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 * KIB) as j:
        write(j, WEB0, 100)
        write(j, WEB1, 400)          # instance 0: every line pruned by these
        write(j, other, 3)
        assert {g["instance"] for g in j.read_page(0, 10, app="web").pruned} == {0, 1}
        assert read_all(j, app="web", instance=0) == []     # known by its mark alone
        kept = {app: n for _, app, n, _ in j.apps()}
        assert set(kept) == {"api", "web"}
        assert j.forget_apps([("s", "web")]) > 0
        assert read_all(j, app="web") == [] and j.read_page(0, 10, app="web").pruned == []
        assert [app for _, app, _, _ in j.apps()] == ["api"]
        assert len(read_all(j, app="api")) == 3
        assert j.forget_apps([("s", "web")]) == 0
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        keys = [k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'pruned/%'")]
    finally:
        conn.close()
    assert keys == []
