"""supervisord adapter: supervisord + supervisorctl over a private unix_http_server socket.

Queries go through supervisord's documented XML-RPC API (supervisor.getAllProcessInfo)
on the same Unix socket supervisorctl uses.
"""

from __future__ import annotations

import http.client
import shlex
import socket
import xmlrpc.client
from pathlib import Path
from typing import Any

from bench.peers import install
from bench.peers.base import (
    PROGRAM_VAR,
    Supervisor,
    daemon_family,
    gone,
    program_names,
    read_pid,
    wait_until,
    write_log_writer,
)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.path_)
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__()
        self.path_, self.timeout_ = path, timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixConnection(self.path_, self.timeout_)


class Supervisord(Supervisor):
    name = "supervisord"

    def __init__(self) -> None:
        super().__init__()
        self.version = install.PY_PINS["supervisor"]
        self.bin = install.PY_PREFIX / "bin"
        self.conf = Path()

    # -- config -------------------------------------------------------------------------
    def _header(self) -> str:
        w = self.workdir
        return f"""[unix_http_server]
file={w}/supervisor.sock
chmod=0700

[supervisord]
logfile={w}/supervisord.log
pidfile={w}/supervisord.pid
childlogdir={w}/childlogs
minfds=4096
loglevel=warn

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{w}/supervisor.sock
"""

    def _write(self, workdir: Path, body: str) -> None:
        self.workdir = workdir
        (workdir / "childlogs").mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "supervisord.conf"
        self.conf.write_text(self._header() + body)

    def setup(self, workdir: Path, n_programs: int, program_argv: list[str]) -> None:
        self.names = program_names(n_programs)
        cmd = shlex.join(program_argv)
        body = "".join(
            f"\n[program:{n}]\ncommand={cmd}\nstartsecs=0\nautorestart=true\n"
            f'environment={PROGRAM_VAR}="{n}"\n'
            for n in self.names)
        self.workdir = workdir
        self._write(workdir, body)

    def setup_logs(self, workdir: Path, lines: int) -> None:
        self.names = ["log"]
        self.workdir = workdir
        argv = write_log_writer(workdir, lines)
        body = (f"\n[program:log]\ncommand={shlex.join(argv)}\nstartsecs=0\n"
                f"autorestart=false\nstdout_logfile={workdir}/log.out\n"
                "stdout_logfile_maxbytes=0\nstdout_logfile_backups=0\n"
                f'environment={PROGRAM_VAR}="log"\n')
        self._write(workdir, body)

    # -- commands -----------------------------------------------------------------------
    def _ctl(self, *args: str) -> list[str]:
        return [str(self.bin / "supervisorctl"), "-c", str(self.conf), *args]

    def start(self) -> None:
        self.run_step("start", [str(self.bin / "supervisord"), "-c", str(self.conf)], 60)

    def status_argv(self) -> list[str]:
        return self._ctl("status")

    def restart_argv(self, name: str) -> list[str]:
        return self._ctl("restart", name)

    def replace_control_plane(self) -> None:
        self.run_step("replace", self._ctl("reload"), 120)

    def stop_supervisor(self) -> None:
        # the daemon removes its pidfile before it exits: wait for the process itself
        pid = read_pid(self.workdir / "supervisord.pid")
        if pid is not None:
            self.run_step("stop", self._ctl("shutdown"), 60, check=False)
            wait_until(lambda: gone(pid), 30, 0.01, "supervisord exit")

    # -- observation --------------------------------------------------------------------
    def _rpc(self) -> Any:
        transport = _UnixTransport(str(self.workdir / "supervisor.sock"))
        return xmlrpc.client.ServerProxy("http://localhost", transport=transport)

    def all_running(self) -> dict[str, int]:
        self.commands.setdefault("query", "XML-RPC supervisor.getAllProcessInfo() on the socket")
        infos = self._rpc().supervisor.getAllProcessInfo()
        return {i["name"]: i["pid"] for i in infos if i["statename"] == "RUNNING" and i["pid"]}

    def pid_of(self, name: str) -> int | None:
        info = self._rpc().supervisor.getProcessInfo(name)
        return info["pid"] if info["statename"] == "RUNNING" and info["pid"] else None

    def own_pids(self) -> list[int]:
        return daemon_family(read_pid(self.workdir / "supervisord.pid"))

    def log_files(self) -> list[Path]:
        return [self.workdir / "log.out"]

    def log_program_exited(self) -> bool:
        info = self._rpc().supervisor.getProcessInfo("log")
        return bool(info["statename"] in ("EXITED", "STOPPED", "FATAL"))
