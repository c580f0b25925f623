"""A real systemd in throwaway namespaces, for the system tests (root only).

:class:`SystemdContainer` boots ``container/outer.sh`` (systemd as PID 1 of new
namespaces on a tmpfs overlay of /, see the scripts' comments), waits for
``systemctl is-system-running --wait``, runs commands inside with nsenter, and at
:meth:`close` powers it off and removes its cgroup — whatever happened before. Every wait
is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CommandFailed", "Result", "SystemdContainer", "unavailable_reason"]

CONTAINER = Path(__file__).resolve().parent / "container"
NSENTER_NS = ("-m", "-p", "-n", "-u", "-i", "-C")
BOOT_TIMEOUT = 60.0


def unavailable_reason() -> str | None:
    """Why a container cannot be booted here, or None."""
    if os.geteuid() != 0:
        return "system tests need root (namespaces, mounts, cgroups)"
    for tool in ("unshare", "nsenter", "mount", "pivot_root"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/usr/lib/systemd/systemd").exists():
        return "systemd is not installed (/usr/lib/systemd/systemd)"
    try:
        fs = Path("/proc/filesystems").read_text()
    except OSError:
        return "cannot read /proc/filesystems"
    for needed in ("overlay", "cgroup2", "tmpfs"):
        if needed not in fs:
            return f"the kernel has no {needed} filesystem"
    if not (Path("/sys/fs/cgroup/cgroup.controllers").exists()
            or Path("/sys/fs/cgroup/unified/cgroup.procs").exists()):
        return "no cgroup2 hierarchy on the host"
    return None


class CommandFailed(AssertionError):
    pass


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class SystemdContainer:
    """One booted container. Use as a context manager, or call :meth:`close`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.share = workdir / "share"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None
        self.cgroup: Path | None = None
        self.boot_seconds = 0.0

    # -- lifecycle ----------------------------------------------------------------------

    def boot(self) -> SystemdContainer:
        """Start systemd and wait until it is running. Raises CommandFailed (after
        cleaning up) when it does not come up in time."""
        t0 = time.monotonic()
        self.share.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "outer.log", "wb")  # noqa: SIM115 - closed below
        try:
            self.proc = subprocess.Popen([os.fspath(CONTAINER / "outer.sh"),
                                          os.fspath(self.workdir)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         close_fds=True)
        finally:
            log.close()
        try:
            self.pid1 = self._find_pid1(t0 + 10)
            # systemctl fails at once until systemd's private socket exists.
            while self.run("test", "-S", "/run/systemd/private").code != 0:
                if time.monotonic() > t0 + BOOT_TIMEOUT:
                    raise CommandFailed("systemd never opened /run/systemd/private")
                time.sleep(0.05)
            state = self.run("systemctl", "is-system-running", "--wait",
                             timeout=max(1.0, t0 + BOOT_TIMEOUT - time.monotonic()))
            if state.out.strip() not in ("running", "degraded"):
                raise CommandFailed(f"systemd is {state.out.strip()!r} ({state.err.strip()}): "
                                    f"{self.run('systemctl', '--failed').out}")
        except BaseException:
            self.close()
            raise
        self.boot_seconds = time.monotonic() - t0
        return self

    def _find_pid1(self, deadline: float) -> int:
        assert self.proc is not None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CommandFailed(f"outer.sh exited {self.proc.returncode}: "
                                    f"{(self.workdir / 'outer.log').read_text()}")
            with contextlib.suppress(OSError):
                kids = children.read_text().split()
                name = (self.workdir / "cgroup-name").read_text().strip()
                if kids and name:
                    self.cgroup = Path(name)
                    pid = int(kids[0])
                    # PID 1 has become systemd once its nsenter-able root is the overlay.
                    if os.readlink(f"/proc/{pid}/exe").endswith("/systemd"):
                        return pid
            time.sleep(0.05)
        raise CommandFailed("the container's PID 1 did not exec systemd in time")

    def close(self) -> None:
        """Power off (bounded), then kill whatever is left and remove the cgroup.
        Never raises for cleanup failures it can handle; asserts nothing is left."""
        if self.proc is not None and self.proc.poll() is None and self.pid1 is not None:
            with contextlib.suppress(Exception):
                self.run("systemctl", "poweroff", "--no-block", timeout=10)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        if self.proc is not None and self.proc.poll() is None:
            # Killing PID 1 of a pid namespace kills every process in it.
            if self.pid1 is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid1, 9)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.cgroup is not None:
            _remove_cgroup_tree(self.cgroup)
            if self.cgroup.exists():
                raise CommandFailed(f"cgroup {self.cgroup} could not be removed")

    def __enter__(self) -> SystemdContainer:
        return self.boot()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands inside ------------------------------------------------------------------

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 60.0,
            check: bool = False) -> Result:
        """Run ``argv`` inside the container's namespaces. Raises CommandFailed when
        ``check`` and it exits non-zero, subprocess.TimeoutExpired after ``timeout``."""
        assert self.pid1 is not None
        full_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG": "C.UTF-8", **(env or {})}
        cmd = ["nsenter", "-t", str(self.pid1), *NSENTER_NS, "--", "env", "-i",
               *(f"{k}={v}" for k, v in full_env.items()), *argv]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout, close_fds=True)
        res = Result(p.returncode, p.stdout.decode(errors="replace"),
                     p.stderr.decode(errors="replace"))
        if check and res.code != 0:
            raise CommandFailed(f"{' '.join(argv)} exited {res.code}\nstdout: {res.out}\n"
                                f"stderr: {res.err}")
        return res

    def python(self, code: str, timeout: float = 30.0) -> Any:
        """Run a Python snippet inside; it prints one JSON value, which is returned."""
        return self.run("/usr/bin/python3", "-c", code, timeout=timeout, check=True).json()

    def unit(self, name: str) -> dict[str, str]:
        out = self.run("systemctl", "show", name, "-p", "ActiveState,SubState,MainPID,Result",
                       check=True).out
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _remove_cgroup_tree(path: Path, timeout: float = 10.0) -> None:
    """Kill every process below ``path`` and rmdir it, deepest first (bounded)."""
    if not path.exists():
        return
    subs = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                  reverse=True)
    for d in [*subs, path]:
        deadline = time.monotonic() + timeout
        while _procs(d) and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                (d / "cgroup.kill").write_text("1")
            time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError, OSError):
            d.rmdir()


def _procs(d: Path) -> list[str]:
    try:
        return (d / "cgroup.procs").read_text().split()
    except OSError:
        return []
