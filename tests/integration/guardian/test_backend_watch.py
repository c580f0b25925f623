"""The guardian tells a living backend that does not answer from one that does: a real
server probed over its socket, and a real generation stopped with SIGSTOP. Before,
`tenure backend status` said "alive" while every command failed after its timeout.
Control calls, one at a time or on a link held through a handoff, reach only the
process they are meant for."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from guardian.backendproc import ControlLink, control
from guardian.backendwatch import probe
from guardian.coordinator import Coordinator
from guardian.paths import GuardianPaths
from guardian.state import StateStore
from protocol.ed25519 import PrivateKey
from protocol.errors import IdentityMismatch, OwnerChanged, TenureError
from protocol.sockets import ensure_private_dir


def _serve(path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "protocol.testing", path],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("READY ")
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.fixture
def server(short_home: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    path = str(ensure_private_dir(short_home / "run", root=short_home) / "api.sock")
    proc = _serve(path)
    try:
        yield path, proc
    finally:
        _end(proc)


def test_probe_answers_only_for_the_process_that_serves(server) -> None:
    path, proc = server
    assert asyncio.run(probe(path, proc.pid, 2.0)) is None
    other = asyncio.run(probe(path, os.getpid(), 2.0))
    assert other == f"another process (pid {proc.pid}) answers on {path}"


def test_a_control_call_pinned_to_a_pid_reaches_only_that_process(server) -> None:
    path, proc = server
    assert asyncio.run(control(path, "echo", {"x": 1}, pid=proc.pid)) == {"x": 1}
    with pytest.raises(IdentityMismatch) as err:
        asyncio.run(control(path, "echo", {"x": 1}, pid=os.getpid()))
    assert err.value.data == {"pid": proc.pid, "expected_pid": os.getpid()}
    assert "echo was not sent" in err.value.msg


def _handshakes(link: ControlLink) -> list[int]:
    """Count the handshakes (one per connection) ``link`` makes."""
    count, real = [0], link.client._handshake

    async def counted(reader: Any, writer: Any) -> Any:
        count[0] += 1
        return await real(reader, writer)
    link.client._handshake = counted
    return count


def test_a_link_makes_one_connection_for_its_calls(server) -> None:
    path, proc = server

    async def go() -> tuple[list[Any], int]:
        link = ControlLink(path, proc.pid)
        made = _handshakes(link)
        try:
            return [await link.call("echo", {"i": i}) for i in range(3)], made[0]
        finally:
            await link.close()
    assert asyncio.run(go()) == ([{"i": 0}, {"i": 1}, {"i": 2}], 1)


def test_a_link_to_another_pid_sends_nothing(server) -> None:
    path, proc = server

    async def go() -> None:
        link = ControlLink(path, os.getpid())
        try:
            await link.call("echo")
        finally:
            await link.close()
    with pytest.raises(IdentityMismatch) as err:
        asyncio.run(go())
    assert err.value.data == {"pid": proc.pid, "expected_pid": os.getpid()}


def test_a_lost_link_connects_again_only_to_its_process(short_home: Path) -> None:
    """The process behind the socket was replaced: the link's next connection finds
    another process there and sends nothing to it."""
    path = str(ensure_private_dir(short_home / "run", root=short_home) / "api.sock")
    first = _serve(path)
    second = None
    try:
        async def go() -> None:
            nonlocal second
            link = ControlLink(path, first.pid)
            try:
                assert await link.call("echo", {"n": 1}) == {"n": 1}
                _end(first)
                os.unlink(path)
                second = _serve(path)
                for _ in range(2):   # the lost connection, then the other process
                    with pytest.raises(TenureError) as err:
                        await link.call("echo", {"n": 2})
                assert isinstance(err.value, IdentityMismatch | OwnerChanged), err.value
            finally:
                await link.close()
        asyncio.run(go())
    finally:
        _end(first)
        if second is not None:
            _end(second)


def test_a_coordinator_holds_one_link_to_the_generation_in_control(short_home: Path) -> None:
    """Inside holding_link the control calls share a connection; a call that fails
    drops it, and the calls after it connect each on their own. It is closed at the
    block's end."""
    paths = GuardianPaths(short_home)
    paths.prepare()
    proc = _serve(paths.api_sock)
    state = StateStore(paths.state_db)
    try:
        async def go() -> list[int]:
            co = Coordinator(paths, state, PrivateKey.generate())
            co.current = type("Current", (), {"pid": proc.pid})()
            made: list[int] = []
            async with co.holding_link():
                link = co._link
                assert link is not None
                count = _handshakes(link)
                await co.control("echo", {"a": 1})
                await co.control("echo", {"a": 2})
                made.append(count[0])
                with pytest.raises(TenureError):
                    await co.control("fail", {"kind": "defect"})
                assert co._link is None
                await co.control("echo", {"a": 3})   # a fresh connection of its own
            assert co._link is None and link.client._closed
            return made
        assert asyncio.run(go()) == [1]
    finally:
        state.close()
        _end(proc)


def test_probe_of_a_stopped_server_says_it_got_no_answer(server) -> None:
    path, proc = server
    proc.send_signal(signal.SIGSTOP)
    why = asyncio.run(probe(path, proc.pid, 0.3))
    assert why == f"handshake with {path} failed: no answer within 0.3 s"
    proc.send_signal(signal.SIGCONT)
    assert asyncio.run(probe(path, proc.pid, 2.0)) is None


def test_probe_of_a_gone_server_says_it_cannot_connect(server) -> None:
    path, proc = server
    proc.kill()
    proc.wait(10)
    why = asyncio.run(probe(path, proc.pid, 1.0))
    assert why is not None and why.startswith(f"cannot connect to {path}")


ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def test_a_stopped_generation_is_reported_alive_but_not_answering(cluster) -> None:
    cluster.up(ONE)
    cluster.wait_ready(1)
    pid = cluster.backend_pid()

    def backend() -> dict:
        with cluster.guardian() as g:
            return g.call("status")["backend"]   # type: ignore[no-any-return]

    cluster.wait(lambda: backend()["answering"] is True, 10, "a first probe")
    os.kill(pid, signal.SIGSTOP)
    try:
        cluster.wait(lambda: backend()["answering"] is False, 15, "not answering")
        b = backend()
        assert b["alive"] and b["pid"] == pid and b["unanswered_since"] is not None
        assert "no answer within" in b["unanswered_why"]
        text = cluster.cli_text("backend", "status")
        assert "alive, NOT ANSWERING for" in text, text
        stopped = f"pid {pid} is stopped (SIGSTOP or a debugger); kill -CONT {pid}"
        assert stopped in text, text   # said `hung or overloaded`, as status did not
        said = cluster.cli("backend", "status").out["backend"]["process"]
        assert said.startswith(stopped), said
        res = cluster.cli("status", timeout=60)
        assert res.code == 3 and res.out["diagnostics"]["backend"]["answering"] is False
        text = cluster.cli_text("status", expect=3)
        assert f"backend pid {pid} is alive but NOT ANSWERING for" in text, text
    finally:
        os.kill(pid, signal.SIGCONT)
    cluster.wait(lambda: backend()["answering"] is True, 15, "answering again")
    assert backend()["unanswered_since"] is None
    assert "answers again" in cluster.log("guardian")
    assert cluster.cli("status").code == 0


@contextmanager
def _stopped_backend(cluster) -> Iterator[int]:
    """ONE up, its generation stopped (SIGSTOP) until the guardian says it does not
    answer; its pid. Resumed (SIGCONT) when the block ends, if it still runs."""
    cluster.up(ONE)
    cluster.wait_ready(1)
    pid = cluster.backend_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        def silent() -> bool:
            with cluster.guardian() as g:
                return g.call("status")["backend"]["answering"] is False  # type: ignore[no-any-return]
        cluster.wait(silent, 15, "not answering")
        yield pid
    finally:
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGCONT)


def test_down_stops_a_generation_that_does_not_answer_without_asking_it(cluster) -> None:
    with _stopped_backend(cluster) as pid:
        down = cluster.down()
    assert down.ok and down.out["guardian"] and down.out["owner"], down
    log = cluster.log("guardian")
    assert f"(pid {pid}) does not answer" in log and "without a last certificate" in log
    assert "did not retire cleanly" not in log
    assert cluster.leftovers() == []


def _up_on_a_terminal(cluster, timeout: str) -> tuple[int, str]:
    """``tenure up --timeout T`` with its stderr on a pseudo-terminal (where the progress
    line shows); its exit status and all it wrote there."""
    import pty
    import time
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "backend.cli.main", "--home", str(cluster.home), "up",
             "--timeout", timeout], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=slave, env={**os.environ, **cluster.env})
        os.close(slave)
        slave = -1
        said = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            said += chunk
        return proc.wait(10), said.decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_up_waiting_on_a_silent_backend_says_so_while_it_waits(cluster) -> None:
    """`tenure up` waited its whole --timeout (120 s by default) without a word while
    the generation did not answer; only its final error said why."""
    with _stopped_backend(cluster) as pid:
        code, said = _up_on_a_terminal(cluster, "5")
    assert code == 3, said
    assert f"up: the backend (pid {pid}) is alive but NOT ANSWERING for" in said, said
    assert said.count("NOT ANSWERING") >= 2, said   # the line, then the final error


def test_up_on_a_stopped_backend_ends_without_waiting_its_timeout(cluster) -> None:
    """Alive, a stopped backend is not replaced by the guardian: `up` waited its whole
    --timeout (silent when piped), and its --json error named no pid."""
    with _stopped_backend(cluster) as pid:
        began = time.monotonic()
        res = cluster.cli("up", "--timeout", "60", timeout=90)
        took = time.monotonic() - began
    assert res.code == 3 and took < 20, (res, took)
    err = res.out["error"]
    assert err["code"] == "BACKEND_UNAVAILABLE" and err["data"]["pid"] == pid, err
    assert f"pid {pid} is stopped (SIGSTOP or a debugger); kill -CONT {pid}" in err["msg"]
