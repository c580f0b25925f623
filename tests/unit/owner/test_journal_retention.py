"""Per-app log budgets (owner.journalretention): an app keeps its own budget instead of
the default, a smaller one prunes at once, budgets survive a reopen (an owner restart)
and a malformed call changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from owner.journal import Journal, LogSource
from owner.journalretention import MIN_RETENTION
from owner.testing import fill_journal, journal_kept
from protocol.errors import BadRequest

MIB = 1 << 20
WEB, DB = LogSource("s", "web", 0, 1), LogSource("s", "db", 0, 1)


def test_an_app_keeps_its_own_budget_and_the_others_the_default(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db", retention_bytes_per_app=2 * MIB) as j:
        j.set_retention({("s", "web"): 4 * MIB})
        fill_journal(j, WEB, 6)
        fill_journal(j, DB, 6)
        assert 4 * MIB - MIB <= journal_kept(j, "web") <= 4 * MIB   # pruned by whole extents
        assert 2 * MIB - MIB // 2 <= journal_kept(j, "db") <= 2 * MIB
        assert j.retention() == (2 * MIB, {("s", "web"): 4 * MIB})


def test_a_smaller_budget_prunes_at_once_and_outlives_a_reopen(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db", retention_bytes_per_app=8 * MIB) as j:
        fill_journal(j, WEB, 6)
        assert journal_kept(j, "web") == 6 * MIB
        j.set_retention({("s", "web"): MIB})   # no write needed: pruned now
        assert MIB // 2 <= journal_kept(j, "web") <= MIB
        last = j.last_id()
    with Journal(tmp_path / "j.db", retention_bytes_per_app=8 * MIB) as j:
        assert j.retention() == (8 * MIB, {("s", "web"): MIB})
        fill_journal(j, WEB, 3)   # the stored budget holds from the first write
        assert journal_kept(j, "web") <= MIB and j.last_id() == last + 3 * 64
        j.set_retention({("s", "web"): 8 * MIB})   # back to the default: none of its own
        assert j.retention()[1] == {}
        fill_journal(j, WEB, 3)
        assert journal_kept(j, "web") > 3 * MIB
    with Journal(tmp_path / "j.db") as j:
        assert j.retention()[1] == {}


def test_an_app_taken_out_of_the_config_keeps_its_budget_until_its_lines_go(
        tmp_path: Path) -> None:
    """Was: an app no longer named fell back to the default at once, and lines of a
    larger budget were pruned to it days before removed_app_logs_days."""
    with Journal(tmp_path / "j.db", retention_bytes_per_app=2 * MIB) as j:
        j.set_retention({("s", "web"): 4 * MIB, ("s", "db"): 3 * MIB})
        fill_journal(j, WEB, 3)
        j.set_retention({}, keep_unnamed=True)   # both taken out: web has lines, db none
        assert journal_kept(j, "web") == 3 * MIB
        assert j.retention()[1] == {("s", "web"): 4 * MIB}
    with Journal(tmp_path / "j.db", retention_bytes_per_app=2 * MIB) as j:
        j.set_retention({}, keep_unnamed=True)   # a new owner, a new backend: it holds
        assert journal_kept(j, "web") == 3 * MIB
        assert j.retention()[1] == {("s", "web"): 4 * MIB}
        j.forget_apps([("s", "web")])
        j.set_retention({}, keep_unnamed=True)   # no lines left: the default
        assert j.retention()[1] == {}


def test_an_app_not_named_has_the_default_unless_the_caller_keeps_it(
        tmp_path: Path) -> None:
    """A backend of an older release names only the apps with a budget of their own and
    means every other to have the default (`log_retention` removed from an app still
    configured): without ``keep_unnamed`` a budget not named is gone, as it was."""
    with Journal(tmp_path / "j.db", retention_bytes_per_app=2 * MIB) as j:
        j.set_retention({("s", "web"): 4 * MIB})
        fill_journal(j, WEB, 3)
        j.set_retention({})
        assert j.retention()[1] == {}
        assert journal_kept(j, "web") <= 2 * MIB


@pytest.mark.parametrize("budgets", [
    {("s", "web"): MIN_RETENTION - 1}, {("s", "web"): True}, {("s", ""): MIB},
    {("s/x", "web"): MIB}, {("s", "web"): 1 << 41}])
def test_a_malformed_budget_changes_nothing(tmp_path: Path, budgets: dict) -> None:
    with Journal(tmp_path / "j.db") as j:
        j.set_retention({("s", "db"): 2 * MIB})
        with pytest.raises(BadRequest):
            j.set_retention(budgets)
        assert j.retention()[1] == {("s", "db"): 2 * MIB}


def test_a_budget_smaller_than_an_extent_cuts_it_instead_of_emptying_the_app(
        tmp_path: Path) -> None:
    """Extents are 1/32 of the budget they were written under (2 MiB for the default
    64 MiB): a 1 MiB budget deleting whole ones would have left nothing."""
    with Journal(tmp_path / "j.db") as j:
        fill_journal(j, WEB, 4)
        j.set_retention({("s", "web"): MIB})
        assert MIB - 16384 <= journal_kept(j, "web") <= MIB
        fill_journal(j, WEB, 2)   # the totals stay true: pruning keeps to the budget
        assert MIB // 2 <= journal_kept(j, "web") <= MIB
    with Journal(tmp_path / "j.db") as j:   # totals rebuilt from the extents
        fill_journal(j, WEB, 1)
        assert MIB // 2 <= journal_kept(j, "web") <= MIB


def test_a_budget_of_short_lines_bounds_the_file_not_only_their_data(tmp_path: Path) -> None:
    """Each record costs the budget its data and what it takes in the file besides
    (owner.journaldb.record_cost): 1 MiB of 1-byte lines (`yes`) kept by their data
    alone took ~40 MiB of journal."""
    path = tmp_path / "j.db"
    with Journal(path, retention_bytes_per_app=MIN_RETENTION) as j:
        for _ in range(3 * MIN_RETENTION // 4096):   # 3 MiB of data in 1-byte lines
            j.append(WEB, "stdout", [(b"y", 0)] * 4096)
        assert j.flush(timeout=60)
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")   # the file as big as what it holds (pruning frees pages)
        count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    finally:
        conn.close()
    assert path.stat().st_size <= 1.5 * MIN_RETENTION, (path.stat().st_size, count)
    assert count >= MIN_RETENTION // 64, count   # and it keeps what fits: ~30k lines
