"""Every failure explained, through a whole tenure: apps that cannot start (missing
program, not executable, bad cwd, no #! line), one killed by a signal, a tcp readiness
failure, an http health failure, and a notify readiness that never comes (given up, the
start limit's line says which check failed). Each says why in `tenure --json status`
(`reason`) and `inspect` (`last_error`, `last_exit`, `last_probe`), the human DETAIL
column, and the apps that cannot start have tenure lines in `tenure logs`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backend.testing import free_port

HTTP_500 = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(500); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def app(name: str, command: list[str], extra: str = "", restart: str = "on-failure") -> str:
    argv = ", ".join(f'"{a}"' for a in command)
    return (f"\n[stacks.bad.apps.{name}]\ncommand = [{argv}]\nrestart = \"{restart}\"\n"
            "backoff = { initial = 0.05, max = 0.1 }\n"
            "start_limit = { burst = 2, interval = 60 }\n" + extra)


def core_dumps_land_in_cwd() -> bool:
    """A core_pattern that is a plain file name: the kernel writes the core itself."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    return bool(pattern) and not pattern.startswith("|")


def test_every_failure_says_why(cluster: Any, short_home: Path) -> None:
    files = short_home / "files"
    files.mkdir()
    plain = files / "plain"
    plain.write_text("#!/bin/sh\necho hi\n")
    plain.chmod(0o644)
    bare = files / "bare"
    bare.write_text("echo no shebang\n")
    bare.chmod(0o755)
    tcp_port, http_port = free_port(), free_port()
    if core_dumps_land_in_cwd():
        crash, crash_text = "kill -SEGV $$", "killed by SIGSEGV (core dumped)"
    else:
        crash, crash_text = "kill -KILL $$", "killed by SIGKILL"
        print("core_pattern pipes cores to a program: SIGKILL instead of a core dump")
    config = "".join([
        app("missing", ["/nonexistent/tenure-prog"]),
        app("noexec", [str(plain)]),
        app("badcwd", ["true"], 'cwd = "/nonexistent-cwd"\n'),
        app("format", [str(bare)]),
        app("crash", ["sh", "-c", crash], f'cwd = "{files}"\nlimits = {{ core = "infinity" }}\n'),
        app("notready", ["sleep", "1000"], f"ready = {{ kind = \"tcp\", port = {tcp_port}, "
            "timeout = 0.6, interval = 0.1 }\n", restart="never"),
        # never says ready, and a notify check leaves no probe verdict behind
        app("silent", ["sleep", "1000"], 'ready = { kind = "notify", timeout = 0.3 }\n'),
        app("sick", [sys.executable, "-c", HTTP_500.replace('"', '\\"').replace("\n", "\\n"),
                     str(http_port)],
            f"ready = {{ kind = \"tcp\", port = {http_port}, timeout = 20 }}\n"
            f"health = {{ kind = \"http\", url = \"http://127.0.0.1:{http_port}/h\", "
            "interval = 0.1, failures = 2, timeout = 2 }\n", restart="never"),
    ])
    # the apply fails (its apps do not come up), but only after every one has settled
    up = cluster.cli("up", "--timeout", "30", "--config", str(cluster.write_config(config)),
                     "--release", str(cluster.release), timeout=90)
    error = up.out["apply"]["operation"]["error"]
    assert not up.ok and "failed to start: " in error and "['" not in error, up
    assert "No such file or directory; start limit hit (2 starts within 60s))" in error, \
        error                                               # each instance says why
    # `sick` settled ready for the apply, and fails once its health check failed twice
    # (later, on a loaded machine)
    cluster.wait(lambda: all(r["state"] == "failed" for r in cluster.apps().values()), 30,
                 "every app failed")
    status = cluster.cli("status").out
    reasons = {r["app"]: r["reason"] for r in status["apps"]}
    gave_up = "; start limit hit (2 starts within 60s)"   # restart = "on-failure"
    assert reasons == {
        "missing": "spawn failed: /nonexistent/tenure-prog: No such file or directory"
                   + gave_up,
        "noexec": f"spawn failed: {plain}: Permission denied (not executable){gave_up}",
        "badcwd": f"cwd /nonexistent-cwd: No such file or directory{gave_up}",
        "format": f"spawn failed: {bare}: Exec format error (no #! line, or not a program "
                  f"for this machine){gave_up}",
        "crash": crash_text + gave_up,
        "notready": reasons["notready"],
        "silent": f"not ready within 0.3s{gave_up}",
        "sick": f"health: GET http://127.0.0.1:{http_port}/h: status 500",
    }, reasons
    assert reasons["notready"] in (
        f"not ready within 0.6s (last probe: tcp 127.0.0.1:{tcp_port}: {result})"
        for result in ("nothing listens on the port", "connection refused")), reasons

    rows = {i["app"]: i for i in cluster.cli("inspect", "bad").out["instances"]}
    missing = rows["missing"]
    assert (missing["state"], missing["last_outcome"]) == ("failed", "start-limit-hit")
    assert {k: missing["last_error"][k] for k in ("code", "errno", "source")} == \
        {"code": "LAUNCH_FAILED", "errno": "ENOENT", "source": "owner"}
    assert rows["format"]["last_error"]["errno"] == "ENOEXEC"
    crashed = rows["crash"]["last_exit"]
    assert (crashed["text"], crashed["exit_code"]) == (crash_text, None)
    assert crashed["signal"] == crash_text.split()[2] and \
        crashed["core_dumped"] is crash_text.endswith("(core dumped)")
    probe = rows["sick"]["last_probe"]
    assert (probe["check"], probe["probe"], probe["result"]) == (
        "health", f"GET http://127.0.0.1:{http_port}/h", "status 500")
    assert rows["notready"]["last_probe"]["check"] == "readiness"
    assert rows["notready"]["last_exit"] is None   # tenure stopped it: not an exit of its own

    human = cluster.cli_text("status")
    assert "DETAIL" in human and \
        "spawn failed: /nonexistent/tenure-prog: No such file or directory" in human
    logs = cluster.cli_text("logs", "bad/missing", "bad/format").splitlines()
    gone = "spawn failed: /nonexistent/tenure-prog: No such file or directory"
    assert logs.count(f"bad/missing/0 (tenure): {gone}") == 2, logs
    assert f"bad/missing/0 (tenure): start limit hit (2 starts within 60s), not " \
        f"restarting: {gone}" in logs, logs
    assert any(line.startswith("bad/format/0 (tenure): spawn failed: ") for line in logs)
    assert "bad/silent/0 (tenure): start limit hit (2 starts within 60s), not restarting: " \
        "not ready within 0.3s" in cluster.cli_text("logs", "bad/silent"), logs

    # a backend restored after a crash keeps every record (backend.db carries them)
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a published recovery certificate")
    dead = cluster.kill_backend()
    cluster.wait(lambda: cluster.backend_pid() != dead, 60, "a restored backend")
    again = {i["app"]: i for i in cluster.cli("inspect", "bad").out["instances"]}
    assert {n: (r["reason"], r["last_error"], r["last_exit"], r["last_probe"])
            for n, r in again.items()} == \
        {n: (r["reason"], r["last_error"], r["last_exit"], r["last_probe"])
         for n, r in rows.items()}
