"""tenure in the benchmark suite, driven the way an operator would: the `tenure` CLI
for start, status, upgrade and stop; the backend API socket for the pid queries (the
same socket the CLI uses).

A sealed release is installed once per home in ``setup`` (as a package install would
be), so ``start`` measures what `tenure up --config` does on a machine where tenure is
installed: start owner, guardian and a backend generation, then every program.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.peers.base import (
    PROGRAM_VAR,
    TOKEN_VAR,
    Supervisor,
    daemon_family,
    program_names,
    run,
    write_log_writer,
)
from protocol.client import Client
from protocol.errors import ConnectFailed
from protocol.layout import Layout

_SEALED: Path | None = None


def _sealed(root: Path) -> Path:
    """Seal the installed tenure once per suite run, and bring the installed code's
    bytecode up to date (:func:`byte_compile`)."""
    global _SEALED
    if _SEALED is None or not _SEALED.exists():
        from guardian.seal import seal
        byte_compile()
        _SEALED = seal(root / "tenure-release").path
    return _SEALED


def byte_compile(packages: Iterable[str] | None = None) -> None:
    """Compile the modules of ``packages`` (default: those a release seals,
    guardian.seal.DEFAULT_PACKAGES) whose bytecode is missing or older than their
    source, as pip compiles what it installs. The `tenure` command runs the installed
    code (the daemons run the sealed release, compiled when sealed): a module edited
    since it was compiled would otherwise be compiled again by every command wherever
    PYTHONDONTWRITEBYTECODE is set, and its time counted as tenure's."""
    import compileall
    from importlib.util import find_spec

    from guardian.seal import DEFAULT_PACKAGES
    for name in DEFAULT_PACKAGES if packages is None else packages:
        spec = find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue   # not installed as a package: sealing says so
        for where in spec.submodule_search_locations:
            if not compileall.compile_dir(where, quiet=1):
                raise RuntimeError(f"cannot compile {where}")


def _tenure_command() -> list[str]:
    """The `tenure` script installed beside this interpreter, as operators run it (no
    runpy start-up); ``python -m backend.cli.entry`` (the script's entry point) where there
    is none."""
    script = Path(sys.executable).parent / "tenure"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "backend.cli.entry"]


_TENURE = _tenure_command()


def log_budget(lines: int) -> int:
    """A log budget that keeps ``lines`` of the benchmark's writer with room to spare:
    256 bytes a line (its 45 and the record's cost), at least the 64 MiB default."""
    return max(64 << 20, lines * 256)


def _toml_list(argv: list[str]) -> str:
    return "[" + ", ".join(json.dumps(a) for a in argv) + "]"


class Tenure(Supervisor):
    name = "tenure"

    def __init__(self) -> None:
        super().__init__()
        from importlib.metadata import version
        self.version = version("tenure")
        self.home = Path()
        self.config = Path()
        self._api: Client | None = None

    @property
    def layout(self) -> Layout:
        return Layout(self.home)

    def _cli(self, *args: str) -> list[str]:
        return [*_TENURE, "--home", str(self.home), *args]

    def _prepare_home(self, workdir: Path) -> None:
        """A short home (socket paths) with the release installed and selected."""
        self.workdir = workdir
        self.home = workdir / "h"
        if self.home.exists():
            shutil.rmtree(self.home)
        self.home.mkdir(mode=0o700, parents=True)
        rel = _sealed(workdir.parent)
        run(self._cli("up", "--release", str(rel)), self.cli_env(), timeout=300)
        run(self._cli("down"), self.cli_env(), timeout=120)

    def _write(self, apps: list[tuple[str, list[str], str]], extra: str = "") -> None:
        out = []
        for name, argv, restart in apps:
            out.append(f"[stacks.bench.apps.{name}]\ncommand = {_toml_list(argv)}\n"
                       f'restart = "{restart}"\n'
                       f'env = {{ {PROGRAM_VAR} = "{name}", {TOKEN_VAR} = "{self.token}" }}\n'
                       + extra)
        self.config = self.workdir / "tenure.toml"
        self.config.write_text("\n".join(out))

    def setup(self, workdir: Path, n_programs: int, program_argv: list[str]) -> None:
        self._prepare_home(workdir)
        self.names = program_names(n_programs)
        self._write([(n, program_argv, "always") for n in self.names])

    def setup_logs(self, workdir: Path, lines: int) -> None:
        self._prepare_home(workdir)
        self.names = ["log"]
        # Every line is kept, as the peers are told to (supervisord: maxbytes=0): under
        # the default 64 MiB budget the journal would prune the oldest of a million
        # 45-byte lines (each record costs ~32 bytes more), and they would count as lost.
        self._write([("log", write_log_writer(workdir, lines), "never")],
                    f"log_retention = {log_budget(lines)}\n")
        self._log_base = 0

    # -- commands -----------------------------------------------------------------------
    def start(self) -> None:
        """`tenure up --no-wait`: like supervisord and circus, the command returns once
        the daemons are on their way (the config parsed and queued for the backend);
        'all running' is then timed through the API, as for every peer. The waiting
        `up` returns at about the 'all running' time, with the apply's outcome."""
        self.run_step("start", self._cli("up", "--config", str(self.config), "--no-wait"),
                      300)

    def status_argv(self) -> list[str]:
        return self._cli("status")

    def restart_argv(self, name: str) -> list[str]:
        return self._cli("restart", f"bench/{name}/0")

    def replace_control_plane(self) -> None:
        with Client(self.layout.guardian_sock, pin=False) as g:
            release = g.call("status")["selector"]["current"]
        self.run_step("replace", self._cli("backend", "upgrade", release), 300)

    def stop_supervisor(self) -> None:
        self._close_api()
        if self.home != Path() and self.home.exists():
            self.run_step("stop", self._cli("down"), 180, check=False)

    # -- observation --------------------------------------------------------------------
    def _query(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One backend API call on a connection kept open between queries, as a
        monitoring client keeps one (a handshake per poll loaded the backend while it
        restarted the program being timed); it reconnects by itself after a handoff."""
        if self._api is None or self._api.path != self.layout.api_sock:
            self._close_api()
            self._api = Client(self.layout.api_sock, pin=False, timeout=30)
        return self._api.call(method, params or {})

    def _close_api(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None

    def _status(self) -> dict[str, Any]:
        st: dict[str, Any] = self._query("status")
        return st

    def all_running(self) -> dict[str, int]:
        self.commands.setdefault("query", "backend API `status` on backend/api.sock")
        return {a["app"]: a["pid"] for a in self._status()["apps"]
                if a["pid"] and a["state"] in ("running", "ready")}

    def pid_of(self, name: str) -> int | None:
        """One instance, as `tenure inspect bench/NAME` asks for it."""
        inst = self._query("inspect", {"target": f"bench/{name}"})["instances"][0]
        return int(inst["pid"]) if inst["pid"] and inst["state"] in ("running", "ready") \
            else None

    def own_pids(self) -> list[int]:
        pids: list[int] = []
        for sock, key in ((self.layout.owner_sock, "owner"),
                          (self.layout.guardian_sock, "guardian")):
            with Client(sock, pin=False) as c:
                pids += daemon_family(int(c.call("status")[key]["pid"]))
        return pids

    def log_files(self) -> list[Path]:
        return []  # the journal is SQLite: see log_captured / log_lines

    def log_captured(self) -> int:
        """Lines in the owner's journal; 0 while the owner `up --no-wait` started does
        not listen yet."""
        try:
            with Client(self.layout.owner_sock, pin=False) as c:
                return int(c.call("status")["log_last_id"])
        except ConnectFailed:
            return 0

    def log_expected(self, lines: int) -> int:
        return lines

    def log_lines(self) -> int:
        count, after = 0, 0
        with Client(self.layout.owner_sock, pin=False) as c:
            while recs := c.call("logs.read", {"after": after, "limit": 10_000,
                                               "app": "log"})["records"]:
                count += len(recs)
                after = recs[-1]["id"]
        return count

    def log_program_exited(self) -> bool:
        return any(a["app"] == "log" and a["state"] in ("stopped", "failed")
                   for a in self._status()["apps"])
