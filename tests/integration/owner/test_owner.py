"""The owner daemon through its real path: a real process, its socket, SQLite and apps."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from owner.testing import GuardianKey, OwnerProcess, kill_pids
from protocol.client import Client
from protocol.errors import (
    BadRequest,
    BadSignature,
    Conflict,
    LaunchFailed,
    NoGrant,
    OwnerChanged,
    StackFenced,
    StaleEpoch,
)
from protocol.grant import public_key_text


class Live:
    """A running owner with a fenced client: ``call`` passes the current epoch."""

    def __init__(self, owner: OwnerProcess, gk: GuardianKey) -> None:
        self.owner, self.gk = owner, gk
        self.c = owner.client()
        self.epoch = gk.bootstrap(self.c, owner.instance)
        self.n = 0

    def call(self, m: str, p: dict[str, Any] | None = None, **kw: Any) -> Any:
        return self.c.call(m, p or {}, epoch=self.epoch, **kw)

    def launch(self, argv: list[str], stack: str = "s", app: str = "a", **extra: Any) -> Any:
        self.n += 1
        p = {"launch_key": f"k{self.n}", "stack": stack, "app": app, "instance": self.n,
             "generation": 1, "argv": argv, "env": {"PATH": os.environ["PATH"]},
             "stop": {"signal": "TERM", "timeout": 5, "kill_after": 5}, **extra}
        return self.call("launch", p)

    def events(self, after: int = 0) -> list[dict[str, Any]]:
        return self.c.call("observations.read", {"after": after, "limit": 10000})["events"]

    def wait_event(self, pred: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if pred(e):
                    return e
            time.sleep(0.02)
        raise AssertionError("event not seen")


@pytest.fixture
def live(owner: OwnerProcess) -> Iterator[Live]:
    lv = Live(owner, GuardianKey())
    yield lv
    lv.c.close()


def test_bootstrap_pin_then_epoch_one(owner):
    gk = GuardianKey()
    with owner.client() as c:
        with pytest.raises(NoGrant):
            c.call("launch", {"launch_key": "x", "stack": "s", "app": "a", "instance": 0,
                              "generation": 1, "argv": ["true"]}, epoch=1)
        with pytest.raises(NoGrant, match="pin"):
            c.call("fence", {"grant": gk.grant(1, owner.instance)})
        assert gk.bootstrap(c, owner.instance) == 1
        assert c.call("status")["epoch"] == 1
        other = GuardianKey()
        with pytest.raises(Conflict):
            c.call("guardian.pin", {"public_key": public_key_text(other.key.public_key())})
        with pytest.raises(BadSignature):
            c.call("fence", {"grant": gk.grant(2, owner.instance, key=other.key)})
        with pytest.raises(StaleEpoch) as e:
            c.call("fence", {"grant": gk.grant(1, owner.instance)})
        assert e.value.data == {"current": 1}
        with pytest.raises(OwnerChanged):
            c.call("fence", {"grant": gk.grant(2, "another-instance")})
        assert c.call("status")["epoch"] == 1
    assert (owner.paths.dir / "guardian.pub").stat().st_mode & 0o777 == 0o600


def test_fifty_launches_kill_one_gives_exit_event_and_inventory(live):
    pids = [live.launch(["sleep", "1000"])["pid"] for _ in range(50)]
    assert len(set(pids)) == 50
    inv = live.c.call("inventory")["launches"]
    assert sorted(r["pid"] for r in inv) == sorted(pids)
    assert all(r["start_ticks"] > 0 and r["state"] == "running" for r in inv)
    os.kill(pids[7], signal.SIGKILL)
    ev = live.wait_event(lambda e: e["kind"] == "exit")
    assert ev["pid"] == pids[7] and ev["signal"] == 9 and ev["exit_code"] is None
    inv = live.c.call("inventory")["launches"]
    assert len(inv) == 49 and pids[7] not in {r["pid"] for r in inv}


def test_an_exit_says_whether_a_stop_caused_it_and_inspect_keeps_the_ended_row(live):
    killed, stopped = live.launch(["sleep", "1000"]), live.launch(["sleep", "1000"])
    os.kill(killed["pid"], signal.SIGKILL)
    live.call("stop", {"launch_key": stopped["launch_key"]})
    for r, sig, asked in ((killed, 9, False), (stopped, 15, True)):
        ev = live.wait_event(lambda e, r=r: e["kind"] == "exit" and e["pid"] == r["pid"])
        assert (ev["signal"], ev["stopped"]) == (sig, asked), ev
        row = live.c.call("inspect", {"launch_key": r["launch_key"]})
        assert (row["state"], row["pid"], row["usage"]) == ("exited", r["pid"], None), row
        assert row["exit"] == {"exit_code": None, "signal": sig, "core_dumped": False,
                               "stopped": asked}
        assert row["ended_at"] >= row["started_at"]


def test_repeated_launch_key_starts_nothing_new(live):
    first = live.launch(["sleep", "1000"])
    p = {"launch_key": first["launch_key"], "stack": "s", "app": "a", "instance": 1,
         "generation": 1, "argv": ["sleep", "999"]}
    again = live.call("launch", p)
    assert again["pid"] == first["pid"] and again["start_ticks"] == first["start_ticks"]
    owner_kids = psutil.Process(live.owner.proc.pid).children()
    assert [k.pid for k in owner_kids] == [first["pid"]]


def test_failed_launch_is_reported_and_the_same_on_retry(live):
    with pytest.raises(LaunchFailed):
        live.launch(["/nonexistent/prog"])
    p = {"launch_key": "k1", "stack": "s", "app": "a", "instance": 1, "generation": 1,
         "argv": ["true"]}
    with pytest.raises(LaunchFailed):
        live.call("launch", p)
    assert live.c.call("inventory")["launches"] == []


def test_stale_epoch_is_refused_for_every_mutation(live):
    pid = live.launch(["sleep", "1000"])["pid"]
    old = live.epoch
    live.epoch = live.gk.fence(live.c, live.owner.instance)
    assert live.epoch == old + 1
    for m, p in [("launch", {"launch_key": "z", "stack": "s", "app": "a", "instance": 0,
                             "generation": 1, "argv": ["true"]}),
                 ("stop", {"launch_key": "k1"}), ("signal", {"launch_key": "k1",
                                                              "signal": "TERM"}),
                 ("stack.set_intent", {"stack": "s", "intent": "stopped",
                                       "expected_revision": 0}),
                 ("observations.ack", {"cursor": 1}), ("shutdown", {})]:
        with pytest.raises(StaleEpoch) as e:
            live.c.call(m, p, epoch=old)
        assert e.value.data == {"current": live.epoch}
    assert psutil.pid_exists(pid)
    assert live.c.call("stack.intents")["intents"] == {}


def test_fenced_stack_refuses_launches_and_intents_survive_restart(live, owner):
    rev = live.call("stack.set_intent", {"stack": "web", "intent": "stopped",
                                         "expected_revision": 0})["revision"]
    with pytest.raises(Conflict):
        live.call("stack.set_intent", {"stack": "web", "intent": "running",
                                       "expected_revision": 0})
    with pytest.raises(StackFenced) as e:
        live.launch(["sleep", "1000"], stack="web")
    assert e.value.data["revision"] == rev
    assert live.launch(["sleep", "1000"], stack="web", intent_revision=rev)["pid"] > 0
    live.c.close()
    assert owner.stop() == 0
    owner.start()
    with owner.client() as c:
        assert c.call("stack.intents")["intents"]["web"]["intent"] == "stopped"
        assert c.call("inventory")["launches"] == []  # a clean stop stopped everything


def test_term_ignoring_app_is_escalated_and_its_group_emptied(live):
    script = "trap '' TERM; sleep 1000 & echo $! ; wait"
    r = live.launch(["sh", "-c", script])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(psutil.Process(r["pid"]).children()) < 1:
        time.sleep(0.02)
    grandchild = psutil.Process(r["pid"]).children()[0].pid
    res = live.call("stop", {"launch_key": r["launch_key"],
                             "policy": {"signal": "TERM", "timeout": 0.3, "kill_after": 5}})
    assert res["outcome"] == "stopped" and res["escalated"] is True
    assert not psutil.pid_exists(grandchild) or \
        psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE


def test_logs_every_line_in_order_and_app_runs_without_readers(live):
    n = 200_000
    prog = f"import sys\nw = sys.stdout.write\nfor i in range({n}): w(f'line {{i}}\\n')\n"
    r = live.launch([os.environ.get("PYTHON", "python3"), "-c", prog])
    live.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == r["launch_key"],
                    timeout=60)
    got: list[bytes] = []
    after = 0
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        recs = live.c.call("logs.read", {"after": after, "limit": 10000, "app": "a"})["records"]
        if not recs:
            time.sleep(0.05)
            continue
        got += [x["data"] for x in recs]
        after = recs[-1]["id"]
    assert got == [f"line {i}".encode() for i in range(n)]


def test_binary_partial_and_huge_lines(live):
    prog = ("import sys,os; b=sys.stdout.buffer; b.write(b'\\x00\\xff bin\\n'); "
            "b.write(b'x'*(1<<20)+b'\\n'); b.write(b'tail-no-newline'); b.flush()")
    r = live.launch([os.environ.get("PYTHON", "python3"), "-c", prog])
    live.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == r["launch_key"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        recs, after, more = [], 0, True
        while more:  # pages of about 1 MiB
            page = live.c.call("logs.read", {"after": after, "limit": 10000})
            recs, after, more = recs + page["records"], page["next"], page["more"]
        if recs and recs[-1]["data"] == b"tail-no-newline":
            break
        time.sleep(0.05)
    assert recs[0]["data"] == b"\x00\xff bin"
    huge = b"".join(x["data"] for x in recs[1:-1])
    assert huge == b"x" * (1 << 20) and all(len(x["data"]) <= 16384 for x in recs[1:-1])
    assert recs[-1]["flags"] & 2  # partial: no newline


def test_a_long_utf8_line_is_stored_in_records_of_whole_characters(live):
    """Was: cut every 16,384 bytes, inside a 3-byte character: each record decoded with
    U+FFFD at the cut."""
    prog = "import sys; sys.stdout.write('\u20ac' * 20000 + '\\n')"
    r = live.launch([os.environ.get("PYTHON", "python3"), "-c", prog])
    live.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == r["launch_key"])
    deadline = time.monotonic() + 10
    recs: list[dict] = []
    while time.monotonic() < deadline and sum(len(x["data"]) for x in recs) < 60000:
        recs = live.c.call("logs.read", {"after": 0, "limit": 100})["records"]
        time.sleep(0.05)
    assert [len(x["data"]) for x in recs] == [16383, 16383, 16383, 10851]
    assert "".join(x["data"].decode() for x in recs) == "\u20ac" * 20000


def test_systemd_notify_from_a_child_shell_is_attributed(live):
    r = live.launch(["sh", "-c", "systemd-notify --ready --status=warming; sleep 1000"])
    ev = live.wait_event(lambda e: e["kind"] == "notify" and "READY" in e["fields"])
    assert ev["launch_key"] == r["launch_key"] and ev["fields"]["STATUS"] == "warming"


def test_orphaned_grandchild_is_reaped(live):
    r = live.launch(["sh", "-c", "(sleep 0.2 &); sleep 1000"])
    time.sleep(0.6)
    zombies = [p for p in psutil.Process(live.owner.proc.pid).children(recursive=True)
               if p.status() == psutil.STATUS_ZOMBIE]
    assert zombies == []
    assert [p.pid for p in psutil.Process(live.owner.proc.pid).children()] == [r["pid"]]


def test_events_are_pushed_to_subscribers(live):
    sub = live.owner.client()
    backlog = sub.call("observations.subscribe", {"after": 0})
    r = live.launch(["sleep", "1000"])
    got = [e for e in sub.events(timeout=1.0) if e.e["kind"] == "launched"]
    assert got and got[-1].e["launch_key"] == r["launch_key"]
    assert got[-1].cursor > backlog["cursor"]
    sub.close()


def test_sigkill_owner_needs_reconcile_once(owner):
    lv = Live(owner, GuardianKey())
    pids = [lv.launch(["sleep", "1000"])["pid"] for _ in range(3)]
    lv.c.close()
    assert owner.stop(signal.SIGKILL) == -9
    refused = owner.run_exit("serve")
    assert refused.returncode == 3 and "reconcile" in refused.stderr
    alive = owner.run_exit("reconcile", "--json")
    assert alive.returncode == 4 and "leader alive" in alive.stdout
    kill_pids(pids)
    for pid in pids:  # they were re-parented away from us; wait until they are gone
        deadline = time.monotonic() + 5
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    ok = owner.run_exit("reconcile")
    assert ok.returncode == 0 and "3 launches proven gone" in ok.stdout
    owner.start()  # the acknowledgement is consumed
    with owner.client() as c:
        assert c.call("inventory")["launches"] == []
    assert owner.stop(signal.SIGKILL) == -9
    assert owner.run_exit("serve").returncode == 3  # one use only
    assert owner.run_exit("reconcile").returncode == 0
    owner.start()


def test_clean_shutdown_needs_no_reconcile_and_stops_apps(owner):
    lv = Live(owner, GuardianKey())
    pid = lv.launch(["sleep", "1000"])["pid"]
    lv.call("shutdown")
    lv.c.close()
    assert owner.proc.wait(30) == 0
    owner.proc.stdout.close()
    assert not psutil.pid_exists(pid)
    receipt = (owner.paths.dir / "owner-receipt.json").read_text()
    assert '"state": "clean"' in receipt
    assert not os.path.exists(owner.paths.sock)
    owner.start()


def test_a_second_owner_on_the_same_home_is_refused(owner):
    second = owner.run_exit("serve")
    assert second.returncode == 5
    assert owner.run_exit("reconcile").returncode == 5
    with owner.client() as c:
        assert c.call("status")["owner"]["instance"] == owner.instance


def test_peer_checks_are_kept_when_reconnecting_to_a_restarted_owner(owner):
    c = Client(owner.paths.sock)
    c.call("status")
    owner.stop()
    owner.start()
    with pytest.raises(OwnerChanged):
        c.call("status")
    c.close()


def test_logs_forget_deletes_finished_sources_only_with_the_epoch(live, owner):
    """logs.forget: admin with the current epoch, refuses (changing nothing) a source
    that still has a process, deletes every line of the others, and again finds none."""
    done = live.launch(["sh", "-c", "echo one; echo two"])
    running = live.launch(["sh", "-c", "echo up; exec sleep 30"])
    for r in (done, running):
        key = r["launch_key"]
        live.wait_event(lambda e, k=key: e["kind"] == "launched" and e["launch_key"] == k)
    live.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == done["launch_key"])

    def lines(instance: int) -> list[bytes]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            recs = live.c.call("logs.read", {"app": "a", "instance": instance})["records"]
            if recs:
                return [x["data"] for x in recs]
            time.sleep(0.05)
        return []
    assert lines(done["instance"]) == [b"one", b"two"]
    assert lines(running["instance"]) == [b"up"]
    src = {"stack": "s", "app": "a", "instance": done["instance"]}
    live_src = {"stack": "s", "app": "a", "instance": running["instance"]}
    with pytest.raises(StaleEpoch):
        live.c.call("logs.forget", {"sources": [src]}, epoch=live.epoch + 1)
    with pytest.raises(Conflict):
        live.call("logs.forget", {"sources": [src, live_src]})
    assert lines(done["instance"]) == [b"one", b"two"]          # nothing went
    for bad in ([], [{"stack": "s", "app": "a"}], [{**src, "instance": -1}],
                [{**src, "extra": 1}], [{**src, "app": "a/b"}]):
        with pytest.raises(BadRequest):
            live.call("logs.forget", {"sources": bad})
    assert live.call("logs.forget", {"sources": [src, src]}) == {"sources": 1, "deleted": 2}
    assert live.c.call("logs.read", {"app": "a", "instance": done["instance"]})[
        "records"] == []
    assert live.call("logs.forget", {"sources": [src]})["deleted"] == 0    # idempotent
    assert lines(running["instance"]) == [b"up"]
    live.call("stop", {"launch_key": running["launch_key"]})


def test_logs_apps_and_forget_apps_take_whole_apps_only_with_the_epoch(live, owner):
    """logs.apps lists each app with lines, its bytes and newest line; logs.forget_apps
    (admin, current epoch) refuses an app with a process (changing nothing), deletes
    every line of every instance of the others, and then finds none."""
    before = time.time()
    done = [live.launch(["sh", "-c", f"echo {n}"], app="gone") for n in range(3)]
    running = live.launch(["sh", "-c", "echo up; exec sleep 30"], app="kept")
    for r in done:
        live.wait_event(lambda e, k=r["launch_key"]: e["kind"] == "exit"
                        and e["launch_key"] == k)

    def listed() -> dict[str, dict]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            apps = {a["app"]: a for a in live.c.call("logs.apps")["apps"]}
            if set(apps) == {"gone", "kept"}:
                return apps
            time.sleep(0.05)
        raise AssertionError(f"logs.apps says {apps}")
    apps = listed()
    assert apps["gone"]["stack"] == "s" and apps["gone"]["bytes"] > 3
    first = live.c.call("logs.apps", {"limit": 1})
    assert [a["app"] for a in first["apps"]] == ["gone"] and first["more"] is True
    rest = live.c.call("logs.apps", {"after_stack": "s", "after_app": "gone"})
    assert [a["app"] for a in rest["apps"]] == ["kept"] and rest["more"] is False
    for bad in ({"after_stack": "s"}, {"limit": 0}, {"limit": 2001}):
        with pytest.raises(BadRequest):
            live.c.call("logs.apps", bad)
    assert before <= apps["gone"]["last_at"] <= time.time()
    gone, kept = {"stack": "s", "app": "gone"}, {"stack": "s", "app": "kept"}
    with pytest.raises(StaleEpoch):
        live.c.call("logs.forget_apps", {"apps": [gone]}, epoch=live.epoch + 1)
    with pytest.raises(Conflict):
        live.call("logs.forget_apps", {"apps": [gone, kept]})
    assert set(listed()) == {"gone", "kept"}                      # nothing went
    for bad in ([], [{"stack": "s"}], [{**gone, "instance": 0}], [{**gone, "app": "a/b"}],
                [gone] * 101):
        with pytest.raises(BadRequest):
            live.call("logs.forget_apps", {"apps": bad})
    assert live.call("logs.forget_apps", {"apps": [gone, gone]}) == {"apps": 1, "deleted": 3}
    assert live.c.call("logs.read", {"app": "gone"})["records"] == []
    assert [a["app"] for a in live.c.call("logs.apps")["apps"]] == ["kept"]
    assert live.call("logs.forget_apps", {"apps": [gone]})["deleted"] == 0   # idempotent
    live.call("stop", {"launch_key": running["launch_key"]})


INHERITED = ("import signal\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
             "signal.signal(signal.SIGQUIT, signal.SIG_IGN)\n"
             "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})\n")


def test_apps_start_with_default_signals_whatever_the_owner_inherited(short_home):
    """nohup, a shell's background job or a supervisor may start the owner with signals
    ignored or blocked; its apps must not inherit that (a stop by SIGINT must work)."""
    owner = OwnerProcess(short_home, preload=INHERITED).start()
    try:
        live = Live(owner, GuardianKey())
        try:
            show = "grep -E '^Sig(Ign|Blk):' /proc/self/status; exec sleep 60"
            r = live.launch(["sh", "-c", show], stop={"signal": "INT", "timeout": 5,
                                                       "kill_after": 5})
            deadline = time.monotonic() + 10
            lines: list[bytes] = []
            while len(lines) < 2 and time.monotonic() < deadline:
                recs = live.c.call("logs.read", {"app": "a", "limit": 10})["records"]
                lines = [x["data"] for x in recs]
                time.sleep(0.05)
            masks = dict(line.decode().split(":\t") for line in lines)
            ign, blk = int(masks["SigIgn"], 16), int(masks["SigBlk"], 16)
            for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
                assert not ign & (1 << (sig - 1)), f"{sig.name} ignored in the app"
            assert blk == 0, f"signals blocked in the app: {masks['SigBlk']}"
            stopped = live.call("stop", {"launch_key": r["launch_key"]})
            assert not stopped["escalated"], stopped        # SIGINT stopped it, no SIGKILL
        finally:
            live.c.close()
    finally:
        assert owner.stop() == 0
        assert "reset so that apps start with the defaults" in owner.stderr_path.read_text()
