"""Apps for the socket-activation tests, run by a whole tenure (no test of their own).

- ``app``: a WSGI app for gunicorn, which finds its socket through LISTEN_FDS itself;
  it answers with the serving process's pid.
- ``python socket_apps.py sd``: serves HTTP on every socket systemd-python's
  ``listen_fds_with_names()`` returns; it answers with its pid and the fd names, and
  stops on SIGTERM once the request in hand is answered.
- ``python socket_apps.py store``: the fd store round trip. Without a stored fd named
  ``token`` it makes a pipe, writes a fresh token into it and stores the read end with
  ``FDSTORE=1`` (systemd-python's ``notify(fds=...)``); with one it reads the token back.
  Either way it logs one line and sleeps.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"{os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def serve_sd() -> None:
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from systemd import daemon
    fds = daemon.listen_fds_with_names()
    names = ",".join(fds.values())
    print(f"listening on {sorted(fds)} named {names}", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"{os.getpid()} {names}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class FromFd(HTTPServer):
        def __init__(self, fd: int) -> None:
            super().__init__(("", 0), Handler, bind_and_activate=False)
            self.socket.close()
            self.socket = socket.socket(fileno=fd)

    # SIGTERM ends the loop after the request in hand is answered, as a well-behaved
    # server does; a connection not accepted yet waits in the owner's socket for the next
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    servers = [FromFd(fd) for fd in fds]
    daemon.notify("READY=1")
    while not stop.is_set():
        try:
            ready, _, _ = select.select(servers, [], [], 0.1)
        except InterruptedError:
            continue
        for srv in ready:
            srv._handle_request_noblock()


def store() -> None:
    from systemd import daemon
    found = daemon.listen_fds_with_names()
    token_fd = next((fd for fd, name in found.items() if name == "token"), None)
    if token_fd is not None:
        print(f"found token {os.read(token_fd, 64).decode()}", flush=True)
    else:
        token = uuid.uuid4().hex
        r, w = os.pipe()
        os.write(w, token.encode())
        os.close(w)
        daemon.notify("FDSTORE=1\nFDNAME=token", fds=[r])
        os.close(r)
        print(f"stored token {token}", flush=True)
    daemon.notify("READY=1")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    {"sd": serve_sd, "store": store}[sys.argv[1]]()
