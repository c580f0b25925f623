"""The quickstart demo: start a tenure RPC server in a private temporary home, talk to it
with the protocol client, and stop it. Replaced by a real stack as the daemons land."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol import Client
from protocol.sockets import ensure_private_dir


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="tenure-demo-", dir="/tmp"))
    try:
        run = ensure_private_dir(home / "runtime", root=home)
        sock = str(run / "demo.sock")
        server = subprocess.Popen([sys.executable, "-m", "protocol.testing", sock,
                                   "--cap", "demo=1"], stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        print("server:", server.stdout.readline().strip())
        with Client(sock, want={"demo": 1}) as c:
            ident = c.connect().identity
            print(f"connected: pid {ident.pid} instance {ident.instance}")
            t0 = time.perf_counter()
            for i in range(1000):
                c.call("echo", {"i": i})
            dt = time.perf_counter() - t0
            print(f"1000 echo calls in {dt * 1000:.1f} ms ({dt * 1e3:.1f} us each)")
        server.terminate()
        server.wait(10)
        server.stdout.close()
        print("server stopped cleanly" if server.returncode == 0 else
              f"server exited {server.returncode}")
        return server.returncode
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
