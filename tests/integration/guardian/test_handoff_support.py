"""Helpers shared by the handoff, recovery and fault tests (no tests of its own).

- derived releases: a copy of the session's sealed release with one module changed and
  RUNTIME.json rewritten (so it has another id), optionally broken on purpose;
- a guardian started by hand (so a test can choose its environment, e.g. the
  TENURE_GUARDIAN_FAULT hook) and stopped again by its pid;
- small readers: backend processes of a home, the owner's epoch, journal lines.

The test modules import this one by file name (pytest runs with --import-mode=importlib).
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from guardian.manifest import RUNTIME_NAME, canonical_json, parse_runtime, release_id
from guardian.treefiles import sha256_file
from protocol.client import Client
from protocol.errors import TenureError

PHASES = ["created", "checked", "admitted", "draining", "checkpointed", "fenced", "retired",
          "started", "verified", "complete"]
FINAL_OK = {"complete", "aborted", "rolled_back"}

COUNTER = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done"


def config(sleepers: int = 3, counter: bool = False, stack: str = "load") -> str:
    """A config of ``sleepers`` instances of one `sleep` app (+ a numbered-line writer)."""
    text = (f'[stacks.{stack}.apps.sleeper]\ncommand = ["sleep", "infinity"]\n'
            f"instances = {sleepers}\n")
    if counter:
        text += (f'\n[stacks.{stack}.apps.counter]\ncommand = ["sh", "-c", '
                 f"'{COUNTER}']\n")
    return text


# -- derived releases ---------------------------------------------------------------------

def derive_release(base: Path, out: Path, edits: dict[str, Callable[[str], str]],
                   interpreter: dict[str, str] | None = None,
                   tenure_version: str | None = None) -> str:
    """Copy the sealed release ``base`` to ``out``, rewrite each ``lib/<rel>`` source with
    ``edits[rel]``, recompile its pyc exactly as seal does (UNCHECKED_HASH: the release
    runs with -B and would otherwise keep executing the old bytecode) and rewrite
    RUNTIME.json with the new hashes (and ``interpreter``, when given, as the one it was
    sealed under; ``tenure_version``, when given, as its version). Returns the new
    release id."""
    shutil.copytree(base, out)
    for root, _dirs, files in os.walk(out):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    runtime = json.loads((out / RUNTIME_NAME).read_bytes())
    lib = out / "lib"
    for rel, edit in edits.items():
        src = lib / rel
        src.write_text(edit(src.read_text()))
        pyc = Path(importlib.util.cache_from_source(str(src)))
        py_compile.compile(str(src), cfile=str(pyc), dfile=rel, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        for path in (src, pyc):
            key = path.relative_to(out).as_posix()
            assert key in runtime["files"], key
            runtime["files"][key] = sha256_file(path, key)
    if interpreter is not None:
        runtime["interpreter"] = interpreter
    if tenure_version is not None:
        runtime["tenure_version"] = tenure_version
    data = canonical_json(runtime)
    parse_runtime(data)
    (out / RUNTIME_NAME).write_bytes(data)
    return release_id(data)


def _rmtree(path: Path) -> None:
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    shutil.rmtree(path, ignore_errors=True)


def with_generation_code(sealed: Path, factory: Any, name: str, code: str
                         ) -> Iterator[Path]:
    """A module fixture's body: a release derived from ``sealed`` whose
    backend/generation.py ends with ``code`` (a test release's changed start), in a
    temporary directory ``name`` of ``factory`` (pytest's tmp_path_factory), removed
    after."""
    d = factory.mktemp(name)
    derive_release(sealed, d / "b", {"backend/generation.py": lambda t: t + code})
    yield d / "b"
    _rmtree(d)


@dataclass(frozen=True)
class Candidates:
    good: Path          # another release id, works exactly like the sealed one
    preflight_fails: Path   # `python -m backend` exits 3 at import: preflight fails
    crashes: Path       # preflight passes, Generation.start raises before READY
    stubborn: Path      # works, but one of its tasks ignores cancellation: close hangs

    @staticmethod
    def ids(path: Path) -> str:
        return release_id((path / RUNTIME_NAME).read_bytes())


@pytest.fixture(scope="session")
def candidates(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[Candidates]:
    d = tmp_path_factory.mktemp("candidates")
    good, bad, crash, stubborn = d / "good", d / "preflight", d / "crash", d / "stubborn"
    derive_release(sealed_release, good,
                   {"backend/__init__.py": lambda t: t + "\n# candidate B\n"})
    derive_release(sealed_release, bad, {"backend/__main__.py": lambda t: t.replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n"
        'import sys\nsys.stderr.write("candidate refuses to run\\n")\nsys.exit(3)\n', 1)})
    derive_release(sealed_release, crash, {"backend/generation.py": lambda t: t + (
        "\n\nasync def _crash_before_ready(self):\n"
        "    raise RuntimeError('test candidate: crash before READY')\n\n\n"
        "Generation.start = _crash_before_ready\n")})
    derive_release(sealed_release, stubborn, {"backend/generation.py": lambda t: t + STUBBORN})
    yield Candidates(good, bad, crash, stubborn)
    _rmtree(d)


STUBBORN = """

async def _stubborn_task():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # the defect under test: a task that outlives its cancellation


_start_before_stubborn = Generation.start


async def _start_with_a_stubborn_task(self):
    await _start_before_stubborn(self)
    self._tasks.append(asyncio.create_task(_stubborn_task()))


Generation.start = _start_with_a_stubborn_task
"""


def install(cluster: Any, path: Path) -> str:
    with cluster.guardian() as g:
        return str(g.call("release.install", {"path": str(path)})["release"])


# -- daemons of one home ------------------------------------------------------------------

def backend_procs(home: Path) -> list[psutil.Process]:
    """Living backend generations of ``home``: `--home H` with `--activation ID`, or
    `--standby` (a generation started ahead of its handoff, activated through stdin)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if ("--activation" in cmd or "--standby" in cmd) and "--home" in cmd and \
                cmd[cmd.index("--home") + 1] == str(home):
            out.append(p)
    return out


def guardian_status(cluster: Any) -> dict[str, Any]:
    with Client(cluster.layout.guardian_sock, pin=False, timeout=10) as c:
        st: dict[str, Any] = c.call("status")
        return st


def owner_epoch(cluster: Any) -> int:
    with cluster.owner() as c:
        return int(c.call("status")["epoch"])


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.Error:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs after {timeout} s")


def stop_cluster_guardian(cluster: Any, sig: int = signal.SIGTERM) -> int:
    """Signal the guardian `tenure up` started (not our child) and wait until it is gone."""
    pid = int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])
    os.kill(pid, sig)
    wait_gone(pid)
    return pid


class HandGuardian:
    """``python -m guardian --home H`` started by the test, output in files; always
    stopped and reaped by ``stop()`` (by its pid only)."""

    def __init__(self, cluster: Any, fault: str | None = None, tag: str = "hand") -> None:
        self.cluster = cluster
        env = {**os.environ, **cluster.env}
        env.pop("TENURE_GUARDIAN_FAULT", None)
        if fault is not None:
            env["TENURE_GUARDIAN_FAULT"] = fault
        logs = cluster.layout.home / "logs"
        logs.mkdir(mode=0o700, exist_ok=True)
        self.out_path = logs / f"guardian-{tag}.out"
        self.err_path = logs / f"guardian-{tag}.log"
        with open(self.out_path, "wb") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "guardian", "--home", str(cluster.layout.home)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                start_new_session=True, close_fds=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until it printed READY (boot finished: adopted, resumed or recovered)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"READY" in self.out_path.read_bytes():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"guardian exited {self.proc.returncode}:\n"
                                     f"{self.err_path.read_text()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"guardian not ready in {timeout} s:\n"
                             f"{self.err_path.read_text()[-3000:]}")

    def wait_killed(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# -- readers --------------------------------------------------------------------------------

def journal_numbers(cluster: Any, stack: str = "load", app: str = "counter") -> list[int]:
    """Every numbered line the counter app wrote, in journal order."""
    out: list[int] = []
    after = 0
    while True:
        res = cluster.call("logs", {"after": after, "limit": 5000, "stack": stack,
                                    "app": app, "stream": "stdout"})
        recs = res["records"]
        if not recs:
            return out
        for r in recs:
            data = r["data"]
            text = data.decode() if isinstance(data, bytes | bytearray) else str(data)
            out.extend(int(x) for x in text.split())
        after = recs[-1]["id"]


def wait_backend(cluster: Any, timeout: float = 60.0) -> dict[str, Any]:
    """Until a backend answers `status`; returns it."""
    out: dict[str, Any] = {}

    def ok() -> bool:
        out.update(cluster.status())
        return True
    cluster.wait(ok, timeout, "a backend answering status")
    return out


def refused_code(fn: Any) -> str:
    try:
        fn()
    except TenureError as exc:
        return exc.code_str
    raise AssertionError("the call was not refused")
