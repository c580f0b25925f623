"""Sockets and fd_store_max in tenure.toml: parsed, canonical, and refused with the line
(bad address, unix-only keys on TCP, two sockets claiming one address); and which held
sockets and stores a config no longer names."""

from __future__ import annotations

import os
from typing import Any

import pytest

from backend.activation import held_key, launch_sockets, stale
from backend.config import check_new, parse_config
from protocol.errors import ConfigInvalid

BASE = '[stacks.web.apps.api]\ncommand = ["api"]\n'


def test_sockets_parse_in_order_with_defaults_and_reach_the_launch() -> None:
    cfg = parse_config(BASE + 'fd_store_max = 3\n'
                       '[stacks.web.apps.api.sockets.http]\nlisten = "[::1]:8080"\n'
                       '[stacks.web.apps.api.sockets.admin]\nlisten = "unix:/run/a.sock"\n'
                       'mode = "0660"\nowner = "www"\nbacklog = 16\n', "t.toml")
    app = cfg.app("web", "api")
    assert app is not None
    assert [(s.name, s.listen, s.backlog) for s in app.sockets] == \
        [("http", "[::1]:8080", 4096), ("admin", "unix:/run/a.sock", 16)]
    assert launch_sockets(app) == {"fd_store_max": 3, "sockets": [
        {"name": "http", "listen": "[::1]:8080", "backlog": 4096},
        {"name": "admin", "listen": "unix:/run/a.sock", "backlog": 16, "mode": 0o660,
         "user": "www"}]}


def test_a_config_without_sockets_keeps_its_revision_and_digest() -> None:
    plain = parse_config(BASE, "t.toml")
    with_socket = parse_config(BASE + '[stacks.web.apps.api.sockets.http]\n'
                               'listen = "127.0.0.1:1"\n', "t.toml")
    assert plain.revision != with_socket.revision
    a, b = plain.app("web", "api"), with_socket.app("web", "api")
    assert a is not None and b is not None
    assert a.definition_digest() != b.definition_digest()  # a socket change restarts


@pytest.mark.parametrize(("extra", "key", "line", "words"), [
    ('[stacks.web.apps.api.sockets.http]\nlisten = "localhost:80"\n',
     "stacks.web.apps.api.sockets.http.listen", 4, "not an IPv4 address"),
    ('[stacks.web.apps.api.sockets.http]\nbacklog = 5\n',
     "stacks.web.apps.api.sockets.http.listen", 3, "is required"),
    ('[stacks.web.apps.api.sockets.http]\nlisten = "127.0.0.1:80"\nmode = "0600"\n',
     "stacks.web.apps.api.sockets.http.mode", 5, "unix sockets only"),
    ('[stacks.web.apps.api.sockets.http]\nlisten = "127.0.0.1:80"\nbacklog = 0\n',
     "stacks.web.apps.api.sockets.http.backlog", 5, "between 1 and 65535"),
    ('[stacks.web.apps.api.sockets.a]\nlisten = "0.0.0.0:80"\n'
     '[stacks.web.apps.other]\ncommand = ["o"]\n'
     '[stacks.web.apps.other.sockets.b]\nlisten = "127.0.0.1:80"\n',
     "stacks.web.apps.other.sockets.b.listen", 8, "already claimed by web/api"),
    ('[stacks.web.apps.api.sockets.a]\nlisten = "unix:/run/x.sock"\n'
     '[stacks.web.apps.api.sockets.b]\nlisten = "unix:/run/x.sock"\n',
     "stacks.web.apps.api.sockets.b.listen", 6, "already claimed"),
])
def test_bad_sockets_are_reported_with_key_and_line(extra: str, key: str, line: int,
                                                    words: str) -> None:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(BASE + extra, "t.toml")
    data = info.value.data
    assert (data["key"], data["line"]) == (key, line), data
    assert words in data["problem"], data


def test_same_port_on_other_families_or_hosts_is_no_conflict() -> None:
    parse_config(BASE + '[stacks.web.apps.api.sockets.a]\nlisten = "127.0.0.1:80"\n'
                 '[stacks.web.apps.api.sockets.b]\nlisten = "127.0.0.2:80"\n'
                 '[stacks.web.apps.api.sockets.c]\nlisten = "[::]:80"\n', "t.toml")


def test_stale_names_what_the_config_dropped() -> None:
    cfg = parse_config(BASE + 'instances = 2\nfd_store_max = 1\n'
                       '[stacks.web.apps.api.sockets.http]\nlisten = "127.0.0.1:80"\n',
                       "t.toml")
    app = cfg.app("web", "api")
    assert app is not None
    keep = held_key(app, "http", "127.0.0.1:80")
    held = [{"key": keep}, {"key": "web/api/http@127.0.0.1:81"}, {"key": "old/x/y@[::1]:1"}]
    stores = [{"stack": "web", "app": "api", "instance": 1},
              {"stack": "web", "app": "api", "instance": 2},
              {"stack": "gone", "app": "x", "instance": 0}]
    sockets, dropped = stale(cfg, held, stores)
    assert sockets == ["web/api/http@127.0.0.1:81", "old/x/y@[::1]:1"]
    assert set(dropped) == {("web", "api", 2), ("gone", "x", None)}


@pytest.mark.parametrize(("socket_listen", "metrics_listen"), [
    ("127.0.0.1:9100", "127.0.0.1:9100"), ("0.0.0.0:9100", "localhost:9100"),
    ("[::1]:9100", "localhost:9100"), ("[::]:9100", "[0:0::1]:9100")])
def test_the_metrics_listener_and_a_socket_cannot_claim_one_address(
        socket_listen: str, metrics_listen: str) -> None:
    """Was: both accepted; the socket took the port and metrics never served."""
    text = (BASE + f'[stacks.web.apps.api.sockets.http]\nlisten = "{socket_listen}"\n'
            f'[metrics]\nlisten = "{metrics_listen}"\n')
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.toml")
    data = info.value.data
    assert (data["key"], data["line"]) == ("metrics.listen", 6), data
    assert "already claimed by web/api socket 'http'" in data["problem"], data


def test_the_metrics_listener_beside_sockets_on_other_ports_or_hosts() -> None:
    parse_config(BASE + '[stacks.web.apps.api.sockets.http]\nlisten = "127.0.0.1:9100"\n'
                 '[metrics]\nlisten = "127.0.0.2:9100"\n', "t.toml")
    parse_config(BASE + '[stacks.web.apps.api.sockets.http]\nlisten = "127.0.0.1:9101"\n'
                 '[metrics]\nlisten = "localhost:9100"\n', "t.toml")


SOCK = '[stacks.web.apps.api.sockets.http]\nlisten = "0.0.0.0:8080"\n'


@pytest.mark.parametrize(("app", "key", "words"), [
    # the held socket listens before the app runs: readiness passed at once, and a
    # rolling restart to a broken build marked every instance ready
    ('ready = { kind = "tcp", port = 8080 }\n', "stacks.web.apps.api.ready.port",
     "8080 is the port of the app's socket 'http' (0.0.0.0:8080), which the owner holds"),
    ('instances = 2\nready = { kind = "tcp", port = 8079, port_step = 1 }\n',
     "stacks.web.apps.api.ready.port", "8080 is the port of the app's socket 'http'"),
    ('health = { kind = "tcp", port = 8080, host = "localhost" }\n',
     "stacks.web.apps.api.health.port", "passes whatever the app does"),
    # a tcp check finds the listener by its port alone: another host or family of that
    # port was passed by the held socket (ready while the app listened nowhere)
    ('ready = { kind = "tcp", port = 8080, host = "::1" }\n',
     "stacks.web.apps.api.ready.port", "8080 is the port of the app's socket 'http'"),
    ('ready = { kind = "tcp", port = 8080, host = "127.0.0.2" }\n',
     "stacks.web.apps.api.ready.port", "8080 is the port of the app's socket 'http'"),
    # shared by instances: an old sibling answered for the new process
    ('instances = 4\nready = { kind = "http", url = "http://127.0.0.1:8080/" }\n',
     "stacks.web.apps.api.ready.url", "which its 4 instances share"),
    ('instances = 2\nhealth = { kind = "http", url = "http://localhost:8080/h" }\n',
     "stacks.web.apps.api.health.url", "any of them may answer"),
])
def test_a_check_of_a_socket_the_owner_holds_is_refused(app: str, key: str,
                                                        words: str) -> None:
    """When planned: a config an older release applied is still parsed (and run)."""
    config = parse_config(BASE + app + SOCK, "t.toml")
    with pytest.raises(ConfigInvalid) as info:
        check_new(config, BASE + app + SOCK)
    assert info.value.data["key"] == key, info.value.data
    assert words in info.value.data["problem"], info.value.data


@pytest.mark.parametrize("app", [
    'ready = { kind = "http", url = "http://127.0.0.1:8080/" }\n',   # one instance answers
    'instances = 2\nready = { kind = "tcp", port = 9000, port_step = 1 }\n',
    'ready = { kind = "notify" }\nhealth = { kind = "exec", command = ["true"] }\n',
])
def test_checks_of_what_the_app_opens_itself_are_accepted(app: str) -> None:
    check_new(parse_config(BASE + app + SOCK, "t.toml"), BASE + app + SOCK)


def _shared(listen: str, url: str) -> str:
    return (BASE + f'instances = 2\nhealth = {{ kind = "http", url = "{url}" }}\n'
            f'[stacks.web.apps.api.sockets.http]\nlisten = "{listen}"\n')


@pytest.mark.parametrize(("listen", "url"), [
    # connecting to a v4-mapped address goes over IPv4, to the IPv4 listener
    ("127.0.0.1:8080", "http://[::ffff:127.0.0.1]:8080/h"),
    ("127.0.0.1:8080", "http://[::ffff:7f00:1]:8080/h"),
    ("0.0.0.0:8080", "http://[::ffff:10.1.2.3]:8080/h"),
    # connecting to the unspecified address reaches loopback
    ("127.0.0.1:8080", "http://0.0.0.0:8080/h"),
    ("127.0.0.1:8080", "http://[::ffff:0.0.0.0]:8080/h"),
    ("[::1]:8080", "http://[::]:8080/h"),
])
def test_an_http_check_reaching_a_shared_socket_by_another_spelling_is_refused(
        listen: str, url: str) -> None:
    """Was accepted: the address was compared as written, so an IPv6 spelling of an
    IPv4 address (or 0.0.0.0 for 127.0.0.1) slipped past, and any instance answered."""
    text = _shared(listen, url)
    with pytest.raises(ConfigInvalid) as info:
        check_new(parse_config(text, "t.toml"), text)
    assert info.value.data["key"] == "stacks.web.apps.api.health.url", info.value.data
    assert "which its 2 instances share" in info.value.data["problem"], info.value.data


@pytest.mark.parametrize(("listen", "url"), [
    # [::] is IPv6 only: neither IPv4 nor a v4-mapped address reaches it
    ("[::]:8080", "http://127.0.0.1:8080/h"),
    ("[::]:8080", "http://[::ffff:127.0.0.1]:8080/h"),
    ("127.0.0.1:8080", "http://[::1]:8080/h"),
    ("127.0.0.1:8080", "http://[::ffff:127.0.0.2]:8080/h"),
])
def test_an_http_check_of_an_address_the_shared_socket_does_not_take_is_accepted(
        listen: str, url: str) -> None:
    text = _shared(listen, url)
    check_new(parse_config(text, "t.toml"), text)


def test_a_tcp_check_of_a_held_ipv6_sockets_port_is_refused_whatever_its_host() -> None:
    text = (BASE + 'ready = { kind = "tcp", port = 8080 }\n'
            '[stacks.web.apps.api.sockets.http]\nlisten = "[::]:8080"\n')
    with pytest.raises(ConfigInvalid) as info:
        check_new(parse_config(text, "t.toml"), text)
    assert "8080 is the port of the app's socket 'http' ([::]:8080)" in \
        info.value.data["problem"]


def test_a_unix_socket_in_a_directory_the_owner_may_not_write_is_refused_at_plan(
        tmp_path: Any, monkeypatch: Any) -> None:
    """It planned fine and the apply failed at the owner's bind. Judged only when this
    backend runs as the owner's user: what it may not do there, the owner may not."""
    from backend import activation
    from protocol.listen import parse_listen
    said: list[str] = []

    def fail(path: Any, problem: str) -> None:
        said.append(problem)
        raise ValueError(problem)
    addr = parse_listen(f"unix:{tmp_path}/a.sock")
    monkeypatch.setattr(activation.os, "access", lambda p, mode: False)   # e.g. read-only
    with pytest.raises(ValueError):
        activation._check_unix(addr, ("k",), fail, owner_uid=os.geteuid())
    assert said == [f"directory {tmp_path} is not writable by the owner's user (uid "
                    f"{os.geteuid()}): it could not create the socket there"]
    activation._check_unix(addr, ("k",), fail, owner_uid=os.geteuid() + 1)   # not ours
    assert len(said) == 1


def _held(stack: str, app: str, name: str, listen: str) -> dict[str, Any]:
    return {"key": f"{stack}/{app}/{name}@{listen}", "stack": stack, "app": app,
            "name": name, "listen": listen}


@pytest.mark.parametrize(("held", "said"), [
    (_held("s", "web", "http", "127.0.0.1:47311"),
     "0.0.0.0:47311 overlaps 127.0.0.1:47311, which the owner holds for this app's "
     "socket 'http': the new socket cannot be bound while that one is held, so the move "
     "takes two applies: first give the socket an address that does not overlap (or "
     "remove it), then this one"),
    (_held("s", "api", "http", "127.0.0.1:47311"),
     "0.0.0.0:47311 is held by the owner for s/api/http@127.0.0.1:47311: remove it "
     "there first (it is closed once that app stopped)"),
])
def test_an_address_the_owner_holds_names_whose_it_is_and_what_to_do(
        held: dict[str, Any], said: str) -> None:
    """Was: widening a socket of the app itself (127.0.0.1 -> 0.0.0.0, or the same
    address under a new name) said to remove it "there", as if another app held it."""
    from backend.activation import CAPABILITY, check_sockets
    text = ('[stacks.s.apps.web]\ncommand = ["srv"]\n'
            '[stacks.s.apps.web.sockets.http]\nlisten = "0.0.0.0:47311"\n')
    with pytest.raises(ConfigInvalid) as e:
        check_sockets(parse_config(text, "/c.toml"), text, CAPABILITY, [held])
    assert e.value.data["problem"] == said
