"""A real server process and real clients over a Unix socket in a short temporary home."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol import AsyncClient, Client
from protocol.aclient import NotSent
from protocol.errors import (
    AlreadyRunning,
    BadFrame,
    CapabilityMissing,
    ConnectFailed,
    OwnerChanged,
    PathTooLong,
    TransportLost,
    Unauthorized,
    UnsafePath,
)
from protocol.framing import FrameDecoder, encode_frame
from protocol.sockets import bind_unix, ensure_private_dir
from protocol.testing import next_frame


class Served:
    def __init__(self, home: Path, caps: tuple[str, ...] = ("demo=1",)) -> None:
        self.dir = ensure_private_dir(home / "run", root=home)
        self.path = str(self.dir / "s.sock")
        self.caps = caps
        self.proc: subprocess.Popen[str] | None = None
        self.instance = ""

    def start(self) -> Served:
        args = [sys.executable, "-m", "protocol.testing", self.path]
        for c in self.caps:
            args += ["--cap", c]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("READY "), line
        self.instance = line.split()[1]
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def start_server(short_home: Path) -> Iterator[Callable[[], Served]]:
    """Start test servers in the same home; every one is stopped at teardown."""
    started: list[Served] = []

    def start() -> Served:
        started.append(Served(short_home).start())
        return started[-1]

    yield start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.kill(signal.SIGTERM)


@pytest.fixture
def served(start_server: Callable[[], Served]) -> Served:
    return start_server()


def raw_connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return s


def read_frames(s: socket.socket) -> list[dict]:
    dec, out = FrameDecoder(), []
    while True:
        data = s.recv(65536)
        if not data:
            return out
        out += dec.feed(data)


def test_socket_is_0600_in_a_0700_dir_and_echo_works(served):
    assert os.stat(served.path).st_mode & 0o777 == 0o600
    assert os.stat(served.dir).st_mode & 0o777 == 0o700
    with Client(served.path, want={"demo": 1}) as c:
        assert c.call("echo", {"a": b"\x00bin", "n": [1, 2]}) == {"a": b"\x00bin", "n": [1, 2]}
        assert c.welcome.identity.pid == served.proc.pid
        assert c.welcome.identity.instance == served.instance


def test_oversized_frame_gets_bad_frame_and_only_that_connection_closes(served):
    with Client(served.path) as other:
        other.call("echo", {})
        s = raw_connect(served.path)
        s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
        s.sendall(struct.pack(">I", 64 * 1024 * 1024) + b"xxxx")
        frames = read_frames(s)  # returns at EOF: the server closed it
        s.close()
        assert frames[0]["t"] == "welcome"
        assert frames[-1]["err"]["code"] == "BAD_FRAME" and frames[-1]["id"] is None
        assert other.call("echo", {"still": 1}) == {"still": 1}


def test_junk_before_hello_and_non_hello_first_are_refused(served):
    s = raw_connect(served.path)
    s.sendall(encode_frame({"t": "req", "id": 1, "m": "echo"}))
    (err,) = read_frames(s)
    s.close()
    assert err["err"]["code"] == "BAD_REQUEST"


def test_bad_request_shape_answers_with_the_id_and_keeps_the_connection(served):
    s = raw_connect(served.path)
    s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
    s.sendall(encode_frame({"t": "req", "id": 5, "m": ""}))
    s.sendall(encode_frame({"t": "req", "id": 6, "m": "nope"}))
    s.sendall(encode_frame({"t": "req", "id": 7, "m": "sleep", "p": {"seconds": "x"}}))
    s.shutdown(socket.SHUT_WR)
    _welcome, *answers = read_frames(s)
    s.close()
    assert [(a["id"], a["err"]["code"]) for a in answers] == [
        (5, "BAD_REQUEST"), (6, "UNKNOWN_METHOD"), (7, "BAD_REQUEST")]


def test_missing_capability_is_refused_before_any_method(served):
    c = Client(served.path, want={"demo": 2})
    with pytest.raises(CapabilityMissing) as e:
        c.call("echo", {})
    assert e.value.data["missing"] == {"demo": 2}
    c.close()


def test_killed_server_gives_transport_lost_with_the_id_then_reconnect(start_server):
    s = start_server()
    c = Client(s.path, pin=False)
    c.call("echo", {})
    c._ids = iter([41, 42, 43])  # make the request id predictable
    import threading
    t = threading.Timer(0.3, s.kill)
    t.start()
    with pytest.raises(TransportLost) as e:
        c.call("sleep", {"seconds": 30})
    t.join()
    assert e.value.request_id == 41 and e.value.data["request_id"] == 41
    assert e.value.data["path"] == str(s.path)   # the command line names the daemon
    assert not c.connected
    start_server()  # the stale socket file is replaced: nobody answered on it
    assert c.call("echo", {"again": 1}) == {"again": 1}
    c.close()


def test_restarted_server_with_a_new_instance_gives_owner_changed(start_server):
    s = start_server()
    c = Client(s.path)  # pins the first instance it meets
    c.call("echo", {})
    s.kill(signal.SIGTERM)
    s2 = start_server()
    with pytest.raises(OwnerChanged) as e:
        c.call("echo", {})
    assert e.value.data == {"expected": s.instance, "actual": s2.instance}
    with pytest.raises(OwnerChanged):
        c.call("echo", {})  # still refused: never adopted silently
    c.unpin()
    assert c.call("echo", {}) == {}
    c.close()


def test_a_live_socket_is_never_removed(served):
    with pytest.raises(AlreadyRunning) as refused:
        bind_unix(served.path)
    # the listener is named, so the operator can find it (a stopped one: kill -CONT)
    assert refused.value.msg == f"a live server (pid {served.proc.pid}) answers on " \
        f"{served.path}"
    assert refused.value.data == {"path": str(served.path), "pid": served.proc.pid}
    with Client(served.path) as c:
        assert c.call("echo", {}) == {}


def test_foreign_file_in_the_way_is_refused(short_home):
    d = ensure_private_dir(short_home / "r", root=short_home)
    (d / "x.sock").write_text("not a socket")
    with pytest.raises(UnsafePath):
        bind_unix(d / "x.sock")
    assert (d / "x.sock").read_text() == "not a socket"


def test_symlinked_or_wide_socket_dir_is_refused(short_home):
    real = ensure_private_dir(short_home / "real", root=short_home)
    (short_home / "link").symlink_to(real)
    with pytest.raises(UnsafePath, match="symlink"):
        bind_unix(short_home / "link" / "s.sock")
    with pytest.raises(UnsafePath, match="symlink"):
        ensure_private_dir(short_home / "link" / "deeper", root=short_home)
    os.chmod(real, 0o755)
    with pytest.raises(UnsafePath, match="0755"):
        bind_unix(real / "s.sock")


def test_long_socket_path_is_refused_clearly(short_home):
    with pytest.raises(PathTooLong, match="shorter TENURE_HOME"):
        Client(str(short_home / ("x" * 120)))


def test_client_refuses_a_socket_with_a_wide_mode(served):
    os.chmod(served.path, 0o666)
    with pytest.raises(UnsafePath):
        Client(served.path).call("echo", {})


def test_no_server_is_connect_failed(short_home):
    with pytest.raises(ConnectFailed):
        Client(str(short_home / "none.sock")).call("echo", {})


def test_events_are_pushed_to_subscribers(served):
    with Client(served.path) as c:
        c.call("subscribe")
        assert c.call("emit", {"count": 3}) == {"sent": 3}
        got = [(e.stream, e.cursor, e.e) for e in c.events(timeout=1.0)]
    assert got == [("ticks", 1, {"n": 1}), ("ticks", 2, {"n": 2}), ("ticks", 3, {"n": 3})]


def test_drain_finishes_admitted_requests(served):
    c = Client(served.path)
    c.call("echo", {})
    import threading
    result = {}
    t = threading.Thread(target=lambda: result.update(c.call("sleep", {"seconds": 0.5})))
    t.start()
    import time
    time.sleep(0.2)
    served.proc.send_signal(signal.SIGTERM)  # server drains: admitted sleep finishes
    t.join(10)
    assert result == {"slept": 0.5}
    served.proc.wait(10)
    served.proc.stdout.close()
    c.close()


def test_async_client_concurrent_calls_and_transport_lost(start_server):
    s = start_server()

    async def main() -> None:
        async with AsyncClient(s.path, want={"demo": 1}) as c:
            got = await asyncio.gather(*(c.call("echo", {"i": i}) for i in range(20)))
            assert got == [{"i": i} for i in range(20)]
            await c.call("subscribe")
            await c.call("emit", {"count": 2})
            ev = await c.next_event(2.0)
            assert ev is not None and ev.cursor == 1
            asyncio.get_running_loop().call_later(0.3, s.kill)
            with pytest.raises(TransportLost) as e:
                await c.call("sleep", {"seconds": 30})
            assert e.value.request_id is not None

    asyncio.run(main())


def test_a_call_withdrawn_while_it_waits_for_its_turn_is_never_sent(start_server):
    """``still`` is asked once the turn is taken: a launch whose instance was stopped
    meanwhile is not sent (the backend's launches and stops share turns)."""
    s = start_server()

    async def main() -> None:
        async with AsyncClient(s.path, want={"demo": 1}) as c:
            c.limit(("sleep", "echo"), 1)
            wanted = [True]
            first = asyncio.ensure_future(c.call("sleep", {"seconds": 0.5}))
            await asyncio.sleep(0.05)
            second = asyncio.ensure_future(c.call("echo", {"x": 1}, still=lambda: wanted[0]))
            await asyncio.sleep(0.05)
            wanted[0] = False           # withdrawn while it waits for the turn
            assert await first == {"slept": 0.5}
            with pytest.raises(NotSent):
                await second
            assert await c.call("echo", {"x": 2}, still=lambda: True) == {"x": 2}

    asyncio.run(main())


def test_a_slow_request_does_not_hold_up_the_others_on_its_connection(start_server):
    """Regression: requests of one connection ran one at a time, so a stop waiting out
    its grace period delayed every other call of the backend (status showed the past)."""
    s = start_server()

    async def main() -> None:
        async with AsyncClient(s.path, want={"demo": 1}) as c:
            slow = asyncio.ensure_future(c.call("sleep", {"seconds": 3}))
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            assert await c.call("echo", {"x": 1}) == {"x": 1}
            assert time.monotonic() - t0 < 1.0 and not slow.done()
            assert await slow == {"slept": 3}

    asyncio.run(main())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_client_as_another_uid_is_refused(served):
    home = served.dir.parent
    os.chmod(home, 0o711)  # let uid 65534 reach the socket at all
    os.chmod(served.dir, 0o711)
    os.chmod(served.path, 0o666)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, speak raw protocol, report the answer
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = raw_connect(served.path)
            s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
            frames = read_frames(s)
            os.write(w, frames[0]["err"]["code"].encode())
        except BaseException as exc:
            os.write(w, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    assert answer == Unauthorized.code
    os.chmod(served.path, 0o600)
    os.chmod(served.dir, 0o700)
    os.chmod(home, 0o700)


def test_oversized_frame_from_the_client_is_refused_locally(served):
    with Client(served.path, max_frame=1024) as c, pytest.raises(BadFrame):
        c.call("echo", {"x": b"a" * 4096})


def test_an_admin_has_a_long_call_in_flight_for_each_of_many(start_server):
    """Regression: a server handled 64 requests of one connection at once; the backend
    stopping 80 slow apps held every place, and its heartbeat timed out behind them
    (the connection was dropped and every stop sent again)."""
    s = start_server()

    async def main() -> None:
        async with AsyncClient(s.path, want={"demo": 1}) as c:
            slow = [asyncio.ensure_future(c.call("sleep", {"seconds": 3}))
                    for _ in range(200)]
            await asyncio.sleep(0.2)
            assert await c.call("echo", {"x": 1}, timeout=2.0) == {"x": 1}
            assert not any(t.done() for t in slow)
            assert await asyncio.gather(*slow) == [{"slept": 3}] * 200

    asyncio.run(main())


def test_a_limited_method_waits_for_its_turn_outside_its_timeout(start_server):
    s = start_server()

    async def main() -> None:
        async with AsyncClient(s.path, want={"demo": 1}) as c:
            c.limit(["sleep"], 1)
            t0 = time.monotonic()
            got = await asyncio.gather(*(c.call("sleep", {"seconds": 0.5}, timeout=0.9)
                                         for _ in range(3)))
            assert got == [{"slept": 0.5}] * 3          # none timed out waiting its turn
            assert time.monotonic() - t0 >= 1.5         # one after the other
            assert await c.call("echo", {"x": 2}) == {"x": 2}   # not limited

    asyncio.run(main())


def test_a_full_disk_is_storage_failed_and_a_defect_stays_internal(served: Served) -> None:
    """A handler's full disk was answered 'INTERNAL: fail failed: OperationalError'."""
    from protocol.errors import Internal, StorageFailed
    with Client(served.path, pin=False) as c:
        with pytest.raises(StorageFailed) as full:
            c.call("fail", {"kind": "disk-full"})
        assert full.value.msg == ("fail failed: the storage failed (OperationalError: "
                                  "database or disk is full); the call stopped there")
        assert full.value.data == {"exception": "OperationalError"}
        with pytest.raises(StorageFailed) as nospace:
            c.call("fail", {"kind": "no-space"})
        assert "(OSError: No space left on device)" in nospace.value.msg
        with pytest.raises(Internal) as bug:
            c.call("fail", {"kind": "bug"})
        assert bug.value.msg == "fail failed: ValueError"   # a defect's words stay inside
        assert c.call("echo", {"x": 1}) == {"x": 1}   # the connection serves on


def test_a_client_that_never_reads_its_answers_is_read_no_further(served):
    """Was: a client that sent requests and never read the answers had them all queued
    (up to 1024 in flight, each up to a frame): the owner grew by gigabytes. The server
    now reads no further from a connection whose answers back up, so such a client's
    sends block after a few of them, and a client gone leaves nothing in the log."""
    s = raw_connect(served.path)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
    s.settimeout(2.0)         # a send blocked this long: the server reads no more
    payload = {"x": "y" * 32768}
    sent = 0
    with contextlib.suppress(TimeoutError):
        while sent < 2000:
            s.sendall(encode_frame({"t": "req", "id": sent + 1, "m": "echo", "p": payload}))
            sent += 1
    s.close()
    assert sent < 500, f"{sent} requests of 32 KiB were read with no answer taken"
    # the server lives on and answers others
    c = Client(served.path)
    try:
        assert c.call("echo", {"ok": 1}) == {"ok": 1}
    finally:
        c.close()


def test_a_client_that_never_reads_has_only_a_few_large_answers_made(served):
    """Was: 100 pipelined ``logs.read`` of 3 MiB answers from a client that never read
    were all read at once (the write buffer was empty then) and all run: every finished
    one held its result and its encoded frame, and the owner grew from 52 MB to 884 MB.
    Requests of a method with large answers now wait for their turn on the connection,
    one turn being over once its answer is queued, and queued only when the answers
    before it were taken."""
    with contextlib.closing(raw_connect(served.path)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
        assert next_frame(s)["t"] == "welcome"
        s.sendall(b"".join(encode_frame({"t": "req", "id": i + 1, "m": "blob",
                                         "p": {"size": 512 * 1024}}) for i in range(100)))
        time.sleep(1.0)   # what the server would do, it does now
        with Client(served.path) as c:
            made = c.call("made")["made"]
    # the connection's turns (4), and the one made when the first answer was queued
    assert made <= 5, f"{made} answers of 512 KiB were made"



def test_a_frame_of_a_million_tiny_maps_is_a_bad_frame(served):
    """Was: a 4 MiB frame of 4M empty maps (each one byte, ``\\x80``) decoded to ~300 MB:
    8 of them at once put the guardian at 2.4 GB. A server now refuses a frame of more
    items than any request carries, before it has decoded the rest of it."""
    n = 1 << 20
    head = b"\x84\xa1t\xa3req\xa2id\x01\xa1m\xa4echo\xa1p\x81\xa1x\xdd" + struct.pack(">I", n)
    body = head + b"\x80" * n
    with contextlib.closing(raw_connect(served.path)) as s:
        s.sendall(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
        assert next_frame(s)["t"] == "welcome"
        s.sendall(struct.pack(">I", len(body)) + body)
        answer = next_frame(s)
    assert "err" in answer and answer["err"]["code"] == "BAD_FRAME", "it was decoded"
    # a request as large as a real one is served: 100,000 app names (stack.stop_order)
    with Client(served.path) as c:
        names = [f"app{i}" for i in range(100_000)]
        assert c.call("echo", {"names": names}, timeout=30) == {"names": names}
