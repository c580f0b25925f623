"""Helpers to run a real owner in tests and benchmarks, and to act as its guardian.

``OwnerProcess`` starts ``python -m owner --home H`` and waits for it to listen;
``GuardianKey`` holds an Ed25519 key, pins it in the owner and fences epochs — the same
bootstrap the guardian performs on first run (pin, then epoch 1).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.client import Client
from protocol.ed25519 import PrivateKey
from protocol.grant import Grant, public_key_text

from .journal import READ_LIMIT_MAX, Journal, LogRecord, LogSource
from .paths import OwnerPaths

__all__ = ["DISK_FULL", "GuardianKey", "OwnerProcess", "fill_journal", "journal_kept", "read_all",
           "scratch_group"]


# A preload for OwnerProcess: while $TENURE_TEST_HOME/disk-full exists, recording a
# launch as running or exited fails as a full disk would; while .../disk-full-at-start
# exists, so does recording a new launch (its ``starting`` row); while
# .../journal-full exists, so does every write of log lines.
DISK_FULL = """
import os, sqlite3
from owner import journaltables, store

def _marked(marker):
    return os.path.exists(os.path.join(os.environ["TENURE_TEST_HOME"], marker))

_insert = journaltables.Tables._insert
def _journal_insert(self, conn, item):
    if _marked("journal-full"):
        raise sqlite3.OperationalError("database or disk is full")
    return _insert(self, conn, item)
journaltables.Tables._insert = _journal_insert

def _failing(name, marker="disk-full"):
    real = getattr(store.OwnerStore, name)
    def write(self, key, *args, **kw):
        if _marked(marker):
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, key, *args, **kw)
    setattr(store.OwnerStore, name, write)

_failing("mark_running")
_failing("mark_exited")
_failing("insert_launch", "disk-full-at-start")
"""


@dataclass
class OwnerProcess:
    """``preload``: Python source run in the owner process before it starts serving (a
    test's fault injection)."""

    home: Path
    proc: subprocess.Popen[bytes] | None = None
    instance: str = ""
    stderr_path: Path | None = None
    preload: str | None = None
    args: tuple[str, ...] = ()  # more arguments, e.g. ("--service-account", "tenure")

    @property
    def paths(self) -> OwnerPaths:
        return OwnerPaths(self.home)

    def start(self, timeout: float = 15.0) -> OwnerProcess:
        """Start and wait for READY. Raises RuntimeError with the owner's stderr if it
        exits first."""
        self.stderr_path = self.home / f"owner-{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "owner"]
        if self.preload is not None:
            argv = [sys.executable, "-c", self.preload + "\nimport sys\n"
                    "from owner.__main__ import main\nsys.exit(main(sys.argv[1:]))"]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*argv, "--home", str(self.home), *self.args],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("READY "):
            code = self.proc.wait(timeout)
            self.proc.stdout.close()
            raise RuntimeError(f"owner exited {code}: {self.stderr_path.read_text()}")
        self.instance = line.split()[1]
        return self

    def client(self, **kw: Any) -> Client:
        return Client(self.paths.sock, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def run_exit(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``python -m owner ARGS --home H`` to completion (start refusal, reconcile)."""
        return subprocess.run([sys.executable, "-m", "owner", *args, "--home", str(self.home)],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


@dataclass
class GuardianKey:
    key: PrivateKey = field(default_factory=PrivateKey.generate)
    epoch: int = 0
    signed: dict[str, Any] | None = None  # the grant of the last fence

    def grant(self, epoch: int, instance: str, key: PrivateKey | None = None
              ) -> dict[str, Any]:
        g = Grant(epoch, str(uuid.uuid4()), "test-release", instance, time.time())
        return g.sign(key or self.key).to_wire()

    def bootstrap(self, client: Client, instance: str) -> int:
        """Pin this key and fence the next epoch (1 on a new owner)."""
        client.call("guardian.pin", {"public_key": public_key_text(self.key.public_key())})
        return self.fence(client, instance)

    def fence(self, client: Client, instance: str) -> int:
        """Fence the next epoch and present its grant on ``client`` from now on (its
        next call reconnects with the grant in the hello)."""
        self.epoch = max(self.epoch, client.call("status")["epoch"]) + 1
        signed = self.grant(self.epoch, instance)
        client.call("fence", {"grant": signed})
        self.signed = signed
        client.use_grant(signed)
        return self.epoch


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def in_child_as(uid: int, gid: int, fn: Any, groups: tuple[int, ...] = ()) -> Any:
    """Run ``fn()`` in a forked child as ``uid``/``gid`` with only ``groups`` besides
    (tests of who may reach what; needs root). Returns its result through JSON, or
    ``{"exc", "code", "msg"}`` for what it raised."""
    import json
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            out = fn()
        except BaseException as exc:
            out = {"exc": type(exc).__name__, "code": getattr(exc, "code_str", None),
                   "msg": str(exc)[:400]}
        try:
            os.write(w, json.dumps(out, default=str).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def fill_journal(j: Journal, src: LogSource, mib: int) -> None:
    """Append ``mib`` MiB of ``src``'s output in 16 KiB lines; wait until written."""
    for _ in range(mib * 64):
        j.append(src, "stdout", [(b"x" * 16384, 0)])
    assert j.flush(timeout=60)


def journal_kept(j: Journal, app: str) -> int:
    """Bytes of ``app``'s output the journal holds."""
    return sum(len(r.data) for r in read_all(j, app=app))


def read_all(j: Journal, **filters: Any) -> list[LogRecord]:
    """Every committed record of ``j`` matching ``filters``, page by page."""
    out: list[LogRecord] = []
    after = 0
    while batch := j.read(after, READ_LIMIT_MAX, **filters):
        out += batch
        after = batch[-1].id
    return out


@contextlib.contextmanager
def scratch_group(prefix: str) -> Iterator[tuple[str, int]]:
    """A new system group ``<prefix><random>`` (needs root): ``(name, gid)``, deleted
    at the end."""
    import grp
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    subprocess.run(["groupadd", name], check=True, capture_output=True)
    try:
        yield name, grp.getgrnam(name).gr_gid
    finally:
        subprocess.run(["groupdel", name], check=False, capture_output=True)


@contextlib.contextmanager
def out_of_descriptors() -> Iterator[None]:
    """This process out of file descriptors for real, as a busy owner can be: the soft
    RLIMIT_NOFILE lowered to the lowest free descriptor number, so every open fails
    with EMFILE until the block ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
