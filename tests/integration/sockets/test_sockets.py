"""Socket activation through a whole tenure (issue 15): the owner holds each app's
listening sockets and passes them as fds 3.. — gunicorn (no --bind) and an app using
systemd-python find them; they keep their inode and refuse no connection across app
restarts, backend upgrades and a backend crash; a socket removed from the config is closed
once its app stopped; stored fds come back after a restart."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from backend.testing import free_port

HERE = Path(__file__).resolve().parent
APPS = HERE / "socket_apps.py"


def get(port: int, timeout: float = 10.0) -> str:
    """One HTTP/1.0 request on a fresh connection; the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET / HTTP/1.0\r\nHost: t\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n")[0]:
        raise AssertionError(f"bad answer {data[:200]!r}")
    return body.decode()


@dataclass
class Hammer:
    """Requests without pause from one thread until stopped; counts every outcome."""

    port: int
    ok: int = 0
    refused: int = 0
    failed: list[str] = field(default_factory=list)
    pids: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Hammer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.pids.add(get(self.port).split()[0])
                self.ok += 1
            except ConnectionRefusedError:
                self.refused += 1
            except Exception as exc:
                self.failed.append(f"{type(exc).__name__}: {exc}")


def gunicorn_app(port: int) -> str:
    return (f'[stacks.web.apps.gun]\ncommand = ["{sys.executable}", "-m", "gunicorn", '
            f'"--chdir", "{HERE}", "--workers", "1", "--graceful-timeout", "5", '
            f'"socket_apps:app"]\n'
            # Ready once a worker answered: a gunicorn stopped while it boots ignores the
            # SIGTERM in a worker that has not installed its own handlers yet.
            f'ready = {{ kind = "http", url = "http://127.0.0.1:{port}/", timeout = 20 }}\n'
            f'start_limit = {{ burst = 100, interval = 60 }}\n'
            f'[stacks.web.apps.gun.sockets.http]\nlisten = "127.0.0.1:{port}"\n'
            f'backlog = 512\n')


def sd_app(port: int, path: Path) -> str:
    return (f'[stacks.web.apps.sd]\ncommand = ["{sys.executable}", "{APPS}", "sd"]\n'
            f'ready = {{ kind = "notify", timeout = 20 }}\n'
            f'start_limit = {{ burst = 100, interval = 60 }}\n'
            f'[stacks.web.apps.sd.sockets.web]\nlisten = "127.0.0.1:{port}"\n'
            f'[stacks.web.apps.sd.sockets.local]\nlisten = "unix:{path}"\nmode = "0600"\n')


def held(cluster: Any) -> dict[str, dict[str, Any]]:
    with cluster.owner() as c:
        return {s["name"]: s for s in c.call("sockets.list")["sockets"]}


def current_release(cluster: Any) -> str:
    return str(cluster.cli("backend", "status", check=True).out["selector"]["current"])


def users(cluster: Any) -> dict[str, list[str]]:
    """Address -> the launches using the socket the owner holds there."""
    with cluster.owner() as c:
        return {s["listen"]: s["used_by"] for s in c.call("sockets.list")["sockets"]}


def launch_key(cluster: Any, key: str) -> str:
    """The launch key of instance ``key``'s current process."""
    return f"{key}/{cluster.apps()[key]['generation']}"


def certified(cluster: Any) -> None:
    """Until the backend published a recovery certificate (a crash is recovered from it)."""
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a published recovery certificate")


def test_gunicorn_and_systemd_python_apps_serve_from_owner_held_sockets(cluster):
    gport, sport = free_port(), free_port()
    unix = cluster.home / "sd.sock"
    cluster.up(gunicorn_app(gport) + sd_app(sport, unix))
    cluster.wait_ready(2)
    before = held(cluster)
    assert set(before) == {"http", "web", "local"}, before
    assert before["http"]["listen"] == f"127.0.0.1:{gport}"
    assert before["http"]["backlog"] == 512 and before["http"]["queue_limit"] == 512
    assert before["http"]["queued"] == 0 and before["local"]["queued"] is None
    gpid = cluster.apps()["web/gun/0"]["pid"]
    pid, names = get(sport).split()
    assert int(pid) == cluster.apps()["web/sd/0"]["pid"]  # LISTEN_PID was its own pid
    assert names == "web,local"  # LISTEN_FDNAMES, in config order
    with socket.socket(socket.AF_UNIX) as u:
        u.connect(str(unix))
        u.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert b"200 OK" in u.recv(4096)
    assert oct(unix.stat().st_mode & 0o777) == "0o600"
    ins = cluster.cli("inspect", "web/gun", check=True).out["instances"][0]
    assert [(s["listen"], s["inode"]) for s in ins["sockets"]] == \
        [(f"127.0.0.1:{gport}", before["http"]["inode"])]
    assert ins["sockets"][0]["used_by"] == [ins["launch_key"]]
    text = cluster.cli("status").out  # --json: the sockets are in the status answer
    assert {s["name"] for s in text["sockets"]} == {"http", "web", "local"}

    with Hammer(gport) as h:  # gunicorn restarted, then the backend crashes
        cluster.cli("restart", "web/gun", check=True)
        certified(cluster)
        cluster.kill_backend()
        cluster.wait(lambda: cluster.apps()["web/gun/0"]["ready"], 60, "recovery")
        cluster.cli("restart", "web/gun", check=True)
        time.sleep(0.2)
    assert h.refused == 0 and h.failed == [], (h.refused, h.failed[:5])
    assert h.ok > 10 and len(h.pids) >= 2, (h.ok, h.pids)
    assert cluster.apps()["web/gun/0"]["pid"] != gpid
    after = held(cluster)
    assert {k: v["inode"] for k, v in after.items()} == \
        {k: v["inode"] for k, v in before.items()}


def test_no_connection_refused_across_20_restarts_and_5_upgrades(cluster):
    port = free_port()
    cluster.up(sd_app(port, cluster.home / "sd.sock"))
    cluster.wait_ready(1)
    inode = held(cluster)["web"]["inode"]
    release = current_release(cluster)
    t0 = time.monotonic()
    with Hammer(port) as h:
        for i in range(20):
            cluster.cli("restart", "web/sd", check=True)
            if i % 4 == 3:
                act = cluster.cli("backend", "upgrade", release, check=True).out["activation"]
                assert (act["phase"], act["outcome"]) == ("complete", "success"), act
        time.sleep(0.2)
    spent = time.monotonic() - t0
    print(json.dumps({"restarts": 20, "upgrades": 5, "requests": h.ok, "refused": h.refused,
                      "failed": len(h.failed), "seconds": round(spent, 1)}))
    assert h.refused == 0 and h.failed == [], (h.refused, h.failed[:5])
    # every instance served; should one more have, its exits and restarts say why
    assert len(h.pids) == 21, (sorted(h.pids), cluster.cli_text(
        "events", "web/sd", "--kind", "exit", "--kind", "restart", "-n", "100"))
    assert held(cluster)["web"]["inode"] == inode
    assert cluster.apps()["web/sd/0"]["restarts"] == 20


def keeper(port: int | None, store: int) -> str:
    text = (f'[stacks.st.apps.keeper]\ncommand = ["{sys.executable}", "{APPS}", "store"]\n'
            f'ready = {{ kind = "notify", timeout = 20 }}\n')
    if store:
        text += f"fd_store_max = {store}\n"
    if port is not None:
        text += f'[stacks.st.apps.keeper.sockets.extra]\nlisten = "127.0.0.1:{port}"\n'
    return text


def log_lines(cluster: Any) -> list[str]:
    recs = cluster.call("logs", {"stack": "st", "app": "keeper", "limit": 1000})["records"]
    return [r["data"].decode() if isinstance(r["data"], bytes) else r["data"] for r in recs]


def apply(cluster: Any, text: str, name: str) -> None:
    path = cluster.write_config(text, name)
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    res = cluster.cli("apply", plan["id"], "--wait", check=True).out
    assert res["outcome"] == "success", res


def test_fd_store_round_trip_and_a_removed_socket_closes_once_its_app_stopped(cluster):
    port = free_port()
    cluster.up(keeper(port, store=2))
    cluster.wait_ready(1)
    cluster.wait(lambda: any("stored token" in line for line in log_lines(cluster)), 15,
                 "the token stored")
    token = next(line for line in log_lines(cluster) if "stored token" in line).split()[-1]
    with cluster.owner() as c:
        store = c.call("sockets.list")["fd_store"]
    assert store == [{"stack": "st", "app": "keeper", "instance": 0,
                      "fds": [{"name": "token", "kind": "pipe", "inode": store[0]["fds"][0]
                               ["inode"]}]}], store
    ins = cluster.cli("inspect", "st/keeper", check=True).out["instances"][0]
    assert [f["name"] for f in ins["stored_fds"]] == ["token"] and ins["fd_store_max"] == 2

    cluster.cli("restart", "st/keeper", check=True)
    cluster.wait(lambda: f"found token {token}" in " ".join(log_lines(cluster)), 15,
                 "the restarted app reading the stored pipe")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # still held: the kernel completes the handshake into the backlog

    # the socket and the store leave the config: the app restarts without them, and the
    # owner closes both once the old launch has stopped
    apply(cluster, keeper(None, store=0), "nosocket.toml")
    assert held(cluster) == {}
    with cluster.owner() as c:
        assert c.call("sockets.list")["fd_store"] == []
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        raise AssertionError("the removed socket still accepts connections")
    except ConnectionRefusedError:
        pass


def test_a_socket_move_that_fails_still_closes_the_address_the_config_left(cluster):
    """Was: the new address taken between plan and apply, the apply failed after it had
    stopped the app, and the old socket stayed held with no user, its queue filling,
    until a later successful apply or a backend upgrade."""
    old, new = free_port(), free_port()
    moved = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n' \
            '[stacks.s.apps.a.sockets.web]\nlisten = "127.0.0.1:{}"\n'
    cluster.up(moved.format(old))
    cluster.wait_ready(1)
    plan = cluster.cli("plan", "--config", str(cluster.write_config(moved.format(new),
                                                                   "moved.toml")),
                       check=True).out
    with socket.socket() as taker:      # another process takes the new address meanwhile
        taker.bind(("127.0.0.1", new))
        taker.listen()
        res = cluster.cli("apply", plan["id"], "--wait")
        assert res.code != 0 and "Address already in use" in str(res.out), res
        assert [s["listen"] for s in held(cluster).values()] == [], held(cluster)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", old), timeout=5).close()


def test_the_old_address_closes_when_its_last_instance_ends_after_a_failed_move(cluster):
    """Was: a move of a socket's address failed on one instance (start limit), the other
    kept the old socket; killed, it was relaunched on the new address outside any
    operation, and the old socket stayed held with no user: connections to it were
    accepted into its queue and hung instead of being refused."""
    old, new = free_port(), free_port()
    text = ('[stacks.s.apps.a]\ncommand = {}\ninstances = 2\n'
            'ready = {{ kind = "delay", delay = 0.5 }}\n'
            'start_limit = {{ burst = 2, interval = 60 }}\n'
            '[stacks.s.apps.a.sockets.web]\nlisten = "127.0.0.1:{}"\n')
    cluster.up(text.format('["sleep", "100000"]', old))
    cluster.wait_ready(2)
    fails_on_0 = json.dumps(["sh", "-c", 'if [ "$TENURE_INSTANCE" = 0 ]; then exit 3; fi; '
                                         "exec sleep 100000"])
    plan = cluster.cli("plan", "--config", str(cluster.write_config(
        text.format(fails_on_0, new), "moved.toml")), check=True).out
    res = cluster.cli("apply", plan["id"], "--wait")
    assert res.code != 0, res
    assert users(cluster) == {f"127.0.0.1:{old}": [launch_key(cluster, "s/a/1")],
                              f"127.0.0.1:{new}": []}, users(cluster)

    pid = cluster.apps()["s/a/1"]["pid"]
    os.kill(pid, signal.SIGKILL)   # relaunched by its restart policy, on the new address
    cluster.wait(lambda: cluster.apps()["s/a/1"]["ready"] and
                 cluster.apps()["s/a/1"]["pid"] != pid, 30, "s/a/1 relaunched")
    cluster.wait(lambda: f"127.0.0.1:{old}" not in users(cluster), 10,
                 "the old socket closed")
    assert users(cluster) == {f"127.0.0.1:{new}": [launch_key(cluster, "s/a/1")]}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", old), timeout=5).close()


def test_a_changed_backlog_or_mode_applies_to_the_held_socket_and_restarts_nothing(
        cluster, short_home):
    """Was: a changed backlog, mode or owner restarted the app (the plan said `restart`),
    to hand it the same socket with new settings at its launch. Now the owner changes
    the socket it holds, the app keeps its pid and whatever waits on the socket stays
    queued."""
    path, port = short_home / "a.sock", free_port()
    text = ('[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'
            f'[stacks.s.apps.a.sockets.local]\nlisten = "unix:{path}"\nmode = "0600"\n'
            f'[stacks.s.apps.a.sockets.web]\nlisten = "127.0.0.1:{port}"\nbacklog = 8\n')
    cluster.up(text)
    cluster.wait_ready(1)
    pid, inode = cluster.apps()["s/a/0"]["pid"], path.stat().st_ino
    waiting = socket.create_connection(("127.0.0.1", port), timeout=5)   # in the backlog
    try:
        changed = text.replace('"0600"', '"0660"').replace("backlog = 8", "backlog = 64")
        plan = cluster.cli("plan", "--config", str(cluster.write_config(changed, "c.toml")),
                           check=True).out
        assert plan["changes"] == [{"action": "update", "app": "s/a", "reason":
                                    "socket settings changed", "sockets": ["local", "web"]}]
        assert "(socket settings changed) sockets: local, web" in cluster.cli_text(
            "plan", "--config", str(cluster.write_config(changed, "c.toml")))
        res = cluster.cli("apply", plan["id"], "--wait", check=True).out
        assert res["outcome"] == "success", res
        assert cluster.apps()["s/a/0"]["pid"] == pid
        assert path.stat().st_mode & 0o777 == 0o660 and path.stat().st_ino == inode
        now = held(cluster)
        assert (now["web"]["backlog"], now["web"]["queue_limit"], now["web"]["queued"]) == \
            (64, 64, 1)
        assert now["local"]["mode"] == 0o660
        shown = cluster.cli("inspect", "s/a", check=True).out["instances"][0]["sockets"]
        assert {x["name"]: x["mode"] for x in shown} == {"local": 0o660, "web": None}
        assert f"local unix:{path} (mode 0660, inode " in cluster.cli_text("inspect", "s/a")
        assert cluster.cli("plan", "--config", str(cluster.write_config(changed, "c.toml")),
                           check=True).out["changes"] == []
    finally:
        waiting.close()
