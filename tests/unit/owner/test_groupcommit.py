"""owner.groupcommit: concurrent writes share one transaction; a write that raises is
undone alone; a commit that fails fails the whole group and writes none of it. And
protocol.durable.transaction, which the group's savepoints rely on."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from owner.groupcommit import GroupCommit
from protocol.durable import transaction


def db(tmp_path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, p INTEGER REFERENCES p (id) "
                 "DEFERRABLE INITIALLY DEFERRED)")
    return conn


def rows(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")]


def insert(conn: sqlite3.Connection, key: str, parent: int | None = None) -> str:
    conn.execute("INSERT INTO t VALUES (?, ?)", (key, parent))
    return key


def test_concurrent_writes_share_one_commit_and_a_failing_one_is_undone_alone(tmp_path):
    conn = db(tmp_path)
    group = GroupCommit(conn)

    async def main() -> list[object]:
        writes = [group.write(lambda k=k: insert(conn, k)) for k in "abcd"]
        writes.insert(2, group.write(lambda: insert(conn, "a")))   # a duplicate key
        return await asyncio.gather(*writes, return_exceptions=True)

    out = asyncio.run(main())
    assert out[:2] == ["a", "b"] and out[3:] == ["c", "d"]
    assert isinstance(out[2], sqlite3.IntegrityError)
    assert rows(conn) == ["a", "b", "c", "d"] and not conn.in_transaction
    assert (group.commits, group.writes) == (1, 4)


def test_a_failed_commit_fails_every_write_of_the_group_and_keeps_none(tmp_path):
    conn = db(tmp_path)
    group = GroupCommit(conn)

    async def main() -> list[object]:
        return await asyncio.gather(group.write(lambda: insert(conn, "a")),
                                    group.write(lambda: insert(conn, "b", parent=9)),
                                    return_exceptions=True)

    out = asyncio.run(main())   # the deferred foreign key fails at COMMIT
    assert all(isinstance(o, sqlite3.IntegrityError) for o in out), out
    assert rows(conn) == [] and not conn.in_transaction and group.commits == 0

    async def after() -> str:    # the connection is usable again
        return await group.write(lambda: insert(conn, "c"))
    assert asyncio.run(after()) == "c" and rows(conn) == ["c"]


def test_a_nested_transaction_is_a_savepoint(tmp_path):
    conn = db(tmp_path)
    with transaction(conn):
        insert(conn, "a")
        with pytest.raises(sqlite3.IntegrityError), transaction(conn):
            insert(conn, "b")
            insert(conn, "a")
        assert conn.in_transaction
    assert rows(conn) == ["a"]
    with pytest.raises(sqlite3.IntegrityError), transaction(conn):
        insert(conn, "z", parent=5)          # fails at COMMIT: rolled back, not left open
    assert rows(conn) == ["a"] and not conn.in_transaction


def test_a_write_nothing_can_join_is_committed_before_write_returns(tmp_path):
    """With ``alone()`` true the write commits at once: no loop turn passes between the
    call and its result (a callback scheduled before it has not run yet), the row is on
    disk, and a failing write raises with nothing left of it."""
    conn = db(tmp_path)
    group = GroupCommit(conn, alone=lambda: True)

    async def main() -> tuple[str, list[str], bool]:
        turns: list[str] = []
        asyncio.get_running_loop().call_soon(turns.append, "turn")
        value = await group.write(lambda: insert(conn, "a"))
        other = sqlite3.connect(tmp_path / "t.db")
        try:
            seen = [r[0] for r in other.execute("SELECT k FROM t")]
        finally:
            other.close()
        with pytest.raises(sqlite3.IntegrityError):
            await group.write(lambda: insert(conn, "a"))
        return value, turns + seen, conn.in_transaction

    assert asyncio.run(main()) == ("a", ["a"], False)
    assert rows(conn) == ["a"] and (group.commits, group.writes) == (1, 1)


def test_writes_still_share_a_commit_while_others_could_join(tmp_path):
    """``alone()`` false (other requests open): the writes wait a turn and share one
    transaction, as without it."""
    conn = db(tmp_path)
    asked: list[bool] = []

    def alone() -> bool:
        asked.append(False)
        return False

    group = GroupCommit(conn, alone=alone)

    async def main() -> list[str]:
        return await asyncio.gather(*(group.write(lambda k=k: insert(conn, k))
                                      for k in "abc"))

    assert asyncio.run(main()) == ["a", "b", "c"]
    assert (group.commits, group.writes) == (1, 3) and asked == [False]
