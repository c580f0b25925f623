"""A whole tenure (owner, guardian, backend generations) in a temporary home, driven
through the real CLI and sockets — for integration tests and benchmarks.

    rel = seal_once(tmpdir)              # one sealed release, reused by every cluster
    c = Cluster(home, rel).up(config_text)
    c.cli("status")                      # runs `tenure --home H --json status`
    c.down()                             # stops everything; verifies nothing is left
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from protocol.client import Client
from protocol.layout import Layout

__all__ = ["CliResult", "Cluster", "seal_once"]


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
            [sys.executable, "-m", "backend.cli.main", "--home", str(self.home), "--json",
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

    def kill_backend(self) -> int:
        pid = self.backend_pid()
        os.kill(pid, signal.SIGKILL)
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
        """Processes still carrying this home in their command line or environment."""
        me = str(self.home)
        left = []
        for p in psutil.process_iter(["pid", "cmdline", "environ"]):
            try:
                text = " ".join(p.info["cmdline"] or []) + " ".join(
                    f"{k}={v}" for k, v in (p.info["environ"] or {}).items())
            except psutil.Error:
                continue
            if me in text and p.pid != os.getpid():
                left.append(p.pid)
        return left
