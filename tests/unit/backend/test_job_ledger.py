"""The job ledger in a real backend.db: an existing database gains the job tables, the
same key gives the same record (also from 20 connections at once), a key reused for
another command is a CONFLICT naming the record, saves are compare-and-set, and
retention prunes only finished records while keeping their keys."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from backend.jobs.ledger import Admission, Ledger, fingerprint, make_spec
from backend.jobs.machine import Exited, Launched, Start, State, Uncertain
from backend.jobs.model import JobTemplate, Retention
from backend.store import SCHEMA, BackendStore
from protocol.durable import open_sqlite
from protocol.errors import Conflict, NotFound, StateCorrupt

T = JobTemplate(name="migrate", stack="s", command=("migrate",), env={"A": "1"}, timeout=5)


def admission(key: str | None = None, args: tuple[str, ...] = (), **kw: object) -> Admission:
    return Admission("s", "migrate", make_spec(T, args), key=key, **kw)  # type: ignore[arg-type]


@pytest.fixture
def ledger(tmp_path: Path):
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        yield Ledger(store)
    finally:
        store.close()


def test_an_existing_backend_db_opens_and_gains_the_job_tables(tmp_path: Path) -> None:
    path = str(tmp_path / "backend.db")
    old = BackendStore(path)             # written before jobs existed
    with old.tx() as db:
        old.set_config(db, "text", "src", "rev-1")
    old.close()
    store = BackendStore(path)
    ledger = Ledger(store)
    assert store.config()["revision"] == "rev-1"                  # type: ignore[index]
    uid = ledger.uid
    rec, dup = ledger.admit(admission("k1"), 10.0)
    assert (rec.id, dup) == (1, False)
    store.close()
    store = BackendStore(path)                                    # opened again: same tables
    try:
        assert Ledger(store).uid == uid and Ledger(store).get(1).key == "k1"
        meta = dict(store.db.execute("SELECT key, value FROM meta"))
        assert meta == {"kind": "tenure-backend", "format_version": "1", "part:jobs": "1",
                        "part:retired": "1", "part:starts": "1", "part:start_waits": "1",
                        "part:holder": "1", "part:stops_to_ask": "1",
                        "part:job_schedule_forms": "1"}
    finally:
        store.close()
    # a release from before jobs (a rollback target) still opens the file
    older = open_sqlite(path, "tenure-backend", 1, SCHEMA, synchronous="FULL", wal=True)
    assert older.execute("SELECT revision FROM config").fetchone() == ("rev-1",)
    older.close()


def test_job_tables_of_another_format_fail_closed(tmp_path: Path) -> None:
    path = str(tmp_path / "backend.db")
    store = BackendStore(path)
    Ledger(store)
    store.db.execute("UPDATE meta SET value = '2' WHERE key = 'part:jobs'")
    with pytest.raises(StateCorrupt) as err:
        Ledger(store)
    assert err.value.data == {"part": "jobs", "format": "2"}
    assert store.db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)   # untouched
    store.close()


def test_same_key_same_record_and_another_submission_is_a_conflict(ledger: Ledger) -> None:
    first, dup = ledger.admit(admission("deploy-42", ("--to", "7")), 1.0)
    assert not dup and first.job.state is State.ADMITTED and first.revision == 1
    again, dup = ledger.admit(admission("deploy-42", ("--to", "7")), 2.0)
    assert dup and again.id == first.id and again.submitted_at == 1.0
    for other in (admission("deploy-42", ("--to", "8")),
                  Admission("s", "migrate", {**make_spec(T), "env": {"A": "2"}},
                            key="deploy-42")):
        with pytest.raises(Conflict) as err:
            ledger.admit(other, 3.0)
        assert err.value.data == {"job": first.id, "key": "deploy-42"}
        assert f"job {first.id}" in err.value.msg
    a, _ = ledger.admit(admission(), 4.0)
    b, _ = ledger.admit(admission(), 5.0)
    assert len({first.id, a.id, b.id}) == 3                       # no key: every one is new
    assert ledger.counts() == {"admitted": 3}


def test_twenty_connections_submitting_one_key_make_one_record(tmp_path: Path) -> None:
    path = str(tmp_path / "backend.db")
    Ledger(BackendStore(path)).store.close()
    barrier = threading.Barrier(20)
    ids: list[int] = []
    errors: list[BaseException] = []

    def submit() -> None:
        store = BackendStore(path)
        store.db.execute("PRAGMA busy_timeout = 10000")
        try:
            ledger = Ledger(store)
            barrier.wait()
            ids.append(ledger.admit(admission("once"), 1.0)[0].id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()
    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ids) == 20 and set(ids) == {1}
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    db.close()


def test_save_is_compare_and_set_with_history(ledger: Ledger) -> None:
    rec, _ = ledger.admit(admission("k"), 1.0)
    stale = ledger.get(rec.id)
    actions = rec.job.handle(Start(ledger.launch_prefix), 2.0, 2.0)
    assert actions[0].launch_key == f"job:{ledger.uid}:{rec.id}:1"
    ledger.save(rec, rec.job, Start(ledger.launch_prefix), State.ADMITTED, 2.0)
    assert rec.revision == 2 and ledger.get(rec.id).job.state is State.STARTING
    stale.job.handle(Start(ledger.launch_prefix), 3.0, 3.0)
    with pytest.raises(Conflict):
        ledger.save(stale, stale.job, "Start", State.ADMITTED, 3.0)
    assert [(h["event"], h["from"], h["to"]) for h in ledger.history(rec.id)] == \
        [("admitted", None, "admitted"), ("Start", "admitted", "starting")]
    with pytest.raises(NotFound):
        ledger.get(999)


def test_a_missed_admission_is_terminal_and_advances_the_schedule(ledger: Ledger) -> None:
    rec, _ = ledger.admit(admission("schedule:s/migrate:X", missed=True, source="schedule",
                                    due_at=50.0, mark=50.0), 60.0)
    assert (rec.job.state, rec.job.ended_at, rec.due_at) == (State.MISSED, 60.0, 50.0)
    assert ledger.schedule_mark("s/migrate") == 50.0
    ledger.set_schedule_mark("s/migrate", 40.0, 61.0)           # never moves back
    assert ledger.schedule_mark("s/migrate") == 50.0
    assert ledger.open_records() == []


def _finish(ledger: Ledger, key: str, at: float, code: int = 0) -> int:
    rec, _ = ledger.admit(admission(key), at)
    for ev in (Start(ledger.launch_prefix), Launched(1, 1), Exited(code, None)):
        before = rec.job.state
        rec.job.handle(ev, at, at)
        ledger.save(rec, rec.job, ev, before, at)
    return rec.id


def test_retention_prunes_finished_records_only_and_keeps_their_keys(ledger: Ledger) -> None:
    old = [_finish(ledger, f"k{i}", at=float(i)) for i in range(5)]
    waiting, _ = ledger.admit(admission("open"), 1.0)
    stuck, _ = ledger.admit(admission("stuck"), 1.0)
    for ev in (Start(ledger.launch_prefix), Uncertain({"why": "test"})):
        before = stuck.job.state
        stuck.job.handle(ev, 1.0, 1.0)
        ledger.save(stuck, stuck.job, ev, before, 1.0)
    pruned = ledger.prune("s", "migrate", Retention(keep=2), now=100.0)
    assert pruned == old[:3]
    left = {r.id for r in ledger.records()}
    assert left == {*old[3:], waiting.id, stuck.id}
    assert ledger.history(old[0]) == []
    assert ledger.prune("s", "migrate", Retention(keep=None, days=1.0), now=86400 + 3.5) \
        == [old[3]]
    assert ledger.prune("s", "migrate", Retention(keep=1, days=None), now=1e9) == []
    with pytest.raises(Conflict) as err:                       # a pruned key stays used
        ledger.admit(admission("k0"), 200.0)
    assert err.value.data == {"job": old[0], "key": "k0", "pruned": True}
    with pytest.raises(Conflict) as err:
        ledger.admit(admission("k0", ("other",)), 200.0)
    assert err.value.data == {"job": old[0], "key": "k0", "pruned": True}


def test_a_pruned_key_reused_with_other_arguments_says_it_was_pruned(ledger: Ledger) -> None:
    """docs/cli.md: ``data.pruned`` when the key's record was pruned, whatever the new
    submission carries; the answer never names the record as if it still existed."""
    job_id = _finish(ledger, "k", at=1.0)
    assert ledger.prune("s", "migrate", Retention(keep=0), now=2.0) == [job_id]
    with pytest.raises(Conflict) as err:
        ledger.admit(admission("k", ("other",)), 3.0)
    assert err.value.data == {"job": job_id, "key": "k", "pruned": True}
    assert "pruned" in err.value.msg and "belongs to" not in err.value.msg
    assert "another command, env or arguments" in err.value.msg
    assert ledger.records() == []                              # nothing was admitted


def test_the_keys_of_pruned_scheduled_runs_are_not_kept(ledger: Ledger) -> None:
    """A schedule never admits a due time behind its mark again, so its pruned records'
    keys are not kept: a row per run grew backend.db by ~6 MiB a month for each
    every-minute schedule. A client's key stays used; rows an older ledger kept for
    schedule keys go at the next prune."""
    ledger.store.db.execute("INSERT INTO job_pruned_keys VALUES "
                            "('schedule:s/old:2026-01-01T00:00:00Z', 1, 'f', 'success', 0)")
    runs = [_finish(ledger, f"schedule:s/migrate:2026-03-02T10:0{i}:00Z", at=float(i))
            for i in range(4)]
    client = _finish(ledger, "k", at=5.0)
    assert ledger.prune("s", "migrate", Retention(keep=0), now=9.0) == [*runs, client]
    kept = [k for (k,) in ledger.store.db.execute("SELECT key FROM job_pruned_keys")]
    assert kept == ["k"]


def test_fingerprint_covers_command_arguments_env_and_cwd_only() -> None:
    spec = make_spec(T, ("a",))
    base = fingerprint("s", "migrate", spec)
    assert fingerprint("s", "migrate", {**spec, "timeout": 99}) == base
    for changed in ({"argv": ["migrate", "b"]}, {"env": {}}, {"cwd": "/x"}):
        assert fingerprint("s", "migrate", {**spec, **changed}) != base
    assert fingerprint("s", "other", spec) != base


def test_admission_over_max_open_is_refused_and_changes_nothing(ledger: Ledger) -> None:
    from protocol.errors import JobQueueFull
    a, _ = ledger.admit(admission("a", max_open=2), 1.0)
    b, _ = ledger.admit(admission("b", max_open=2), 1.0)
    before = (ledger.counts(), [r.id for r in ledger.records()])
    for key in ("c", None):
        with pytest.raises(JobQueueFull) as err:
            ledger.admit(admission(key, max_open=2), 2.0)
        assert err.value.data == {"template": "s/migrate", "max_pending": 2, "open": 2}
        assert "2 records open" in err.value.msg and "max_pending is 2" in err.value.msg
    assert (ledger.counts(), [r.id for r in ledger.records()]) == before
    again, dup = ledger.admit(admission("a", max_open=2), 3.0)   # a repeat is answered
    assert (again.id, dup) == (a.id, True)
    with pytest.raises(Conflict):                                # and checked, as ever
        ledger.admit(admission("a", args=("x",), max_open=2), 3.0)
    missed, _ = ledger.admit(admission("m", missed=True, max_open=2), 3.0)
    assert missed.job.state is State.MISSED                      # never open: recorded
    other = Admission("s", "other", make_spec(T), key="o", max_open=2)
    assert ledger.admit(other, 3.0)[0].job.state is State.ADMITTED   # per template
    for ev in (Start(ledger.launch_prefix), Launched(1, 1), Exited(0, None, 1)):
        before_state = b.job.state
        b.job.handle(ev, 4.0, 4.0)
        ledger.save(b, b.job, ev, before_state, 4.0)
    c, dup = ledger.admit(admission("c", max_open=2), 5.0)      # room again
    assert not dup and c.job.state is State.ADMITTED


@pytest.mark.parametrize("column, value, said", [
    ("spec", '{"argv": ["migrate"]}', "its spec's env is not of its type"),
    ("spec", "[]", "its spec is no map"),
    ("spec", "{", "Expecting property name"),
    ("state", "running", "its state is 'running', its wire's 'admitted'"),
])
def test_a_damaged_open_record_is_left_out_and_the_others_run(
        ledger: Ledger, caplog: pytest.LogCaptureFixture, column: str, value: str,
        said: str) -> None:
    """A spec of another shape made every tick of the runner raise (KeyError), so no
    admitted job after it started; a damaged record is now named and left alone."""
    bad, _ = ledger.admit(admission("bad"), 1.0)
    good, _ = ledger.admit(admission("good"), 2.0)
    ledger.db.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, bad.id))
    with caplog.at_level("ERROR", logger="tenure.jobs"):
        assert [r.id for r in ledger.open_records()] == [good.id]
    assert f"job {bad.id} in backend.db is unreadable: {said}" in caplog.text
    with pytest.raises(StateCorrupt) as err:
        ledger.get(bad.id)
    assert said in err.value.msg and err.value.data == {"job": bad.id}


def test_a_record_whose_state_column_says_finished_is_never_pruned(ledger: Ledger) -> None:
    """The state column picks what retention deletes: a running record whose column
    was damaged to 'succeeded' was pruned, and its key marked used, so it never ran."""
    rec, _ = ledger.admit(admission("k"), 1.0)
    ledger.db.execute("UPDATE jobs SET state = 'succeeded' WHERE id = ?", (rec.id,))
    ledger.db.execute("UPDATE jobs SET wire = '{' WHERE id = ?", (rec.id,))   # no JSON
    assert ledger.prune("s", "migrate", Retention(keep=0), now=2.0) == []
    ledger.db.execute("UPDATE jobs SET wire = ? WHERE id = ?",
                      (json.dumps(rec.job.to_wire()), rec.id))
    assert ledger.prune("s", "migrate", Retention(keep=0), now=2.0) == []
    assert ledger.count(State.SUCCEEDED) == 1 and ledger.count(State.ADMITTED) == 0
    assert ledger.db.execute("SELECT count(*) FROM job_pruned_keys").fetchone() == (0,)


@pytest.mark.parametrize("detail", ["{bad", b"\x00\x01"])
def test_a_damaged_history_row_is_state_corrupt_naming_the_job(ledger: Ledger,
                                                               detail: object) -> None:
    """Was: json.loads of the row's detail raised out of `job show` as INTERNAL
    (JSONDecodeError), a code that says nothing of the damaged state."""
    rec, _ = ledger.admit(admission("k"), 1.0)
    ledger.db.execute("UPDATE job_history SET detail = ? WHERE job = ?", (detail, rec.id))
    with pytest.raises(StateCorrupt) as err:
        ledger.history(rec.id)
    assert f"job {rec.id}" in err.value.msg and "history" in err.value.msg
    assert err.value.data == {"job": rec.id}
