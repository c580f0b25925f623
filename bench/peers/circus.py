"""circus adapter: circusd --daemon with ipc:// endpoints in a private directory.

Queries go through circus's ZMQ command API (the ``list`` command per watcher) from a
long-lived helper in the peers venv (bench/peers/_circus_client.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from bench.peers import install
from bench.peers.base import (
    PROGRAM_VAR,
    LineHelper,
    Supervisor,
    daemon_family,
    gone,
    program_names,
    read_pid,
    wait_until,
    write_log_writer,
)

HELPER = Path(__file__).with_name("_circus_client.py")


class Circus(Supervisor):
    name = "circus"

    def __init__(self) -> None:
        super().__init__()
        self.version = install.PY_PINS["circus"]
        self.bin = install.PY_PREFIX / "bin"
        self.conf = Path()
        self.helper: LineHelper | None = None

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.workdir}/endpoint.sock"

    def _header(self) -> str:
        w = self.workdir
        return f"""[circus]
endpoint = {self.endpoint}
pubsub_endpoint = ipc://{w}/pubsub.sock
statsd = False
pidfile = {w}/circusd.pid
logoutput = {w}/circusd.log
loglevel = WARNING
"""

    @staticmethod
    def _watcher(name: str, argv: list[str], extra: str = "") -> str:
        return (f"\n[watcher:{name}]\ncmd = {argv[0]}\nargs = {shlex.join(argv[1:])}\n"
                f"numprocesses = 1\ncopy_env = True\n{extra}"
                f"\n[env:{name}]\n{PROGRAM_VAR} = {name}\n")

    def _write(self, workdir: Path, body: str) -> None:
        self.workdir = workdir
        self.conf = workdir / "circus.ini"
        self.conf.write_text(self._header() + body)

    def setup(self, workdir: Path, n_programs: int, program_argv: list[str]) -> None:
        self.workdir = workdir
        self.names = program_names(n_programs)
        self._write(workdir, "".join(self._watcher(n, program_argv) for n in self.names))

    def setup_logs(self, workdir: Path, lines: int) -> None:
        self.workdir = workdir
        self.names = ["log"]
        extra = ("respawn = False\nstdout_stream.class = FileStream\n"
                 f"stdout_stream.filename = {workdir}/log.out\n")
        self._write(workdir, self._watcher("log", write_log_writer(workdir, lines), extra))

    # -- commands -----------------------------------------------------------------------
    def _ctl(self, *args: str) -> list[str]:
        return [str(self.bin / "circusctl"), "--endpoint", self.endpoint, "--timeout", "120",
                *args]

    def start(self) -> None:
        self.run_step("start", [str(self.bin / "circusd"), "--daemon", str(self.conf)], 60)

    def status_argv(self) -> list[str]:
        return self._ctl("status")

    def restart_argv(self, name: str) -> list[str]:
        return self._ctl("restart", name, "--waiting")

    def replace_control_plane(self) -> None:
        self.run_step("replace", self._ctl("restart"), 180)

    def stop_supervisor(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None
        # the daemon removes its pidfile before it exits: wait for the process itself
        pid = read_pid(self.workdir / "circusd.pid")
        if pid is not None:
            self.run_step("stop", self._ctl("quit", "--waiting"), 120, check=False)
            wait_until(lambda: gone(pid), 30, 0.01, "circusd exit")

    # -- observation --------------------------------------------------------------------
    def _ask(self, req: dict[str, object]) -> dict[str, object]:
        if self.helper is None or not self.helper.alive():
            # -I: the script's directory (which holds this circus.py) must not shadow circus
            argv = [str(install.peer_python()), "-I", str(HELPER), self.endpoint]
            self.helper = LineHelper(argv, self.cli_env())
        out = self.helper.request(req, timeout=30)
        assert isinstance(out, dict)
        if "error" in out:
            raise ConnectionError(str(out["error"]))
        return out

    def all_running(self) -> dict[str, int]:
        self.commands.setdefault("query", "ZMQ command 'list' with properties.name = watcher, "
                                          "once per watcher")
        out = self._ask({"list": self.names})
        return {n: pids[0] for n, pids in out.items() if isinstance(pids, list) and pids}

    def pid_of(self, name: str) -> int | None:
        pids = self._ask({"list": [name]}).get(name)
        return pids[0] if isinstance(pids, list) and pids else None

    def own_pids(self) -> list[int]:
        return daemon_family(read_pid(self.workdir / "circusd.pid"))

    def log_files(self) -> list[Path]:
        return [self.workdir / "log.out"]

    def log_program_exited(self) -> bool:
        return self.pid_of("log") is None
