"""Test helpers of the backend.

A whole tenure (owner, guardian, backend generations) in a temporary home, driven
through the real CLI and sockets — for integration tests and benchmarks::

    rel = seal_once(tmpdir)              # one sealed release, reused by every cluster
    c = Cluster(home, rel).up(config_text)
    c.cli("status")                      # runs `tenure --home H --json status`
    c.down()                             # stops everything; verifies nothing is left

And fakes for unit tests (no process, no socket, no sleep): ``FakeOwner`` answers the
owner methods the reconciler uses from memory and can hold any method until released;
``no_sleep`` replaces retry pauses; ``fake_generation`` assembles a Generation (real
backend.db and recovery.db in a directory, the fake owner, no socket) around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from protocol.client import Client
from protocol.errors import Conflict, NotFound, StaleEpoch
from protocol.layout import Layout

TENURE = [sys.executable, "-m", "backend.cli.entry"]
"""The `tenure` command as its installed script runs it (backend.cli.entry, which forks
`up --no-wait`'s background child before the command line is imported)."""

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["CliResult", "Cluster", "FakeOwner", "FakeServer", "api_call", "default_sigint",
           "fake_generation", "force_rmtree", "free_port", "go_stale", "in_thread", "no_sleep",
           "ready_generation", "run_bounded", "run_generation", "seal_once", "until"]


def in_thread(fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run ``fn`` (a blocking call, e.g. an upgrade) in a daemon thread: the thread, and
    a dict that gets ``ok`` (its answer) or ``err`` (the TenureError it raised)."""
    import threading

    from protocol.errors import TenureError
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["ok"] = fn()
        except TenureError as exc:
            out["err"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def default_sigint() -> None:
    """A ``preexec_fn`` for a child that must stop on Ctrl-C: a test run started in the
    background (``nohup``, ``cmd &``) ignores SIGINT, and an ignored signal is inherited
    across exec."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sleeping(arg: str) -> list[int]:
    """Pids of living (not zombie) ``sleep ARG`` processes: a test gives ARG a number no
    other test uses, to find what it started, or what was left of it."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] != [b"sleep", arg.encode()]:
                    continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] != b"Z":
                    found.append(int(pid))
        except OSError:   # gone meanwhile
            continue
    return found


def force_rmtree(path: str | os.PathLike[str]) -> None:
    """rmtree that also removes read-only trees (installed releases are 0555); symlinks
    are removed, never followed. Nothing at ``path``: nothing to do."""
    if not os.path.lexists(path):
        return
    if not os.path.islink(path):
        os.chmod(path, 0o700)
    for here, dirs, _files in os.walk(path):
        for d in dirs:
            if not os.path.islink(os.path.join(here, d)):
                os.chmod(os.path.join(here, d), 0o700)
    shutil.rmtree(path)


def seal_once(out: Path) -> Path:
    """Seal the installed tenure into ``out/release`` (once; reused if present)."""
    target = out / "release"
    if not (target / "RUNTIME.json").exists():
        from guardian.seal import seal
        seal(target)
    return target


@dataclass
class CliResult:
    code: int
    out: Any
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass
class Cluster:
    home: Path
    release: Path | None = None
    config_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        return Layout(self.home)

    def cli(self, *args: str, timeout: float = 300.0, check: bool = False) -> CliResult:
        """Run ``tenure --home H --json ARGS``; parse its JSON output."""
        proc = subprocess.run(
            [*TENURE, "--home", str(self.home), "--json",
             *args], capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, env={**os.environ, **self.env})
        try:
            out = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            out = proc.stdout
        res = CliResult(proc.returncode, out, proc.stderr)
        if check and not res.ok:
            raise AssertionError(f"tenure {' '.join(args)} exited {res.code}: "
                                 f"{proc.stdout}\n{proc.stderr}")
        return res

    def cli_text(self, *args: str, timeout: float = 60.0, expect: int = 0) -> str:
        """Run ``tenure --home H ARGS`` (human output); its stdout. Fails unless it exits
        ``expect``."""
        proc = subprocess.run(
            [*TENURE, "--home", str(self.home), *args],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env})
        if proc.returncode != expect:
            raise AssertionError(f"tenure {' '.join(args)} exited {proc.returncode}: "
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def follow(self, *args: str) -> subprocess.Popen[str]:
        """Start ``tenure --home H ARGS`` (a follower: ``logs -f``, ``events -f``) with
        its stdout and stderr piped; the caller ends it (terminate, communicate)."""
        return subprocess.Popen(
            [*TENURE, "--home", str(self.home), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, env={**os.environ, **self.env})

    def write_config(self, text: str, name: str = "tenure.toml") -> Path:
        self.config_path = self.home / name
        self.config_path.write_text(text)
        return self.config_path

    def up(self, config: str | None = None, timeout: float = 120.0) -> CliResult:
        args = ["up", "--timeout", str(timeout)]
        if config is not None:
            args += ["--config", str(self.write_config(config))]
        if self.release is not None:
            args += ["--release", str(self.release)]
        return self.cli(*args, timeout=timeout + 60, check=True)

    def down(self) -> CliResult:
        return self.cli("down", timeout=180)

    def api(self, **kw: Any) -> Client:
        return Client(self.layout.api_sock, pin=False, allow_group=True, **kw)

    def guardian(self, **kw: Any) -> Client:
        return Client(self.layout.guardian_sock, pin=False, timeout=600, **kw)

    def owner(self, **kw: Any) -> Client:
        return Client(self.layout.owner_sock, pin=False, allow_group=True, **kw)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with self.api() as c:
            return c.call(method, params or {})

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = self.call("status")
        return st

    def apps(self) -> dict[str, dict[str, Any]]:
        return {r["key"]: r for r in self.status()["apps"]}

    def wait(self, predicate: Callable[[], bool], timeout: float = 30.0,
             what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except Exception as exc:  # the backend may be between generations
                last = exc
            time.sleep(0.05)
        raise AssertionError(f"{what} not reached in {timeout} s (last error: {last})")

    def wait_ready(self, n: int, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        self.wait(lambda: sum(a["ready"] for a in self.apps().values()) >= n, timeout,
                  f"{n} ready apps")
        return self.apps()

    def pids(self) -> dict[str, tuple[int, int]]:
        """launch key → (pid, start ticks) from the owner's inventory."""
        with self.owner() as c:
            return {r["launch_key"]: (r["pid"], r["start_ticks"])
                    for r in c.call("inventory")["launches"]}

    def backend_pid(self) -> int:
        return int(self.status()["backend"]["pid"])

    def log(self, name: str) -> str:
        """The text of ``logs/NAME.log``: ``owner``, ``guardian`` or, for a backend
        generation, ``backend-ACTIVATION`` (:meth:`backend_log`)."""
        return (self.layout.logs / f"{name}.log").read_text()

    def backend_log(self, activation: str | None = None) -> str:
        """The log of backend generation ``activation``, default the one serving."""
        return self.log(f"backend-{activation or self.status()['backend']['activation']}")

    def kill_backend(self) -> int:
        pid = self.backend_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_owner(self) -> int:
        """SIGKILL the owner and wait (10 s at most) until it is gone or a zombie."""
        import psutil
        pid = int(self.cli("owner", "status", check=True).out["owner"]["pid"])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != \
                psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        return pid

    def daemon_pids(self) -> list[int]:
        """Owner, guardian and backend pids of this home (found by their sockets)."""
        out = []
        for sock, key in ((self.layout.owner_sock, "owner"),
                          (self.layout.guardian_sock, "guardian")):
            try:
                with Client(sock, pin=False, timeout=5) as c:
                    out.append(int(c.call("status")[key]["pid"]))
            except Exception:
                pass
        return out

    def leftovers(self) -> list[int]:
        """Processes still carrying this home in their command line or environment, or
        the marker of an exec probe of this home (whose environment names the home by
        its identity only: backend.probe_orphans)."""
        from protocol.layout import home_id

        from .probe_orphans import PROBE_ENV
        me, probe = str(self.home), f"{home_id(str(self.home)) or '?'}:"
        left = []
        for p in psutil.process_iter(["pid", "cmdline", "environ"]):
            try:
                env = p.info["environ"] or {}
                text = " ".join(p.info["cmdline"] or []) + " ".join(
                    f"{k}={v}" for k, v in env.items())
            except psutil.Error:
                continue
            if (me in text or env.get(PROBE_ENV, "").startswith(probe)) and \
                    p.pid != os.getpid():
                left.append(p.pid)
        return left


# -- fakes for unit tests ---------------------------------------------------------------

class FakeOwner:
    """The owner methods the backend calls, answered from memory: ``launch`` (idempotent
    per launch key, forever), ``stop``, ``inventory``, ``inspect`` (a launch row that has
    a process), ``stack.intents``, ``stack.set_intent``, ``stack.stop_order`` (kept in
    ``stop_order``), ``observations.read``, ``observations.ack``, ``logs.forget``
    (each source counted once, in ``forgotten``), ``logs.note`` (in ``notes``),
    ``logs.retention``, ``logs.apps`` and ``logs.forget_apps`` (``journal_apps``).
    Mutations
    carrying another epoch get STALE_EPOCH. ``exit(key)`` ends a process.

    ``hold(method)`` makes calls of that method wait until ``release(method)``;
    ``before(method, params)``, when set, runs as each call arrives (to look at what the
    backend had done by then). ``calls`` lists every call as (method, params, epoch)."""

    losses = 0   # as protocol.aclient.AsyncClient: connections lost (never, here)

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch
        self.calls: list[tuple[str, dict[str, Any], int | None]] = []
        self.live: dict[str, dict[str, Any]] = {}
        self.rows: dict[str, dict[str, Any]] = {}    # every launch ever, with its state
        self.events: list[dict[str, Any]] = []       # the observation ring (never full)
        self.intents: dict[str, dict[str, Any]] = {}
        self.stop_order: dict[str, list[list[str]]] | None = None   # stack.stop_order
        self.forgotten: set[tuple[str, str, int]] = set()  # logs.forget sources
        self.notes: list[dict[str, Any]] = []              # logs.note calls
        # logs.apps: (stack, app) -> the time of its newest line (each has 10 lines)
        self.journal_apps: dict[tuple[str, str], float | None] = {}
        self.apps_page = 2000   # apps per logs.apps answer
        self.before: Callable[[str, dict[str, Any]], None] | None = None
        self._held: dict[str, asyncio.Event] = {}
        self._next_pid = 4000

    def hold(self, method: str) -> None:
        self._held.setdefault(method, asyncio.Event())

    def release(self, method: str) -> None:
        self._held.pop(method).set()

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [p for m, p, _ in self.calls if m == method]

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None,
                   still: Callable[[], bool] | None = None) -> Any:
        if still is not None and not still():   # as AsyncClient: withdrawn, never sent
            from protocol.aclient import NotSent
            raise NotSent(f"{method}: withdrawn before it was sent")
        p = dict(params or {})
        self.calls.append((method, p, epoch))
        if self.before is not None:
            self.before(method, p)
        held = self._held.get(method)
        if held is not None:
            await held.wait()
        if epoch is not None and epoch != self.epoch:
            raise StaleEpoch(f"epoch {epoch} is not {self.epoch}", {"current": self.epoch})
        return getattr(self, "_" + method.replace(".", "_"))(p)

    def _launch(self, p: dict[str, Any]) -> dict[str, Any]:
        key = p["launch_key"]
        if key in self.rows and key not in self.live:
            return dict(self.rows[key])   # a launch key is used once: the first result
        if key not in self.live:
            self._next_pid += 1
            self.live[key] = {
                "launch_key": key, "stack": p["stack"], "app": p["app"],
                "instance": p["instance"], "generation": p["generation"],
                "pid": self._next_pid, "start_ticks": self._next_pid * 10}
            self.rows[key] = {**self.live[key], "state": "running", "exit": None}
            self._emit("launched", key, pid=self._next_pid, start_ticks=self._next_pid * 10)
        return dict(self.live[key])

    def exit(self, key: str, exit_code: int | None = 0, signal: int | None = None
             ) -> dict[str, Any]:
        """The process of ``key`` ended: its row says so and an ``exit`` event is added
        (and returned, to feed it as the observation stream would)."""
        row = self.live.pop(key)
        exit_wire = {"exit_code": exit_code, "signal": signal, "core_dumped": False}
        self.rows[key] = {**self.rows[key], "state": "exited", "exit": exit_wire}
        return self._emit("exit", key, pid=row["pid"], **exit_wire)

    def _emit(self, kind: str, key: str, **fields: Any) -> dict[str, Any]:
        event = {"kind": kind, "launch_key": key, "cursor": len(self.events) + 1, **fields}
        self.events.append(event)
        return event

    def _observations_read(self, p: dict[str, Any]) -> dict[str, Any]:
        out = [e for e in self.events if e["cursor"] > p["after"]][:p["limit"]]
        return {"events": out, "gap": False, "cursor": out[-1]["cursor"] if out else
                min(p["after"], len(self.events)), "newest": len(self.events)}

    def _stop(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self.live.get(p["launch_key"])
        if row is None:
            raise NotFound(f"no launch {p['launch_key']!r} with a process")
        self.exit(p["launch_key"], None, 15)
        return {"launch_key": row["launch_key"], "pid": row["pid"], "outcome": "success"}

    def _inspect(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self.rows.get(p["launch_key"])
        if row is None or row.get("pid") is None:
            raise NotFound(f"no launch {p['launch_key']!r} with a process")
        return {**row, "usage": None}

    def _status(self, p: dict[str, Any]) -> dict[str, Any]:
        """What plan-time checks read: the owner's uid and cgroup controllers."""
        import os
        return {"epoch": self.epoch, "uid": os.geteuid(), "cgroup_controllers": None,
                "live": len(self.live)}

    def _inventory(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"epoch": self.epoch, "launches": [dict(r) for r in self.live.values()]}

    def _stack_intents(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"intents": {k: dict(v) for k, v in self.intents.items()}}

    def _stack_set_intent(self, p: dict[str, Any]) -> dict[str, Any]:
        current = self.intents.get(p["stack"], {"intent": "running", "revision": 0})
        if current["revision"] != p["expected_revision"]:
            raise Conflict("intent revision moved", {"revision": current["revision"]})
        self.intents[p["stack"]] = {"intent": p["intent"], "revision": current["revision"] + 1}
        return {"stack": p["stack"], **self.intents[p["stack"]]}

    def _stack_stop_order(self, p: dict[str, Any]) -> dict[str, Any]:
        self.stop_order = p["stacks"]
        return {"stacks": len(p["stacks"])}

    def _logs_forget(self, p: dict[str, Any]) -> dict[str, Any]:
        new = {(s["stack"], s["app"], s["instance"]) for s in p["sources"]} - self.forgotten
        self.forgotten |= new
        return {"sources": len(p["sources"]), "deleted": len(new)}

    def _logs_apps(self, p: dict[str, Any]) -> dict[str, Any]:
        after = (p.get("after_stack") or "", p.get("after_app") or "")
        listed = [{"stack": st, "app": app, "bytes": 100, "last_at": at}
                  for (st, app), at in sorted(self.journal_apps.items()) if (st, app) > after]
        limit = p.get("limit") or self.apps_page
        return {"apps": listed[:limit], "more": len(listed) > limit}

    def _logs_forget_apps(self, p: dict[str, Any]) -> dict[str, Any]:
        apps = {(a["stack"], a["app"]) for a in p["apps"]}
        busy = sorted(k for k, r in self.live.items() if (r["stack"], r["app"]) in apps)
        if busy:
            raise Conflict(f"{len(busy)} processes of these apps still run: {busy}",
                           {"launch_keys": busy})
        gone = [a for a in apps if a in self.journal_apps]
        for a in gone:
            del self.journal_apps[a]
        return {"apps": len(apps), "deleted": 10 * len(gone)}

    def _logs_note(self, p: dict[str, Any]) -> dict[str, Any]:
        self.notes.append(p)
        return {"written": True}

    def _logs_retention(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"default": 64 << 20, "budgets": p["budgets"]}

    def _observations_ack(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"acked": p["cursor"]}

    async def close(self) -> None:
        self._held.clear()


def run_bounded(coro_fn: Callable[[], Awaitable[Any]], guard: float = 30.0) -> Any:
    """``asyncio.run`` of ``coro_fn()``, ended by TimeoutError after ``guard`` seconds:
    a bound reached only by broken code (a hang), never a timing assertion."""
    async def main() -> Any:
        async with asyncio.timeout(guard):
            return await coro_fn()
    return asyncio.run(main())


async def no_sleep(delay: float) -> None:
    """A retry pause that only yields to the loop."""
    await asyncio.sleep(0)


class FakeServer:
    """The drain switch of protocol.server.RpcServer, without a socket."""

    def __init__(self) -> None:
        self.draining = False

    def begin_drain(self) -> None:
        self.draining = True

    def end_drain(self) -> None:
        self.draining = False

    async def close(self) -> None:
        self.draining = True


def fake_generation(home: Path, owner: FakeOwner, config_text: str = "") -> Generation:
    """A Generation as after ``start`` — stores in ``home``, ``owner`` as its owner, an
    Api, no socket and no background loop — with every app of ``config_text`` wanted up.
    Construct inside the running loop; ``close()`` it at the end."""
    from protocol.identity import new_identity

    from .api import Api
    from .config import parse_config
    from .generation import Generation
    from .store import BackendStore, RecoveryStore
    from .supervisor import Supervisor

    gen = Generation(home, "act-unit")
    gen.epoch = owner.epoch
    gen.store = BackendStore(str(home / "backend.db"))
    gen.recovery = RecoveryStore(str(home / "recovery.db"))
    gen.owner_identity = new_identity()
    gen.owner = owner  # type: ignore[assignment]  # the fake speaks the same calls
    gen.config = parse_config(config_text, "unit.toml")
    gen.sup = Supervisor(owner, gen.epoch, on_mutation=gen.invalidate, sleep=no_sleep)
    gen.sup.on_fenced = gen.fenced_off
    gen.sup.keep_starts_in(gen.store, gen.activation)
    gen.sup.retired = gen.store.retired()
    gen.api = Api(gen)
    gen.server = FakeServer()  # type: ignore[assignment]
    for app, index in gen.sup.keys_of(gen.config).values():
        gen.sup.ensure(app, index, True)
    gen.ready = True
    return gen


@contextlib.asynccontextmanager
async def ready_generation(home: Path, owner: FakeOwner, config_text: str,
                           capabilities: Mapping[str, Any] | None = None
                           ) -> AsyncIterator[Generation]:
    """:func:`fake_generation` with the owner ``capabilities`` given, once every instance
    of ``config_text`` is ready; closed when the block ends."""
    from .instance import State
    gen = fake_generation(home, owner, config_text)
    assert gen.sup is not None
    sup = gen.sup
    if capabilities is not None:
        sup.owner_capabilities = dict(capabilities)
    try:
        await until(lambda: bool(sup.instances) and all(
            i.state is State.READY for i in sup.instances.values()), "all ready")
        yield gen
    finally:
        await gen.close()


def run_generation(home: Path, config_text: str,
                   body: Callable[[Generation, FakeOwner], Awaitable[None]], *,
                   ready: bool = True, owner: FakeOwner | None = None) -> None:
    """Run ``body(gen, owner)`` in a fresh event loop on a :func:`fake_generation` of
    ``config_text`` (with ``ready``, once every instance is ready, as
    :func:`ready_generation`), closed afterwards whatever ``body`` raised."""
    import asyncio

    async def main() -> None:
        fake = owner if owner is not None else FakeOwner()
        if ready:
            async with ready_generation(home, fake, config_text) as gen:
                await body(gen, fake)
            return
        gen = fake_generation(home, fake, config_text)
        try:
            await body(gen, fake)
        finally:
            await gen.close()
    asyncio.run(main())


def go_stale(gen: Generation) -> None:
    """Make ``gen``'s view of the owner stale: no word from it for longer than
    protocol.link.STALE_AFTER."""
    from protocol.link import STALE_AFTER
    gen.link.heard(STALE_AFTER + 1)


def api_call(method: str, **params: object) -> Any:
    """A ``protocol.server.Call`` for calling an Api handler directly in a unit test."""
    from protocol.server import Call
    return Call(method, dict(params), None, 1, None)  # type: ignore[arg-type]


async def until_time(done: Callable[[], bool], what: str, within: float = 5.0) -> None:
    """Let real time pass until ``done()`` holds (timers on the loop's clock: readiness
    delays, a pending start's wait), at most ``within`` seconds, a bound only broken
    code reaches. Raises AssertionError naming ``what``."""
    import asyncio
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not done():
        assert loop.time() < deadline, f"{what}: not reached in {within} s"
        await asyncio.sleep(0.005)


async def until(done: Callable[[], bool], what: str, turns: int = 500) -> None:
    """Let the event loop run until ``done()`` holds (at most ``turns`` turns); never
    sleeps. Raises AssertionError naming ``what``."""
    import asyncio
    for _ in range(turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not reached")
