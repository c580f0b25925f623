"""Socket activation benchmark: requests served and failed while an app restarts.

Usage: python bench/sockets.py [--restarts 20] [--clients 2] [--app gunicorn|sd] [--keep]

Starts its own tenure in a temporary home from a freshly sealed release with one app
whose listening socket the owner holds: gunicorn (from PyPI, started without --bind: it
finds the socket through LISTEN_FDS) or a small server using systemd-python's
``listen_fds_with_names()`` (``--app sd``). ``--clients`` threads send HTTP/1.0 requests
on fresh connections without pause while the app is restarted ``--restarts`` times with
``tenure restart``. A connection refused (nobody holds the address) and a failed request
(an error or a wrong answer after the connection was accepted) are counted apart; with
the socket held by the owner both must be 0.

Everything started here is stopped again, also on failure or Ctrl-C. The last line
printed is one JSON object:
{"app", "restarts", "clients", "seconds", "requests", "requests_per_s", "failed",
 "refused", "inode_kept"}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.testing import Cluster, free_port, seal_once  # noqa: E402
from bench.peers.base import remove_tree  # noqa: E402

APPS = ROOT / "tests" / "integration" / "sockets"


def config(app: str, port: int) -> str:
    """One app on an owner-held socket; ready once it answers (http readiness)."""
    if app == "gunicorn":
        argv = [sys.executable, "-m", "gunicorn", "--chdir", str(APPS), "--workers", "1",
                "socket_apps:app"]
    else:
        argv = [sys.executable, str(APPS / "socket_apps.py"), "sd"]
    command = ", ".join(json.dumps(a) for a in argv)
    return (f"[stacks.bench.apps.web]\ncommand = [{command}]\n"
            f'ready = {{ kind = "http", url = "http://127.0.0.1:{port}/", timeout = 30 }}\n'
            f"start_limit = {{ burst = 1000, interval = 60 }}\n"
            f'[stacks.bench.apps.web.sockets.http]\nlisten = "127.0.0.1:{port}"\n')


@dataclass
class Counts:
    requests: int = 0
    failed: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def one_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if not data.startswith(b"HTTP/1.") or b" 200 " not in data.split(b"\r\n", 1)[0]:
        raise ValueError(f"bad answer {data[:80]!r}")


def client(port: int, counts: Counts, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            one_request(port)
            outcome = "requests"
        except ConnectionRefusedError:
            outcome = "refused"
        except Exception as exc:
            outcome = "failed"
            with counts.lock:
                counts.errors.append(f"{type(exc).__name__}: {exc}")
        with counts.lock:
            setattr(counts, outcome, getattr(counts, outcome) + 1)


def inode(c: Cluster) -> int:
    with c.owner() as o:
        return int(o.call("sockets.list")["sockets"][0]["inode"])


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="tnb", dir="/tmp"))
    os.chmod(home, 0o700)
    c = Cluster(home, seal_once(work))
    port = free_port()
    try:
        c.up(config(args.app, port))
        c.wait_ready(1)
        first = inode(c)
        counts, stop = Counts(), threading.Event()
        threads = [threading.Thread(target=client, args=(port, counts, stop), daemon=True)
                   for _ in range(args.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for _ in range(args.restarts):
            c.cli("restart", "bench/web", check=True)
        stop.set()
        for t in threads:
            t.join(60)
        seconds = time.monotonic() - t0
        for line in counts.errors[:5]:
            print("failed:", line, file=sys.stderr)
        return {"app": args.app, "restarts": args.restarts, "clients": args.clients,
                "seconds": round(seconds, 2), "requests": counts.requests,
                "requests_per_s": round(counts.requests / seconds, 1),
                "failed": counts.failed, "refused": counts.refused,
                "inode_kept": inode(c) == first}
    finally:
        c.down()
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            remove_tree(home)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--restarts", type=int, default=20)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--app", choices=("gunicorn", "sd"), default="gunicorn")
    p.add_argument("--keep", action="store_true", help="keep the tenure home")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tsb", dir="/tmp"))
    try:
        result = run(args, work)
    finally:
        remove_tree(work)
    print(json.dumps(result))
    return 0 if result["failed"] == 0 and result["refused"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
