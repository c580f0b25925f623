"""Why an instance is where it is: the wording of ``reason`` and the records, and the
strict decoding of ``last_error``/``last_exit``/``last_probe`` in the instance wire form
(state written before they existed still loads). Pure: no processes, no clock."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.explain import (
    Check,
    ErrorSource,
    LastError,
    LastExit,
    LastProbe,
    launch_error,
    not_done,
    reason,
    signal_name,
    unanswered,
)
from backend.instance import (
    Exited,
    HealthFailed,
    HealthOk,
    Instance,
    LaunchFailed,
    Outcome,
    Probed,
    Ready,
    ReadyTimeout,
    Start,
    State,
    Stopped,
)
from backend.model import Readiness, ReadyKind
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep, until
from protocol.errors import BadRequest, StackFenced, StorageFailed, TransportLost, UnknownMethod
from protocol.errors import LaunchFailed as LaunchError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_instance import Rig, drive_to, mk_app

SPAWN = {"step": "exec", "path": "/x/y", "errno": 2, "errno_name": "ENOENT",
         "strerror": "No such file or directory", "hint": None,
         "text": "spawn failed: /x/y: No such file or directory"}
REFUSED = LastProbe(Check.READINESS, "tcp 127.0.0.1:8000", "connection refused", 1)


@pytest.mark.parametrize("code,sig,core,text", [
    (3, None, False, "exited 3"),
    (0, None, False, "exited 0"),
    (None, 9, False, "killed by SIGKILL"),
    (None, 11, True, "killed by SIGSEGV (core dumped)"),
    (None, None, False, "exited, status unknown (reaped by someone else)"),
])
def test_exit_wording(code: int | None, sig: int | None, core: bool, text: str) -> None:
    ex = LastExit(code, sig, core, 4)
    assert ex.text == text
    assert ex.view()["signal"] == (None if sig is None else signal_name(sig))


def test_signal_names() -> None:
    assert (signal_name(15), signal_name(200)) == ("SIGTERM", "signal 200")


def test_launch_error_takes_the_owners_words_or_its_message() -> None:
    exc = LaunchError("cannot start '/x/y': No such file or directory (/x/y)",
                      {"argv0": "/x/y", "spawn": SPAWN})
    assert launch_error(exc, 2) == LastError(SPAWN["text"], "LAUNCH_FAILED", "ENOENT",
                                             ErrorSource.OWNER, 2)
    # an owner that predates spawnErrors 1 sends only its message: say so
    old = launch_error(LaunchError("cannot start 'x': No such file or directory (x)",
                                   {"argv0": "x"}), 2)
    assert (old.text, old.errno, old.source) == (
        "launch refused: cannot start 'x': No such file or directory (x)", None,
        ErrorSource.MESSAGE)
    fenced = launch_error(StackFenced("stack 'demo' is stopped\n(intent revision 3)"), 5)
    assert (fenced.text, fenced.code) == (
        "launch refused: stack 'demo' is stopped (intent revision 3)", "STACK_FENCED")
    assert unanswered("TRANSPORT_LOST", 1).text == \
        "launch not answered by the owner (TRANSPORT_LOST)"
    assert unanswered("TRANSPORT_LOST", 1).source is ErrorSource.BACKEND
    # after its retries: unanswered, or the owner's error in its words
    lost = not_done(TransportLost("connection reset"), 3)
    assert (lost.text, lost.code, lost.source) == (
        "launch not answered by the owner (TRANSPORT_LOST)", "TRANSPORT_LOST",
        ErrorSource.BACKEND)
    full = not_done(StorageFailed("s/a/0: the launch could not be recorded "
                                  "(OperationalError: database or disk is full); nothing "
                                  "was started"), 3)
    assert (full.text, full.code, full.source) == (
        "launch failed in the owner: s/a/0: the launch could not be recorded "
        "(OperationalError: database or disk is full); nothing was started",
        "STORAGE_FAILED", ErrorSource.MESSAGE)


def failing_launches(rig: Rig) -> None:
    """Launch failures until the start limit gives up."""
    while rig.inst.state is not State.FAILED:
        if rig.inst.state is State.BACKOFF:
            rig.fire(next(iter(rig.timers)))
        err = LastError(SPAWN["text"], "LAUNCH_FAILED", "ENOENT", ErrorSource.OWNER,
                        rig.inst.generation)
        rig.feed(LaunchFailed("LAUNCH_FAILED", err), 0.1)


def test_reason_of_a_program_that_cannot_start_survives_the_start_limit() -> None:
    r = Rig()
    r.feed(Start())
    failing_launches(r)
    assert r.inst.last_outcome is Outcome.START_LIMIT_HIT
    assert reason(r.inst) == SPAWN["text"] + "; start limit hit (5 starts within 60s)"
    assert r.inst.last_error is not None and r.inst.last_exit is None


WAITING = "waiting for readiness: tcp 127.0.0.1:8000 (ready timeout in "


def test_a_readiness_that_has_said_nothing_yet_is_said_with_its_deadline() -> None:
    """A probe under way that hangs (an exec that never ends) or a READY=1 not sent yet:
    status showed `running`, READY no and nothing more until the ready timeout."""
    import time

    from backend.instance_types import Timer
    r = drive_to(State.RUNNING)
    r.inst.timers[Timer.READY_TIMEOUT] = time.monotonic() + 277.6   # the machine's clock
    assert reason(r.inst) == WAITING + "278s)"
    notify = drive_to(State.RUNNING, mk_app(ready=Readiness(kind=ReadyKind.NOTIFY,
                                                            timeout=15)))
    assert (reason(notify.inst) or "").startswith(
        "waiting for readiness: READY=1 on NOTIFY_SOCKET (ready timeout in ")


def test_reason_follows_the_current_run_only() -> None:
    r = drive_to(State.READY)
    assert reason(r.inst) is None
    r.feed(Exited(None, 11, True), 0.1)              # crashed: backoff says why
    assert (r.inst.state, reason(r.inst)) == (State.BACKOFF, "killed by SIGSEGV (core dumped)")
    r.fire(next(iter(r.timers)))
    assert r.inst.state is State.STARTING and reason(r.inst) is None
    r.launched()                                      # a new run: the old exit is history
    assert r.inst.last_exit is not None
    assert (reason(r.inst) or "").startswith(WAITING), reason(r.inst)   # says what it awaits
    note = LastProbe(Check.READINESS, "tcp 127.0.0.1:8000", "connection refused",
                     r.inst.generation)
    r.feed(Probed(note))
    assert reason(r.inst) == "readiness: tcp 127.0.0.1:8000: connection refused"
    r.feed(Ready())
    assert reason(r.inst) is None                     # it became ready after all


def test_reason_of_a_readiness_timeout_is_the_timeout_then_the_last_probe() -> None:
    """Was the last probe's result alone, `readiness: GET …: connection refused`, when
    the wait ran out on a later probe that hung (never answered): the timeout is what
    ended the start; the last probe that ended is said after it."""
    r = drive_to(State.RUNNING)
    assert (reason(r.inst) or "").startswith(WAITING), reason(r.inst)
    r.fire(next(iter(r.timers)))                      # ready-timeout: restarting
    assert (r.inst.state, reason(r.inst)) == (State.RESTARTING, "not ready within 5s")
    note = LastProbe(Check.READINESS, "tcp 127.0.0.1:8000", "nothing listens on the port",
                     r.inst.generation)
    r.feed(Probed(note))                              # ignored: no longer running
    assert r.inst.last_probe is None
    r2 = drive_to(State.RUNNING)
    r2.feed(Probed(LastProbe(Check.READINESS, "tcp 127.0.0.1:8000",
                             "nothing listens on the port", r2.inst.generation)))
    r2.feed(ReadyTimeout(), 6.0)
    r2.feed(Stopped())
    assert r2.inst.state is State.BACKOFF
    assert reason(r2.inst) == ("not ready within 5s (last probe: tcp 127.0.0.1:8000: "
                               "nothing listens on the port)")


def test_health_failures_show_while_ready_and_after_the_restart() -> None:
    r = drive_to(State.READY)
    note = LastProbe(Check.HEALTH, "GET http://127.0.0.1:8000/h", "status 500",
                     r.inst.generation)
    r.feed(Probed(note))
    assert reason(r.inst) is None                     # no failure counted yet
    r.feed(HealthFailed())
    assert reason(r.inst) == "health: GET http://127.0.0.1:8000/h: status 500"
    r.feed(HealthOk())
    assert reason(r.inst) is None
    for _ in range(3):
        r.feed(HealthFailed())
    r.feed(Stopped())
    assert (r.inst.state, reason(r.inst)) == (
        State.BACKOFF, "health: GET http://127.0.0.1:8000/h: status 500")


def test_records_round_trip_through_the_wire_form() -> None:
    r = drive_to(State.READY)
    g = r.inst.generation
    r.feed(Probed(LastProbe(Check.HEALTH, "tcp 127.0.0.1:8000", "connection refused", g)))
    r.feed(Exited(3, None), 0.1)
    r.inst.last_error = LastError("user alice: no such user", "LAUNCH_FAILED", None,
                                  ErrorSource.OWNER, g)
    wire = r.inst.to_wire()
    back = Instance.from_wire(wire, r.inst.app)
    assert (back.last_error, back.last_exit, back.last_probe) == \
        (r.inst.last_error, r.inst.last_exit, r.inst.last_probe)
    assert back.to_wire() == wire


def test_state_written_before_the_records_existed_still_loads() -> None:
    wire = drive_to(State.BACKOFF).inst.to_wire()
    for key in ("last_error", "last_exit", "last_probe"):
        del wire[key]
    back = Instance.from_wire(wire, mk_app())
    assert (back.last_error, back.last_exit, back.last_probe) == (None, None, None)


GOOD: dict[str, dict[str, Any]] = {
    "last_error": {"text": "x", "code": "LAUNCH_FAILED", "errno": None, "source": "owner",
                   "generation": 1},
    "last_exit": {"exit_code": 3, "signal": None, "core_dumped": False, "generation": 1},
    "last_probe": {"check": "health", "probe": "tcp h:1", "result": "refused",
                   "generation": 1},
}


@pytest.mark.parametrize("name,change", [
    ("last_error", "text"), ("last_error", {"text": ""}), ("last_error", {"source": "me"}),
    ("last_error", {"errno": 2}), ("last_error", {"generation": -1}),
    ("last_error", {"generation": 99}),                 # after the instance's own
    ("last_exit", {"exit_code": True}), ("last_exit", {"signal": 0}),
    ("last_exit", {"exit_code": 1, "signal": 9}), ("last_exit", {"core_dumped": 1}),
    ("last_exit", {"exit_code": 256}), ("last_exit", "generation"),
    ("last_probe", {"check": "liveness"}), ("last_probe", {"result": "x" * 1001}),
    ("last_probe", {"probe": None}), ("last_probe", [1]), ("last_exit", "text"),
    # a list or a map where an enum's value belongs: TypeError (unhashable) before
    ("last_probe", {"check": []}), ("last_error", {"source": {}}),
])
def test_malformed_records_are_refused_naming_the_field(name: str, change: Any) -> None:
    wire = drive_to(State.BACKOFF).inst.to_wire()
    assert wire["generation"] == 1
    if isinstance(change, dict):
        wire[name] = {**GOOD[name], **change}
    elif isinstance(change, str):
        wire[name] = {k: v for k, v in GOOD[name].items() if k != change} \
            if change in GOOD[name] else change
    else:
        wire[name] = change
    with pytest.raises(BadRequest) as e:
        Instance.from_wire(wire, mk_app())
    assert e.value.data["field"] == name
    # the same record well-formed loads, extra keys ignored
    wire[name] = {**GOOD[name], "future": 1}
    assert Instance.from_wire(wire, mk_app()).to_wire()[name] == GOOD[name]


# ---- through the reconciler, against a fake owner -----------------------------------------

GIVE_UP = ('[stacks.s.apps.a]\ncommand = ["/x/y"]\nbackoff = { initial = 0, max = 0 }\n'
           'start_limit = { burst = 2, interval = 60 }\n')


@contextlib.asynccontextmanager
async def give_up_app(owner: FakeOwner) -> AsyncIterator[tuple[Supervisor, Instance]]:
    """GIVE_UP's app started against ``owner``; closed when the block ends."""
    sup = Supervisor(owner, 1, sleep=no_sleep)
    try:
        sup.ensure(parse_config(GIVE_UP, "t").apps()[0], 0, True)
        yield sup, sup.instances["s/a/0"]
    finally:
        await sup.aclose()


async def until_given_up(owner: FakeOwner) -> tuple[Instance, Supervisor]:
    """GIVE_UP's app against ``owner``, run until its start limit gave up (closed)."""
    async with give_up_app(owner) as (sup, inst):
        await until(lambda: inst.state is State.FAILED and not sup._tasks, "given up")
    return inst, sup


class RefusingOwner(FakeOwner):
    """Refuses every launch; ``explains`` as an owner with spawnErrors 1 does, and
    ``notes`` says whether it has logs.note (logNotes 1)."""

    def __init__(self, explains: bool, notes: bool) -> None:
        super().__init__()
        self.explains, self.has_notes = explains, notes

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        data = {"argv0": "/x/y", **({"spawn": SPAWN} if self.explains else {})}
        raise LaunchError("cannot start '/x/y': No such file or directory (/x/y)", data)

    def _logs_note(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.has_notes:
            raise UnknownMethod("logs.note")
        return super()._logs_note(p)


LIMIT = "; start limit hit (2 starts within 60s)"   # said once it gave up


@pytest.mark.parametrize("explains,notes", [(True, True), (False, False)])
def test_the_reconciler_records_why_with_a_new_and_with_an_older_owner(explains: bool,
                                                                        notes: bool) -> None:
    async def main() -> None:
        owner = RefusingOwner(explains, notes)
        inst, sup = await until_given_up(owner)
        assert inst.last_outcome is Outcome.START_LIMIT_HIT
        assert inst.last_error is not None and inst.last_error.generation == 2
        if explains:
            assert (reason(inst), inst.last_error.errno, inst.last_error.source) == (
                SPAWN["text"] + LIMIT, "ENOENT", ErrorSource.OWNER)
            assert [n["text"] for n in owner.notes] == [
                "start limit hit (2 starts within 60s), not restarting: " + SPAWN["text"]]
            assert sup.mutations.owner_notes
        else:   # an older owner: its message, and the field says where it came from
            assert (reason(inst), inst.last_error.errno, inst.last_error.source) == (
                "launch refused: cannot start '/x/y': No such file or directory (/x/y)"
                + LIMIT, None, ErrorSource.MESSAGE)
            assert owner.notes == [] and not sup.mutations.owner_notes
            assert len(owner.sent("logs.note")) == 1   # asked once, then never again
    asyncio.run(main())


class FullOwner(FakeOwner):
    """An owner that cannot record any launch (its disk is full): STORAGE_FAILED."""

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        raise StorageFailed(f"{p['launch_key']}: the launch could not be recorded "
                            "(OperationalError: database or disk is full); nothing was "
                            "started", {"launch_key": p["launch_key"]})


def test_a_launch_the_owner_cannot_record_waits_and_is_explained_in_its_words() -> None:
    """Was 'launch not answered by the owner (INTERNAL)': it was answered. Its full disk
    is not the app's failure: the launch is asked again each second, the instance
    starting with the owner's words, none of its starts spent."""
    async def main() -> None:
        owner = FullOwner()
        async with give_up_app(owner) as (sup, inst):
            await until(lambda: len(owner.sent("launch")) > 20, "asked again and again")
            assert {p["launch_key"] for p in owner.sent("launch")} == {"s/a/0/1"}
            assert inst.state is State.STARTING and inst.restarts == 0
            said = sup.reason("s/a/0") or ""
            assert said.startswith("launch failed in the owner: s/a/0/1"), said
            assert "database or disk is full" in said and said.endswith(
                "; trying again each second")
    asyncio.run(main())


class LeftStartingOwner(FakeOwner):
    """An owner whose first try could not record the launch's failure (a full disk):
    the retry of the same key finds its row still 'starting', with no process."""

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.calls_seen:
            self.calls_seen = True
            raise StorageFailed(f"{p['launch_key']}: the launch failed and that could "
                                "not be recorded", {"launch_key": p["launch_key"]})
        return {"launch_key": p["launch_key"], "state": "starting", "pid": None,
                "start_ticks": None}

    calls_seen = False


def test_a_launch_row_left_starting_is_a_failed_launch_not_a_process() -> None:
    """Was: Launched(None, None), an instance 'running' with no pid the backend could
    watch or stop."""
    async def main() -> None:
        async with give_up_app(LeftStartingOwner()) as (_sup, inst):
            await until(lambda: inst.last_error is not None, "failed")
            assert inst.pid is None and inst.state is not State.RUNNING
            assert inst.last_error.text.startswith(
                "launch refused: s/a/0/1: the owner holds no process for it "
                "(its row says starting)"), inst.last_error
    asyncio.run(main())
