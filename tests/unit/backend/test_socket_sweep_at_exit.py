"""A held socket the applied config no longer names is closed when the last process using
it ends, not only at the end of an operation or the start of a generation. Was: an
apply moving a socket's address failed on one instance; the other, still on the old
socket, was later killed and relaunched on the new address, and the old socket stayed
held with nobody serving it (connections queued and hung instead of being refused).
Fake owner that holds sockets as its launches ask; nothing sleeps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from backend.activation import held_key, sweep_due, unnamed
from backend.config import parse_config
from backend.generation import Generation
from backend.instance import Ready, State
from backend.testing import FakeOwner, free_port, run_generation, until
from protocol.errors import Conflict

CAPS = {"sockets": 1, "socketUpdate": 1}
APP = ('[stacks.s.apps.a]\ncommand = ["{cmd}"]\ninstances = 2\n'
       'ready = {{ kind = "notify", timeout = 20 }}\n'
       'start_limit = {{ burst = 2, interval = 60 }}\nbackoff = {{ initial = 0 }}\n')
SOCKET = '[stacks.s.apps.a.sockets.web]\nlisten = "127.0.0.1:{port}"\n'
OLD, NEW = free_port(), free_port()
W1 = APP.format(cmd="old") + SOCKET.format(port=OLD)
W2 = APP.format(cmd="new") + SOCKET.format(port=NEW)
BARE = APP.format(cmd="new")


class SocketOwner(FakeOwner):
    """FakeOwner holding the sockets its launches name (sockets.list, sockets.close)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, dict[str, Any]] = {}
        self.given: dict[str, list[str]] = {}   # launch key -> socket keys

    async def connect(self) -> Any:
        return SimpleNamespace(capabilities=CAPS)

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        keys = []
        for s in p.get("sockets", []):
            key = f"{p['stack']}/{p['app']}/{s['name']}@{s['listen']}"
            self.held.setdefault(key, {"key": key, "stack": p["stack"], "app": p["app"],
                                       "name": s["name"], "listen": s["listen"]})
            keys.append(key)
        self.given[p["launch_key"]] = keys
        return super()._launch(p)

    def users(self, key: str) -> list[str]:
        return sorted(k for k in self.live if key in self.given.get(k, []))

    def _sockets_list(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"sockets": [{**h, "used_by": self.users(k)} for k, h in self.held.items()],
                "fd_store": []}

    def _sockets_close(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.users(p["key"]):
            raise Conflict(f"socket {p['key']} is in use", {"key": p["key"]})
        return {"key": p["key"], "closed": self.held.pop(p["key"], None) is not None}


def _listens(owner: SocketOwner) -> list[str]:
    return sorted(h["listen"] for h in owner.held.values())


async def _up(gen: Generation) -> None:
    gen.sup.owner_capabilities = CAPS
    for key in ("s/a/0", "s/a/1"):
        inst = gen.sup.instances[key]
        await until(lambda: inst.state is State.RUNNING, f"{key} running")   # noqa: B023
        gen.sup.feed(key, Ready())


def test_unnamed_and_sweep_due_are_the_sockets_a_config_left() -> None:
    old = parse_config(W1, "w1.toml").app("s", "a")
    assert old is not None
    moved, bare = parse_config(W2, "w2.toml"), parse_config(BARE, "b.toml")
    gone = parse_config('[stacks.s.apps.b]\ncommand = ["x"]\n', "g.toml")
    assert unnamed(parse_config(W1, "w1.toml"), old) == []
    assert unnamed(moved, old) == [f"s/a/web@127.0.0.1:{OLD}"] == \
        [held_key(old, "web", f"127.0.0.1:{OLD}")]
    assert unnamed(bare, old) == unnamed(gone, old) == [f"s/a/web@127.0.0.1:{OLD}"]
    new = moved.app("s", "a")
    assert new is not None and unnamed(moved, new) == []
    assert sweep_due(moved, old, frozenset())
    assert not sweep_due(moved, new, frozenset())   # its own sockets: all still named
    assert sweep_due(moved, new, frozenset({"s/a"}))   # one left in use by another run
    assert not sweep_due(moved, new, frozenset({"s/b"}))


def test_the_old_address_closes_when_its_last_user_ends_after_a_failed_move(
        tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SocketOwner)
        await _up(gen)
        plan = await gen.api.plan_text(W2, "/w2.toml")
        op = gen.api.admit(plan["id"], None)
        a0, a1 = gen.sup.instances["s/a/0"], gen.sup.instances["s/a/1"]
        while a0.state is not State.FAILED:   # new: it exits 3 until its start limit
            await until(lambda: a0.generation >= 2 and a0.state in (
                State.RUNNING, State.FAILED), "a/0 on the new config")
            if a0.state is State.RUNNING:
                gen.sup.on_observation(owner.exit(a0.launch_key, 3))
        await until(lambda: gen.store.operation(op["id"])["outcome"] is not None,
                    "the apply ended", turns=2000)
        assert gen.store.operation(op["id"])["outcome"] == "failed"
        assert a1.generation == 1 and owner.users(f"s/a/web@127.0.0.1:{OLD}") == \
            [a1.launch_key]   # still on the old address, which stays held for it
        gen.sup.on_observation(owner.exit(a1.launch_key, None, 9))   # killed: relaunched
        await until(lambda: a1.generation == 2 and a1.state is State.RUNNING, "a/1 new")
        await until(lambda: _listens(owner) == [f"127.0.0.1:{NEW}"], "the old one closed")
        assert owner.given[a1.launch_key] == [f"s/a/web@127.0.0.1:{NEW}"]
    run_generation(tmp_path, W1, body, ready=False, owner=SocketOwner())


def test_a_socket_a_former_generations_launch_holds_closes_when_it_ends(
        tmp_path: Path) -> None:
    """This generation's instances run the config's App (as adopted ones do) though
    their processes were given a socket it no longer names: the sweep that left the
    socket in use makes their end sweep again."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SocketOwner)
        await _up(gen)
        gen.config = parse_config(BARE, "bare.toml")
        app = gen.config.app("s", "a")
        assert app is not None
        for key in ("s/a/0", "s/a/1"):
            gen.sup.take_app(key, app)
        await gen.sup.sweep_sockets(gen.config)   # as at a generation's start
        assert _listens(owner) == [f"127.0.0.1:{OLD}"]
        for key in ("s/a/0", "s/a/1"):
            inst = gen.sup.instances[key]
            gen.sup.on_observation(owner.exit(inst.launch_key, None, 9))
            await until(lambda: inst.generation == 2, f"{key} relaunched")  # noqa: B023
        await until(lambda: _listens(owner) == [], "the old one closed")
        assert owner.sent("sockets.close") != []
    run_generation(tmp_path, W1, body, ready=False, owner=SocketOwner())


def test_a_generation_without_an_applied_config_keeps_the_held_sockets(
        tmp_path: Path) -> None:
    """A generation that starts with no config applied (backend.db set aside, a
    recovery) has the empty config. Was: its start-up sweep closed every socket of an
    app not running then, and cleared every fd store, since that config names none. Once
    a config is applied, the sweep closes what it no longer names."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SocketOwner) and gen.store is not None
        await _up(gen)
        for key in ("s/a/0", "s/a/1"):   # stopped: nothing uses the socket now
            gen.sup.on_observation(owner.exit(gen.sup.instances[key].launch_key, 0))
        assert _listens(owner) == [f"127.0.0.1:{OLD}"]
        gen.config = parse_config("", "empty.toml")
        assert gen.store.config() is None
        await gen.sweep_at_start()
        assert _listens(owner) == [f"127.0.0.1:{OLD}"] and owner.sent("sockets.close") == []
        with gen.store.tx() as db:
            gen.store.set_config(db, BARE, "bare.toml", 1)
        gen.config = parse_config(BARE, "bare.toml")
        await gen.sweep_at_start()
        assert _listens(owner) == []
    run_generation(tmp_path, W1.replace("instances = 2", "instances = 2\nrestart = \"never\""),
                   body, ready=False, owner=SocketOwner())
