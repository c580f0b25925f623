"""Retention in real SQLite: each store keeps its newest finished records and never
touches what is open (an open operation and its plan, a live or protected launch, an
uncertain activation, the newest grant); the guardian reads its count from the applied
config."""

from __future__ import annotations

import time
from pathlib import Path

from backend.config import parse_config
from backend.store import BackendStore
from guardian.phases import Kind, Phase
from guardian.retention import DEFAULT_ACTIVATIONS, activations_to_keep
from guardian.state import StateStore
from owner.store import LaunchState, OwnerStore
from protocol.grant import Grant


def test_backend_keeps_open_operations_their_plans_and_the_newest(tmp_path: Path) -> None:
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        for i in range(30):
            store.add_plan({"id": f"p{i}", "config_text": "", "config_source": "x",
                            "config_revision": "r", "live_revision": "l",
                            "fingerprint": "f", "changes": [], "kind": "apply"})
            if i % 2 == 0:
                store.create_operation({"id": f"o{i}", "plan": f"p{i}", "kind": "apply",
                                        "stacks": ["s"], "stage": "running",
                                        "request_id": None, "generation": "g"})
                if i != 0:                           # o0 stays open
                    store.advance_operation(f"o{i}", "running", "complete", 1,
                                            outcome="success")
            time.sleep(0.001)
        assert store.prune(operations=3, plans=2) == {"operations": 11, "plans": 25}
        ops = {o["id"] for o in store.operations(limit=100)}
        assert ops == {"o0", "o24", "o26", "o28"}
        plans = {r[0] for r in store.db.execute("SELECT id FROM plans")}
        assert plans == {"p0", "p24", "p26", "p28", "p29"}   # kept ops' plans + newest 2
    finally:
        store.close()


def test_the_owner_never_deletes_a_live_or_protected_launch(tmp_path: Path) -> None:
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        for i in range(10):
            _launch(store, i, {"env": {"SECRET": "x"}}, exited=i < 8)
        assert store.prune_ended(keep=2, protect={"s/a/0/0"}) == 5
        left = {r[0]: r[1] for r in store.db.execute("SELECT launch_key, state FROM launches")}
        assert left == {"s/a/0/0": LaunchState.EXITED, "s/a/0/6": LaunchState.EXITED,
                        "s/a/0/7": LaunchState.EXITED, "s/a/0/8": LaunchState.RUNNING,
                        "s/a/0/9": LaunchState.RUNNING}
    finally:
        store.close()


def test_a_pruned_launch_takes_its_cgroup_record_with_it(tmp_path: Path) -> None:
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        for i in range(4):
            _launch(store, i, {}, exited=True, cgroup=f"/cg/{i}")
        assert store.prune_ended(keep=1, protect={"s/a/0/0"}) == 2
        left = dict(store.db.execute("SELECT launch_key, path FROM launch_cgroups"))
        assert left == {"s/a/0/0": "/cg/0", "s/a/0/3": "/cg/3"}
    finally:
        store.close()


def _launch(store: OwnerStore, i: int, spec: dict, exited: bool, **kw: str) -> None:
    """Launch ``s/a/0/<i>`` (generation i), running with pid 1000 + i; exited if asked."""
    key = f"s/a/0/{i}"
    store.insert_launch(key, {"stack": "s", "app": "a", "instance": 0, "generation": i},
                        spec, 1, "b", **kw)
    store.mark_running(key, 1000 + i, i, 1000 + i, float(i))
    if exited:
        store.mark_exited(key, {"exit_code": 0, "signal": None})


def _activation(state: StateStore, epoch: int, end: Phase) -> str:
    act = state.create_activation(Kind.UPGRADE, "r", "q", epoch - 1)
    state.record_grant(Grant(epoch, act.id, "r", "owner", time.time()), b"sig")
    phase = Phase.CREATED
    for nxt in (Phase.CHECKED, end) if end is not Phase.UNCERTAIN else (
            Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING, Phase.CHECKPOINTED, Phase.FENCED,
            Phase.UNCERTAIN):
        state.advance(act.id, phase, nxt)
        phase = nxt
    time.sleep(0.001)
    return act.id


def test_the_guardian_keeps_uncertain_activations_and_the_newest_grant(tmp_path: Path):
    state = StateStore(str(tmp_path / "state.db"))
    try:
        ids = [_activation(state, e, Phase.UNCERTAIN if e == 2 else Phase.COMPLETE)
               for e in range(1, 9)]
        assert state.prune(keep=3, protect={ids[0]}) == 3
        kept = {a.id for a in state.activations(100)}
        assert kept == {ids[0], ids[1], *ids[5:]}
        assert state.db.execute("SELECT count(*) FROM receipts WHERE activation NOT IN "
                                "(SELECT id FROM activations)").fetchone()[0] == 0
        assert state.last_epoch() == 8
        assert state.prune(keep=0, protect=set()) == 4     # the newest grant stays
        assert state.last_epoch() == 8 and {a.id for a in state.activations(100)} == {ids[1]}
    finally:
        state.close()


def test_the_guardian_reads_its_count_from_the_applied_config(tmp_path: Path) -> None:
    path = str(tmp_path / "backend.db")
    assert activations_to_keep(path) == DEFAULT_ACTIVATIONS
    store = BackendStore(path)
    try:
        text = "[retention]\nactivations = 25\n"
        parse_config(text, "t.toml")
        with store.tx() as db:
            store.set_config(db, text, "t.toml", "r")
        assert activations_to_keep(path) == 25
        with store.tx() as db:
            store.set_config(db, "[retention]\nactivations = 'x'\n", "t.toml", "r")
        assert activations_to_keep(path) == DEFAULT_ACTIVATIONS
        for damaged in (b"[retention]\nactivations = 25\n", 25):   # TypeError escaped
            store.db.execute("UPDATE config SET text = ?", (damaged,))
            assert activations_to_keep(path) == DEFAULT_ACTIVATIONS
    finally:
        store.close()


def test_a_symlinked_backend_db_is_not_read_for_the_count(tmp_path: Path) -> None:
    store = BackendStore(str(tmp_path / "real.db"))
    try:
        text = "[retention]\nactivations = 25\n"
        with store.tx() as db:
            store.set_config(db, text, "t.toml", "r")
    finally:
        store.close()
    (tmp_path / "backend.db").symlink_to(tmp_path / "real.db")
    assert activations_to_keep(str(tmp_path / "real.db")) == 25
    assert activations_to_keep(str(tmp_path / "backend.db")) == DEFAULT_ACTIVATIONS


class _SetBack:
    """A wall clock an operator sets back a day after the first ``after`` readings."""

    def __init__(self, after: int) -> None:
        self.readings, self.after = 0, after

    def __call__(self) -> float:
        self.readings += 1
        return 1_796_000_000.0 + self.readings - (86_400 if self.readings > self.after else 0)


def test_the_newest_records_are_kept_when_the_clock_was_set_back(tmp_path: Path,
                                                               monkeypatch) -> None:
    """'Newest' is the order records were written in, not their wall times: after the
    clock was set back, the activation just finished, the operation just applied and
    the launch just ended sorted as the oldest and were the first deleted."""
    monkeypatch.setattr(time, "sleep", lambda s: None)
    state = StateStore(str(tmp_path / "state.db"))
    backend = BackendStore(str(tmp_path / "backend.db"))
    owner = OwnerStore(str(tmp_path / "owner.db"))
    try:
        monkeypatch.setattr(time, "time", _SetBack(after=60))
        ids = [_activation(state, e, Phase.COMPLETE) for e in range(1, 13)]
        assert state.prune(keep=3, protect=set()) == 9
        assert [a.id for a in state.activations(100)] == ids[:-4:-1]

        monkeypatch.setattr(time, "time", _SetBack(after=20))
        for i in range(8):
            backend.add_plan({"id": f"p{i}", "config_text": "", "config_source": "x",
                              "config_revision": "r", "live_revision": "l",
                              "fingerprint": "f", "changes": [], "kind": "apply"})
            backend.create_operation({"id": f"o{i}", "plan": f"p{i}", "kind": "apply",
                                      "stacks": ["s"], "stage": "running",
                                      "request_id": None, "generation": "g"})
            backend.advance_operation(f"o{i}", "running", "complete", 1, outcome="success")
        backend.add_plan({"id": "p-next", "config_text": "", "config_source": "x",
                          "config_revision": "r", "live_revision": "l",
                          "fingerprint": "f", "changes": [], "kind": "apply"})
        assert backend.prune(operations=2, plans=1) == {"operations": 6, "plans": 6}
        assert [o["id"] for o in backend.operations(limit=100)] == ["o7", "o6"]
        plans = {r[0] for r in backend.db.execute("SELECT id FROM plans")}
        assert plans == {"p6", "p7", "p-next"}   # a plan not applied yet is the newest

        monkeypatch.setattr(time, "time", _SetBack(after=10))
        for i in range(8):
            _launch(owner, i, {}, exited=True)
        assert owner.prune_ended(keep=2, protect=set()) == 6
        left = {r[0] for r in owner.db.execute("SELECT launch_key FROM launches")}
        assert left == {"s/a/0/6", "s/a/0/7"}
    finally:
        state.close()
        backend.close()
        owner.close()
