"""Journal over real SQLite in a temporary directory (no processes, no sleeps)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from owner import journalckpt
from owner.journal import READ_LIMIT_MAX, Journal, LogRecord, LogSource
from owner.journaldb import record_cost
from owner.linesplit import CONTINUED, PARTIAL
from owner.testing import read_all
from protocol.durable import CACHE_KIB
from protocol.errors import BadRequest, ShuttingDown, StateCorrupt, UnsafePath

WEB = LogSource("shop", "web", 0, 1)
WORKER = LogSource("shop", "worker", 2, 3)
OTHER = LogSource("blog", "web", 0, 1)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    yield j
    j.close()


def lines(*items: bytes) -> list[tuple[bytes, int]]:
    return [(d, 0) for d in items]


def test_round_trip_keeps_every_field_and_byte(journal: Journal) -> None:
    blob = b"\x00\xff\xfe bad utf-8 \xc3\x28"
    assert journal.append(WEB, "stdout", [(b"hello", 0), (blob, CONTINUED), (b"", PARTIAL)]) == 3
    assert journal.append(WORKER, "stderr", lines(b"oops")) == 1
    assert journal.flush(timeout=30)
    recs = journal.read(0, 100)
    assert [r.id for r in recs] == [1, 2, 3, 4]
    assert [(r.data, r.flags) for r in recs] == [
        (b"hello", 0), (blob, CONTINUED), (b"", PARTIAL), (b"oops", 0)]
    r = recs[3]
    assert (r.stack, r.app, r.instance, r.generation, r.stream) == ("shop", "worker", 2, 3,
                                                                     "stderr")
    assert isinstance(r.ts, float) and r.ts > 0
    assert journal.last_id() == 4
    assert journal.read(4, 10) == []
    assert [x.id for x in journal.read(1, 2)] == [2, 3]


@pytest.mark.parametrize("count", [1, 2, 3, 31, 33, 255, 256, 257, 300, 513, 1000])
def test_append_split_round_trips_at_every_statement_size(journal: Journal,
                                                          count: int) -> None:
    data: list[bytes | bytearray] = [b"line %d" % i for i in range(count)]
    data[::2] = [bytearray(d) for d in data[::2]]
    flags = [(CONTINUED if i % 3 else PARTIAL) if i % 5 else 0 for i in range(count)]
    assert journal.append_split(WEB, "stdout", data) == count
    assert journal.append_split(WORKER, "stderr", list(data), flags) == count
    assert journal.append(OTHER, "stdout", list(zip(data, flags, strict=True))) == count
    assert journal.flush(timeout=30)
    recs = read_all(journal)
    assert [r.id for r in recs] == list(range(1, 3 * count + 1))
    assert [(r.app, r.stack, r.stream, r.flags, r.data) for r in recs] == [
        *[("web", "shop", "stdout", 0, bytes(d)) for d in data],
        *[("worker", "shop", "stderr", f, bytes(d)) for d, f in zip(data, flags, strict=True)],
        *[("web", "blog", "stdout", f, bytes(d)) for d, f in zip(data, flags, strict=True)]]
    assert all(type(r.data) is bytes for r in recs)
    assert {(r.instance, r.generation) for r in recs[count:2 * count]} == {(2, 3)}
    assert len({r.ts for r in recs[:count]}) == 1


def test_names_with_quotes_are_data_not_sql(journal: Journal) -> None:
    odd = LogSource("it's", "a'); DROP TABLE records; --", 0, 0)
    journal.append(odd, "stdout", lines(b"x"))
    assert journal.flush(timeout=30)
    (rec,) = journal.read(0, 10, stack="it's")
    assert rec.app == odd.app


def test_filters(journal: Journal) -> None:
    for i in range(30):
        journal.append(WEB, "stdout", lines(b"web %d" % i))
        journal.append(WORKER, "stderr", lines(b"worker %d" % i))
        journal.append(OTHER, "stdout", lines(b"other %d" % i))
    assert journal.flush(timeout=30)
    web = read_all(journal, stack="shop", app="web")
    assert [r.data for r in web] == [b"web %d" % i for i in range(30)]
    assert len(read_all(journal, stack="shop")) == 60
    assert len(read_all(journal, app="web")) == 60
    assert len(read_all(journal, stream="stderr")) == 30
    assert len(read_all(journal, instance=2)) == 30
    assert read_all(journal, stack="shop", app="web", stream="stderr") == []
    after = web[10].id
    assert journal.read(after, 5, stack="shop", app="web") == web[11:16]


def test_limit_capped(journal: Journal) -> None:
    journal.append(WEB, "stdout", lines(*[b"%d" % i for i in range(READ_LIMIT_MAX + 5)]))
    assert journal.flush(timeout=30)
    assert len(journal.read(0, 10 * READ_LIMIT_MAX)) == READ_LIMIT_MAX


@pytest.mark.parametrize("args, kwargs", [
    ((-1, 10), {}), (("0", 10), {}), ((True, 10), {}), ((0, 0), {}), ((0, -5), {}),
    ((0, 1.5), {}), ((0, 10), {"stack": 5}), ((0, 10), {"app": ""}),
    ((0, 10), {"instance": -1}), ((0, 10), {"stream": "stdin"}),
])
def test_read_validates_arguments(journal: Journal, args: tuple[object, ...],
                                  kwargs: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        journal.read(*args, **kwargs)  # type: ignore[arg-type]


def test_append_validates_source_and_stream(journal: Journal) -> None:
    with pytest.raises(BadRequest):
        journal.append(("shop", "web", 0, 1), "stdout", lines(b"x"))  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        journal.append(WEB, "stdin", lines(b"x"))
    assert journal.append(WEB, "stdout", []) == 0


@pytest.mark.parametrize("fields", [
    ("", "a", 0, 0), ("s", "a\x00b", 0, 0), ("s", "a", -1, 0), ("s", "a", 0, True),
    ("s", 3, 0, 0), ("s", "\udcff", 0, 0),
])
def test_log_source_validated(fields: tuple[object, ...]) -> None:
    with pytest.raises(BadRequest):
        LogSource(*fields)  # type: ignore[arg-type]


def test_file_is_private_and_reopen_continues_ids(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.append(WEB, "stdout", lines(b"a", b"b"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with Journal(path) as j:
        assert j.last_id() == 2
        j.append(WEB, "stdout", lines(b"c"))
        assert j.flush(timeout=30)
        assert [(r.id, r.data) for r in j.read(0, 10)] == [(1, b"a"), (2, b"b"), (3, b"c")]
        assert (sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal")


def test_retention_prunes_oldest_of_one_app_only(tmp_path: Path) -> None:
    limit = 64 * 1024
    with Journal(tmp_path / "journal.db", retention_bytes_per_app=limit) as j:
        j.append(OTHER, "stdout", lines(b"keep me"))
        for i in range(200):
            j.append(WEB, "stdout", lines(b"%05d" % i + b"." * 995))  # 1000 bytes each
        assert j.flush(timeout=30)
        web = read_all(j, stack="shop", app="web")
        stored = sum(len(r.data) for r in web)
        assert limit - 4 * 1000 <= stored <= limit
        assert [r.data[:5] for r in web] == [b"%05d" % i for i in range(200 - len(web), 200)]
        assert [r.data for r in read_all(j, stack="blog")] == [b"keep me"]
        last = j.last_id()
        assert last == 201
        j.append(WEB, "stdout", lines(b"after pruning"))
        assert j.flush(timeout=30)
        assert j.read(last, 10)[0].id == last + 1


def test_ids_never_reused_when_newest_rows_are_pruned(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=100) as j:
        j.append(WEB, "stdout", lines(b"x" * 150))  # larger than the limit: pruned at once
        assert j.flush(timeout=30)
        assert j.read(0, 10) == []
        assert j.last_id() == 1
    with Journal(path, retention_bytes_per_app=100) as j:
        j.append(WEB, "stdout", lines(b"y"))
        assert j.flush(timeout=30)
        assert [(r.id, r.data) for r in j.read(0, 10)] == [(2, b"y")]


def test_overflow_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    gate = threading.Event()
    entered = threading.Event()

    def slow_writer(rows: int) -> None:
        entered.set()
        gate.wait()

    j = Journal(tmp_path / "journal.db", queue_bytes=2000, before_batch=slow_writer)
    try:
        assert j.append(WEB, "stdout", lines(b"first")) == 1
        assert entered.wait(timeout=30)  # the writer now holds that batch
        accepted = dropped = 0
        for i in range(100):
            n = j.append(WEB if i % 2 else WORKER, "stdout", lines(b"z" * 100, b"y" * 100))
            accepted += n
            dropped += 2 - n
        assert dropped > 0 and accepted > 0
        overflow = j.take_overflow()
        assert sum(overflow.values()) == dropped and set(overflow) == {WEB, WORKER}
        assert j.take_overflow() == {}
        assert j.overflow_total == dropped
        gate.set()
        assert j.flush(timeout=30)
        assert len(read_all(j)) == 1 + accepted
    finally:
        gate.set()
        j.close()


def test_close_is_idempotent_and_later_appends_are_counted(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.db")
    j.append(WEB, "stdout", lines(b"a"))
    j.close()
    j.close()
    assert j.append(WEB, "stdout", lines(b"late")) == 0
    assert j.take_overflow() == {WEB: 1}
    with pytest.raises(ShuttingDown):   # the owner is stopping: a reader waits for the next
        j.read(0, 10)
    with Journal(tmp_path / "journal.db") as again:
        assert [r.data for r in again.read(0, 10)] == [b"a"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unknown_format_version_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.append(WEB, "stdout", lines(b"a"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value=99 WHERE key='format_version'")
    conn.close()
    before = sha(path)
    with pytest.raises(StateCorrupt) as info:
        Journal(path)
    assert info.value.data["format_version"] == 99
    assert sha(path) == before


def test_foreign_database_and_garbage_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    os.chmod(foreign, 0o600)   # private, as the owner's files are: not UNSAFE_PATH
    with pytest.raises(StateCorrupt):
        Journal(foreign)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    os.chmod(garbage, 0o600)
    with pytest.raises(StateCorrupt):
        Journal(garbage)
    assert garbage.read_bytes() == b"not a database at all" * 100


def test_symlinks_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    Journal(real).close()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    with pytest.raises(UnsafePath):
        Journal(link)
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "nowhere.db")
    with pytest.raises(UnsafePath):
        Journal(dangling)
    assert not (tmp_path / "nowhere.db").exists()
    wal = tmp_path / "other.db-wal"
    wal.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePath):
        Journal(tmp_path / "other.db")


def test_symlink_error_names_the_path(tmp_path: Path) -> None:
    link = tmp_path / "journal.db"
    link.symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(UnsafePath) as caught:
        Journal(link)
    assert str(link) in caught.value.msg and "symlink" in caught.value.msg
    wal = tmp_path / "journal.db-wal"
    link.unlink()
    wal.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePath) as caught:
        Journal(link)
    assert str(wal) in caught.value.msg


def test_journal_open_to_others_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """Was: chmod'ed back to 0600 without a word; owner.db is refused (state.md)."""
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.append(WEB, "stdout", lines(b"a"))
    os.chmod(path, 0o644)
    before = path.read_bytes()
    with pytest.raises(UnsafePath) as caught:
        Journal(path)
    assert caught.value.msg.startswith(f"{path} is open to other users (mode 0644)")
    assert caught.value.data == {"path": str(path), "mode": "0644"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file away")
def test_journal_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    Journal(path).close()
    os.chown(path, 65534, -1)
    with pytest.raises(UnsafePath) as caught:
        Journal(path)
    assert f"{path} is owned by uid 65534" in caught.value.msg
    assert path.stat().st_uid == 65534


def test_directory_path_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafePath):
        Journal(tmp_path)
    os.mkdir(tmp_path / "d.db")
    with pytest.raises(UnsafePath):
        Journal(tmp_path / "d.db")


def test_extents_match_rows_after_interleaved_batches_and_pruning(tmp_path: Path) -> None:
    """Regression: an extent closed in the middle of a batch was never saved."""
    gate = threading.Event()
    path = tmp_path / "journal.db"
    j = Journal(path, retention_bytes_per_app=20_000, before_batch=lambda rows: gate.wait())
    try:
        for i in range(600):  # many items per batch while the writer waits at the gate
            src = (WEB, WORKER, OTHER)[i % 3] if i % 50 else WEB
            j.append(src, "stdout", lines(b"%d" % i + b"-" * (i % 97)))
        gate.set()
        assert j.flush(timeout=30)
        everything = read_all(j)
        for src in (WEB, WORKER, OTHER):
            mine = [r for r in everything if (r.stack, r.app) == (src.stack, src.app)]
            assert read_all(j, stack=src.stack, app=src.app) == mine
            assert 0 < sum(len(r.data) for r in mine) <= 20_000
    finally:
        gate.set()
        j.close()
    conn = sqlite3.connect(path)
    try:
        real = dict(((s, a), n + rows * record_cost(s, a)) for s, a, n, rows in conn.execute(
            "SELECT stack, app, SUM(length(data)), count(*) FROM records GROUP BY stack, app"))
        kept = dict(((s, a), n) for s, a, n in conn.execute(
            "SELECT stack, app, SUM(bytes) FROM extents GROUP BY stack, app"))
    finally:
        conn.close()
    assert real == kept


# -- pages bounded in bytes, tails, fairness ---------------------------------------------


def _wire_bytes(recs: list[LogRecord]) -> int:
    """The size of the owner's logs.read answer carrying ``recs``."""
    from protocol.envelope import Response
    from protocol.framing import pack
    return len(pack(Response(1, ok={"records": [r.to_wire() for r in recs],
                                    "last_id": 2**40, "next": 2**40, "more": True}
                             ).to_wire()))


def test_long_lines_come_in_pages_bounded_by_bytes_that_fit_a_frame(journal: Journal) -> None:
    for _ in range(10):
        journal.append(WEB, "stdout", [(b"x" * 500, 0)] * 1000)
    journal.append(WEB, "stdout", [(b"big" * 7000, 0)])  # one record over a tiny budget
    assert journal.flush(timeout=30)
    assert _wire_bytes(journal.read(0, READ_LIMIT_MAX)) > 4 * 1024 * 1024  # the old answer
    seen, after, pages = [], 0, 0
    while True:
        page = journal.read_page(after, READ_LIMIT_MAX, max_bytes=1 << 20)
        assert page.records and _wire_bytes(page.records) <= 1 << 20
        assert sum(r.wire_size for r in page.records) <= 1 << 20
        seen += page.records
        after, pages = page.next, pages + 1
        if not page.more:
            break
    assert [r.id for r in seen] == list(range(1, 10_002)) and pages >= 5
    last = journal.read_page(10_000, 10, max_bytes=1024)
    assert [r.id for r in last.records] == [10_001] and not last.more  # never stalls
    assert last.last_id == 10_001 and last.next == 10_001
    empty = journal.read_page(10_001, 10, max_bytes=1024)
    assert (empty.records, empty.next, empty.more) == ([], 10_001, False)


def test_tail_gives_exactly_the_last_n_matching_records(journal: Journal) -> None:
    for i in range(30):  # interleaved apps: extents span each other's ids
        journal.append(WEB, "stdout", lines(*(b"w%d-%d" % (i, j) for j in range(50))))
        journal.append(OTHER, "stderr", lines(*(b"o%d-%d" % (i, j) for j in range(7))))
        journal.append(WORKER, "stdout", lines(b"k%d" % i))
    assert journal.flush(timeout=30)
    everything = read_all(journal)
    for flt in ({}, {"stack": "shop", "app": "web"}, {"stack": "blog"},
                {"stack": "shop", "stream": "stdout"}, {"app": "worker"}, {"instance": 2}):
        matching = [r.id for r in read_all(journal, **flt)]
        for n in (0, 1, 7, 49, 50, 51, 1000, len(matching), len(matching) + 1):
            page = journal.read_page(0, READ_LIMIT_MAX, tail=n, **flt)
            assert [r.id for r in page.records] == (matching[-n:] if n else []), (flt, n)
    assert journal.read_page(0, 5, tail=3).records == everything[-3:]


def test_a_noisy_app_cannot_make_other_apps_lines_drop(tmp_path: Path) -> None:
    gate = threading.Event()
    entered = threading.Event()

    def slow_writer(rows: int) -> None:
        entered.set()
        gate.wait()

    j = Journal(tmp_path / "journal.db", queue_bytes=64 * 1024, before_batch=slow_writer)
    try:
        j.append(WEB, "stdout", lines(b"first"))
        assert entered.wait(timeout=30)  # the writer is stuck: nothing leaves the queue
        noisy = sum(j.append(WEB, "stdout", lines(*[b"n" * 200] * 10)) for _ in range(100))
        assert j.queued_bytes <= 64 * 1024 and noisy < 1000
        quiet = [j.append(src, "stdout", lines(b"q%d" % i)) for i in range(20)
                 for src in (WORKER, OTHER)]
        assert quiet == [1] * 40  # every quiet line found room: the noisy app paid for it
        assert j.queued_bytes <= 64 * 1024
        dropped = j.dropped_by_app()
        assert set(dropped) == {("shop", "web")} and dropped[("shop", "web")] > 0
        assert sum(j.take_overflow().values()) == dropped[("shop", "web")] == j.overflow_total
        gate.set()
        assert j.flush(timeout=30)
        assert len(read_all(j, app="worker")) == 20 and len(read_all(j, stack="blog")) == 20
        web = read_all(j, stack="shop", app="web")
        assert len(web) == 1 + 1000 - dropped[("shop", "web")]
        assert j.dropped_by_app() == dropped  # cumulative, not reset by take_overflow
    finally:
        gate.set()
        j.close()


def test_an_app_holding_the_most_loses_its_own_lines_not_others(tmp_path: Path) -> None:
    gate = threading.Event()
    j = Journal(tmp_path / "journal.db", queue_bytes=8 * 1024,
                before_batch=lambda rows: gate.wait())
    try:
        j.append(WORKER, "stdout", lines(b"first"))
        j.append(WORKER, "stdout", lines(*[b"w" * 100] * 10))  # worker holds ~1.6 KiB
        got = sum(j.append(WEB, "stdout", lines(b"n" * 100)) for _ in range(200))
        assert 0 < got < 200
        assert set(j.dropped_by_app()) == {("shop", "web")}
    finally:
        gate.set()
        j.close()


def test_every_journal_connection_has_a_bounded_page_cache(journal: Journal) -> None:
    journal.last_id()  # opens the reader connection
    for conn in (journal._tables.conn, journal._reader()):
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB


FRAME = 4096 + 24  # a WAL frame: a page and its header


def small_wal_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journalckpt, "CKPT_FRAMES", 50)
    monkeypatch.setattr(journalckpt, "RESTART_FRAMES", 100)
    monkeypatch.setattr(journalckpt, "CHASE_FRAMES", 200)
    monkeypatch.setattr(journalckpt, "CAP_FRAMES", 400)


def write_batches(j: Journal, batches: int, first: int = 0) -> None:
    """``batches`` commits of 200 lines of 100 bytes (about 8 WAL frames each)."""
    for b in range(first, first + batches):
        assert j.append_split(WEB, "stdout", [b"%099d" % (b * 200 + i) for i in range(200)]) \
            == 200
        assert j.flush(timeout=30)


def wal_high_water(path: Path) -> int:
    """The WAL file only grows: its size is the most frames it ever held."""
    return (path.parent / (path.name + "-wal")).stat().st_size


def test_checkpointer_copies_the_wal_and_keeps_it_short(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    small_wal_limits(monkeypatch)
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 30) as j:
        assert j._tables.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        empty = path.stat().st_size
        write_batches(j, 500)  # about 4000 frames
        assert j._ckpt.wait_idle(timeout=30)
        assert path.stat().st_size > empty + 1000 * 4096  # copied into the database
        assert wal_high_water(path) < 2 * journalckpt.CAP_FRAMES * FRAME
        assert j.checkpoint_failures == 0
        assert len(read_all(j)) == 500 * 200


def test_writer_checkpoints_itself_once_the_checkpointer_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    small_wal_limits(monkeypatch)
    real = journalckpt.checkpoint

    def broken(conn: sqlite3.Connection) -> tuple[int, int, int]:
        if threading.current_thread().name == "journal-checkpointer":
            raise RuntimeError("a defect of the checkpointer")
        return real(conn)

    monkeypatch.setattr(journalckpt, "checkpoint", broken)
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 30) as j:
        write_batches(j, 10)  # enough to ask for a pass
        assert j._ckpt.wait_idle(timeout=30)
        assert j.checkpoint_failures == 1
        assert "journal checkpointer failed" in caplog.text
        write_batches(j, 500, first=10)
        assert wal_high_water(path) < 4 * journalckpt.CKPT_FRAMES * FRAME
        assert len(read_all(j)) == 510 * 200
        assert j._ckpt._thread.is_alive() is False


def test_a_checkpoint_the_storage_refuses_is_tried_again_by_the_checkpointer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk refused one pass: the checkpointer thread ended for the owner's life
    (the writer carried every checkpoint from then on, said nowhere). It says so once,
    and passes go on once the disk takes them."""
    small_wal_limits(monkeypatch)
    real, refusals = journalckpt.checkpoint, [3]

    def full(conn: sqlite3.Connection) -> tuple[int, int, int]:
        if threading.current_thread().name == "journal-checkpointer" and refusals[0] > 0:
            refusals[0] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real(conn)

    monkeypatch.setattr(journalckpt, "checkpoint", full)
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 30) as j:
        write_batches(j, 500)
        assert j._ckpt.wait_idle(timeout=30)
        assert refusals == [0] and j._ckpt._thread.is_alive()
        assert caplog.text.count("journal checkpoint refused") == 1
        assert "journal checkpoints work again" in caplog.text
        assert "checkpointer failed" not in caplog.text
        assert wal_high_water(path) < 2 * journalckpt.CAP_FRAMES * FRAME
        assert len(read_all(j)) == 500 * 200


def test_writer_checkpoints_itself_at_the_cap_when_no_pass_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_wal_limits(monkeypatch)
    monkeypatch.setattr(journalckpt, "CKPT_FRAMES", 1 << 30)  # the checkpointer is never asked
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 30) as j:
        write_batches(j, 500)
        assert wal_high_water(path) < 2 * journalckpt.CAP_FRAMES * FRAME
        assert j.checkpoint_failures == 0


def journal_fds(path: Path) -> list[str]:
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(path)):
                fds.append(fd)
    return fds


def test_close_stops_the_checkpointer_closes_its_connection_and_removes_the_wal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_wal_limits(monkeypatch)
    path = tmp_path / "journal.db"
    j = Journal(path, retention_bytes_per_app=1 << 30)
    write_batches(j, 50)
    assert j._ckpt.wait_idle(timeout=30)
    assert j.forget([("shop", "web", 0)]) == 50 * 200
    thread = j._ckpt._thread
    j.close()
    assert not thread.is_alive()
    assert not any(t.name.startswith("journal-") for t in threading.enumerate())
    assert journal_fds(tmp_path) == []
    assert not (tmp_path / "journal.db-wal").exists()
    with Journal(path) as again:
        assert read_all(again) == []
        assert again.last_id() == 50 * 200
