"""``sockets.update`` on a real owner: a held socket takes a new backlog and mode while
its app runs on, a socket not held is left to its launch, a setting the owner cannot
give fails naming the socket and changes nothing of it, and only the epoch's holder
may ask."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.errors import BadRequest, SocketUnavailable, StaleEpoch

STOP = {"signal": "TERM", "timeout": 5, "kill_after": 5}


def test_a_held_socket_takes_new_settings_while_its_app_runs(short_home: Path) -> None:
    path = short_home / "a.sock"
    sock = {"name": "local", "listen": f"unix:{path}", "mode": 0o600, "backlog": 8}
    owner = OwnerProcess(short_home).start()
    try:
        with owner.client() as c:
            epoch = GuardianKey().bootstrap(c, owner.instance)
            pid = c.call("launch", {
                "launch_key": "k1", "stack": "s", "app": "a", "instance": 0,
                "generation": 1, "argv": ["sleep", "1000"], "sockets": [sock],
                "env": {"PATH": os.environ["PATH"]}, "stop": STOP}, epoch=epoch)["pid"]
            inode = path.stat().st_ino
            wanted = {**sock, "mode": 0o660, "backlog": 32}
            other = {"name": "other", "listen": f"unix:{short_home}/b.sock"}
            params = {"stack": "s", "app": "a", "sockets": [wanted, other]}
            with pytest.raises(StaleEpoch):
                c.call("sockets.update", params)
            assert c.call("sockets.update", params, epoch=epoch) == {
                "updated": [f"s/a/local@unix:{path}"],
                "not_held": [f"s/a/other@unix:{short_home}/b.sock"]}
            assert path.stat().st_mode & 0o777 == 0o660 and path.stat().st_ino == inode
            held = c.call("sockets.list")["sockets"]
            assert [(h["backlog"], h["mode"], h["used_by"]) for h in held] == \
                [(32, 0o660, ["k1"])]
            assert not (short_home / "b.sock").exists()
            assert c.call("inspect", {"launch_key": "k1"})["pid"] == pid

            bad = {**wanted, "mode": 0o644, "user": "no-such-user-of-tenure"}
            with pytest.raises(SocketUnavailable, match="no-such-user-of-tenure"):
                c.call("sockets.update", {**params, "sockets": [bad]}, epoch=epoch)
            assert path.stat().st_mode & 0o777 == 0o660
            assert c.call("sockets.list")["sockets"][0]["backlog"] == 32
            with pytest.raises(BadRequest):
                c.call("sockets.update", {**params, "sockets": [{"name": "x"}]},
                       epoch=epoch)
            c.call("stop", {"launch_key": "k1"}, epoch=epoch)
        assert owner.stop() == 0
    finally:
        owner.stop()


def test_a_socket_whose_key_has_spaces_or_is_long_can_be_closed(short_home: Path) -> None:
    """launch takes a stack named with spaces and a socket name of 255 characters;
    sockets.close refused their key (no spaces, at most 400), so such a socket stayed
    held, its file on disk, until the owner ended."""
    path = short_home / "c.sock"
    sock = {"name": "n" * 255, "listen": f"unix:{path}"}
    owner = OwnerProcess(short_home).start()
    try:
        with owner.client() as c:
            epoch = GuardianKey().bootstrap(c, owner.instance)
            c.call("launch", {
                "launch_key": "k1", "stack": "my stack", "app": "a" * 128, "instance": 0,
                "generation": 1, "argv": ["true"], "sockets": [sock],
                "env": {"PATH": os.environ["PATH"]}, "stop": STOP}, epoch=epoch)
            (held,) = c.call("sockets.list")["sockets"]
            assert " " in held["key"] and len(held["key"]) > 400
            deadline = time.monotonic() + 30   # `true` ends; its launch gives it up
            while c.call("sockets.list")["sockets"][0]["used_by"] and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            c.call("sockets.close", {"key": held["key"]}, epoch=epoch)
            assert c.call("sockets.list")["sockets"] == [] and not path.exists()
    finally:
        owner.stop()
