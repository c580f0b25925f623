"""pm2 adapter: pm2 from bench/.peers/node with a private PM2_HOME per run.

Headless: PM2_HOME is a private temp dir, PM2_NO_INTERACTION=true keeps the pm2.io
(Keymetrics) agent from being launched, and npm's update notifier is off. Queries go
through pm2's own RPC socket (getMonitorData) from a long-lived node helper
(bench/peers/_pm2_client.js), the call `pm2 jlist` makes.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.peers import install
from bench.peers.base import (
    PROGRAM_VAR,
    LineHelper,
    Supervisor,
    daemon_family,
    program_names,
    read_pid,
    write_log_writer,
)

HELPER = Path(__file__).with_name("_pm2_client.js")


class Pm2(Supervisor):
    name = "pm2"

    def __init__(self) -> None:
        super().__init__()
        self.version = install.NPM_PINS["pm2"]
        self.conf = Path()
        self.helper: LineHelper | None = None

    @property
    def home(self) -> Path:
        return self.workdir / "pm2home"

    def cli_env(self) -> dict[str, str]:
        env = super().cli_env()
        env.update(install.headless_env())
        env["PM2_HOME"] = str(self.home)
        return env

    def _app(self, name: str, argv: list[str], **extra: object) -> dict[str, object]:
        app: dict[str, object] = {
            "name": name, "script": argv[0], "args": argv[1:], "interpreter": "none",
            "exec_mode": "fork", "autorestart": True, "env": {PROGRAM_VAR: name},
        }
        app.update(extra)
        return app

    def _write(self, workdir: Path, apps: list[dict[str, object]]) -> None:
        self.workdir = workdir
        self.home.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "ecosystem.json"
        self.conf.write_text(json.dumps({"apps": apps}, indent=1))

    def setup(self, workdir: Path, n_programs: int, program_argv: list[str]) -> None:
        self.names = program_names(n_programs)
        self._write(workdir, [self._app(n, program_argv) for n in self.names])

    def setup_logs(self, workdir: Path, lines: int) -> None:
        self.names = ["log"]
        self.workdir = workdir
        argv = write_log_writer(workdir, lines)
        self._write(workdir, [self._app("log", argv, autorestart=False,
                                        out_file=str(workdir / "log.out"),
                                        error_file=str(workdir / "log.err"))])

    # -- commands -----------------------------------------------------------------------
    def shown_env(self) -> dict[str, str]:
        return {"PM2_HOME": str(self.home), "PM2_NO_INTERACTION": "true"}

    def _cli(self, *args: str) -> list[str]:
        return [str(install.pm2_bin()), *args]

    def start(self) -> None:
        self.run_step("start", self._cli("start", str(self.conf)), 120)

    def status_argv(self) -> list[str]:
        return self._cli("status")

    def restart_argv(self, name: str) -> list[str]:
        return self._cli("restart", name)

    def _close_helper(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None

    def replace_control_plane(self) -> None:
        self._close_helper()  # its socket belongs to the daemon being replaced
        self.run_step("replace", self._cli("update"), 180)

    def stop_supervisor(self) -> None:
        self._close_helper()
        if read_pid(self.home / "pm2.pid") is not None:
            self.run_step("stop", self._cli("kill"), 120, check=False)

    # -- observation --------------------------------------------------------------------
    def _procs(self) -> list[dict[str, object]]:
        if self.helper is None or not self.helper.alive():
            argv = ["node", str(HELPER), str(install.NODE_PREFIX / "node_modules" / "pm2"),
                    str(self.home / "rpc.sock")]
            self.helper = LineHelper(argv, self.cli_env())
        out = self.helper.request({}, timeout=30)
        if not isinstance(out, dict) or "procs" not in out:
            raise ConnectionError(f"pm2 query failed: {out}")
        return list(out["procs"])

    def all_running(self) -> dict[str, int]:
        self.commands.setdefault("query", "pm2 RPC getMonitorData on $PM2_HOME/rpc.sock")
        return {str(p["name"]): int(p["pid"]) for p in self._procs()  # type: ignore[call-overload]
                if p.get("status") == "online" and p.get("pid")}

    def own_pids(self) -> list[int]:
        return daemon_family(read_pid(self.home / "pm2.pid"))

    def log_files(self) -> list[Path]:
        return [self.workdir / "log.out"]

    def log_program_exited(self) -> bool:
        procs = [p for p in self._procs() if p.get("name") == "log"]
        return bool(procs) and procs[0].get("status") in ("stopped", "errored")
