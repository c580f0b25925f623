"""Identity read from /proc, with the psutil fallback."""

from __future__ import annotations

import os

import psutil
import pytest

from protocol import identity
from protocol.errors import BadRequest
from protocol.identity import Identity, new_identity, start_ticks


def test_own_identity_is_alive_and_fresh_each_time():
    a, b = new_identity(), new_identity()
    assert a.pid == os.getpid() and a.is_alive()
    assert a.instance != b.instance and a.start_ticks == b.start_ticks


def test_start_ticks_matches_psutil_create_time():
    ticks = start_ticks(os.getpid())
    hz = os.sysconf("SC_CLK_TCK")
    assert abs(psutil.boot_time() + ticks / hz - psutil.Process().create_time()) < 1.5


def test_missing_pid_has_no_ticks_and_a_dead_identity():
    assert start_ticks(2**22 + 7) is None
    me = new_identity()
    assert not Identity(me.instance, me.pid, me.start_ticks + 1, me.boot_id).is_alive()
    assert not Identity(me.instance, me.pid, me.start_ticks, "other-boot").is_alive()


def test_boot_id_fallback_when_proc_is_missing(monkeypatch):
    monkeypatch.setattr(identity, "_BOOT_ID_PATH", "/nonexistent/boot_id")
    monkeypatch.setattr(identity, "_fallback_boot_id", None)
    assert identity.boot_id().startswith("boot-")


@pytest.mark.parametrize("obj", [None, {}, {"instance": "x", "pid": 0, "start_ticks": 1,
                                            "boot_id": "b"},
                                 {"instance": "x", "pid": "1", "start_ticks": 1, "boot_id": "b"}])
def test_bad_identity_is_refused(obj):
    with pytest.raises(BadRequest):
        Identity.from_wire(obj)
