"""Socket declarations in launch specs: strict, round-tripping, fuzzed; and the fd store's
bookkeeping (limits, names, all-or-nothing) on real pipe fds."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from owner import fdstore
from owner.fdpass import PassFds, without_listen_vars
from owner.fdstore import FdStore
from owner.sockets import SocketDecl, socket_key
from owner.specs import LaunchSpec
from protocol.errors import BadRequest


def test_a_launch_spec_with_sockets_and_a_store_round_trips() -> None:
    wire = {"argv": ["app"], "sockets": [
        {"name": "http", "listen": "127.0.0.1:8080", "backlog": 128},
        {"name": "admin", "listen": "unix:/run/a.sock", "mode": 0o660, "user": "www",
         "group": "www"}], "fd_store_max": 4}
    spec = LaunchSpec.from_wire(wire)
    assert [d.name for d in spec.sockets] == ["http", "admin"]
    assert spec.sockets[1].mode == 0o660 and spec.fd_store_max == 4
    assert LaunchSpec.from_wire(spec.to_wire()) == spec
    assert socket_key("web", "api", spec.sockets[0]) == "web/api/http@127.0.0.1:8080"


def test_a_spec_without_sockets_keeps_its_stored_shape() -> None:
    assert set(LaunchSpec.from_wire({"argv": ["app"]}).to_wire()) == \
        {"argv", "env", "cwd", "stop"}


@pytest.mark.parametrize(("sockets", "words"), [
    ([{"name": "a", "listen": "nowhere:80"}], "IPv4"),
    ([{"name": "a:b", "listen": "127.0.0.1:1"}], "without ':'"),
    ([{"name": "a", "listen": "127.0.0.1:1", "backlog": 0}], "backlog"),
    ([{"name": "a", "listen": "127.0.0.1:1", "mode": 0o600}], "unix sockets"),
    ([{"name": "a", "listen": "unix:/a", "mode": 0o1777}], "mode"),
    ([{"name": "a", "listen": "127.0.0.1:1"}, {"name": "a", "listen": "127.0.0.1:2"}],
     "own name"),
    ("x", "list"),
])
def test_bad_sockets_are_bad_requests(sockets: Any, words: str) -> None:
    with pytest.raises(BadRequest) as info:
        LaunchSpec.from_wire({"argv": ["app"], "sockets": sockets})
    assert words in info.value.msg


@pytest.mark.parametrize("value", [-1, 1025, True, "4", None])
def test_bad_store_sizes_are_bad_requests(value: Any) -> None:
    with pytest.raises(BadRequest):
        LaunchSpec.from_wire({"argv": ["app"], "fd_store_max": value})


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=20))


@given(st.dictionaries(st.sampled_from(["name", "listen", "backlog", "mode", "user",
                                        "group", "x"]), _leaf, max_size=7))
def test_socket_decoder_raises_only_bad_request(d: dict[str, Any]) -> None:
    try:
        decl = SocketDecl.from_wire(d)
    except BadRequest:
        return
    assert SocketDecl.from_wire(decl.to_wire()) == decl


def test_listen_variables_are_the_owners_alone() -> None:
    env = {"LISTEN_FDS": "9", "LISTEN_PID": "1", "LISTEN_FDNAMES": "x", "PATH": "/bin"}
    assert without_listen_vars(env) == {"PATH": "/bin"}
    assert PassFds((7, 8), ("http", "token")).env() == \
        {"LISTEN_FDS": "2", "LISTEN_FDNAMES": "http:token"}
    with pytest.raises(ValueError):
        PassFds((7,), ())


def _pipe_fds(n: int) -> tuple[list[int], list[int]]:
    reads, writes = [], []
    for _ in range(n):
        r, w = os.pipe()
        reads.append(r)
        writes.append(w)
    return reads, writes


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_the_store_keeps_fds_up_to_its_limit_all_or_nothing() -> None:
    store, key = FdStore(), ("web", "api", 0)
    reads, writes = _pipe_fds(4)
    try:
        assert store.add(key, "a", reads[:2], limit=3)
        assert not store.add(key, "b", reads[2:4], limit=3)  # 2 + 2 > 3: neither kept
        assert not _is_open(reads[2]) and not _is_open(reads[3])
        assert [(s.name, s.kind) for s in store.for_launch(key, 3)] == [("a", "pipe")] * 2
        assert store.stats == {"stored": 2, "refused": 2, "removed": 0}
        assert store.remove(key, "a") == 2 and not _is_open(reads[0])
        assert store.to_wire() == []
    finally:
        store.close_all()
        for fd in writes:
            os.close(fd)


def test_a_lowered_limit_cuts_the_newest_and_bad_names_are_refused() -> None:
    store, key = FdStore(), ("web", "api", 1)
    reads, writes = _pipe_fds(3)
    try:
        assert store.add(key, "x", reads[:1], limit=5)
        assert store.add(key, "y", reads[1:2], limit=5)
        assert not store.add(key, "bad:name", reads[2:3], limit=5)
        assert [s.name for s in store.for_launch(key, 1)] == ["x"]
        assert not _is_open(reads[1])
        assert store.clear(key) == 1 and store.stored_keys() == []
    finally:
        store.close_all()
        for fd in writes:
            os.close(fd)


@pytest.mark.parametrize("query", [True, False], ids=["kernel", "fstat"])
def test_an_open_file_stored_again_is_kept_once(monkeypatch: Any, query: bool) -> None:
    """Regression: an app that stores again the fds it was given (FDSTORE=1 at each
    start) had each one stored once more at every launch: LISTEN_FDS grew and the store
    filled with copies, then refused new fds. As systemd does, a duplicate (by the
    kernel's F_DUPFD_QUERY, or without it by inode and flags) is closed and not kept;
    the two ends of a pipe, or two opens of /dev/null, are two files."""
    if not query:   # a kernel before 6.10
        real = fdstore.fcntl.fcntl

        def old_kernel(fd: int, cmd: int, arg: int = 0) -> int:
            if cmd == fdstore._F_DUPFD_QUERY:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, cmd, arg)
        monkeypatch.setattr(fdstore.fcntl, "fcntl", old_kernel)
    store, key = FdStore(), ("web", "api", 0)
    r, w = os.pipe()
    nulls = [os.open("/dev/null", os.O_RDONLY) for _ in range(2)]
    try:
        assert store.add(key, "cache", [r, w], limit=4)
        again = [os.dup(r), os.dup(w)]
        assert store.add(key, "cache", again, limit=4)   # what it was given, once more
        assert not any(_is_open(fd) for fd in again)
        assert store.add(key, "null", nulls, limit=4)
        assert [s.name for s in store.for_launch(key, 4)] == ["cache", "cache", "null",
                                                              "null"]
        assert store.stats == {"stored": 4, "refused": 0, "removed": 0}
    finally:
        store.close_all()
