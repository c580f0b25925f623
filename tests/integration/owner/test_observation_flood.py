"""An app that floods NOTIFY_SOCKET with long STATUS= messages filled the observation
ring with 16 MiB: the answer to `observations.subscribe`, which the backend asks at every
handoff and reconnect, was over the frame limit (INTERNAL) until the ring turned over.
One launch failure naming a megabyte argv[0] did the same alone. Each event is now cut
to fit, keeping what names it and a notify message's READY=1."""

from __future__ import annotations

import os
import sys
import time

from owner.observations import EVENT_MAX, RING_SIZE
from owner.testing import GuardianKey
from protocol.errors import LaunchFailed

FLOOD = ("import os, socket\n"
         "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
         "a = os.environ['NOTIFY_SOCKET']\n"
         "a = '\\0' + a[1:] if a.startswith('@') else a\n"   # an abstract address
         "m = b'STATUS=' + b'x' * 4000 + b'\\nREADY=1'\n"
         f"for _ in range({RING_SIZE + 100}): s.sendto(m, a)\n")


def test_an_app_flooding_notify_leaves_the_ring_readable_in_one_answer(owner):
    c = owner.client()
    gk = GuardianKey()
    try:
        epoch = gk.bootstrap(c, owner.instance)
        c.call("launch", {"launch_key": "flood", "stack": "s", "app": "a", "instance": 0,
                          "generation": 1, "argv": [sys.executable, "-c", FLOOD],
                          "env": {"PATH": os.environ["PATH"]},
                          "stop": {"signal": "KILL", "timeout": 5}}, epoch=epoch)
        deadline = time.monotonic() + 60
        while c.call("status")["cursor"] < RING_SIZE + 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.call("status")["cursor"] >= RING_SIZE + 100
        try:
            c.call("launch", {"launch_key": "big", "stack": "s", "app": "b", "instance": 0,
                              "generation": 1, "argv": ["/nonexistent/" + "x" * 1_000_000],
                              "env": {}, "stop": {"signal": "KILL", "timeout": 5}},
                   epoch=epoch)
        except LaunchFailed:
            pass
        backlog = c.call("observations.subscribe", {"after": 0, "limit": 10_000})
        events = backlog["events"]
        assert len(events) == RING_SIZE and backlog["gap"], len(events)
        notes = [e for e in events if e["kind"] == "notify"]
        assert len(notes) > RING_SIZE - 10
        assert all(e["fields"]["READY"] == "1" and e["truncated"] for e in notes)
        assert all(e["launch_key"] == "flood" for e in notes)
        failed = [e for e in events if e["kind"] == "launch_failed"]
        assert [(e["launch_key"], e["truncated"]) for e in failed] == [("big", True)]
        assert c.call("observations.read", {"after": 0, "limit": 10_000})["events"] == events
    finally:
        for r in c.call("inventory")["launches"]:
            c.call("stop", {"launch_key": r["launch_key"]}, epoch=epoch)
        c.close()


def test_every_event_fits_its_bound() -> None:
    import msgpack

    from owner.notify import KNOWN_KEYS
    from owner.observations import bounded
    long = "y" * 10_000
    for event in ({"kind": "notify", "launch_key": "k", "pid": 1,
                   "fields": {k: long for k in ("STATUS", "ERRNO", "FDNAME", "BUSERROR",
                                                "EXIT_STATUS", "MAINPID", "READY")}},
                  {"kind": "launch_failed", "launch_key": "k" * 200, "code": "LAUNCH_FAILED",
                   "msg": long, "spawn": {"text": long, "argv": [long] * 100}},
                  {"kind": "exit", "launch_key": "k", "pid": 1, "exit_code": 0},
                  # FDNAME= as the app sent it (up to 4 KiB) named a store event
                  {"kind": "fd_store_remove", "launch_key": "k", "name": long,
                   "removed": 0},
                  # every known key with a value of multibyte characters: READY stays
                  {"kind": "notify", "launch_key": "k", "pid": 1, "fields": {
                      **{k: "\U0001f600" * 16 for k in KNOWN_KEYS}, "READY": "1"}}):
        cut, packed = bounded(event)
        assert len(packed) <= EVENT_MAX and msgpack.unpackb(packed) == cut
        assert cut["kind"] == event["kind"] and cut["launch_key"] == event["launch_key"]
        assert ("truncated" in cut) is (event["kind"] != "exit")
        if event.get("fields", {}).get("READY") == "1":
            assert cut["fields"]["READY"] == "1"
