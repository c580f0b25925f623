"""tcp readiness is attributed by the owner: an app running as another user whose
listener is a child that left the app's process group and session (setsid) is ready,
although neither the group scan nor the listener's uid would have named it; the socket
is one the owner's ``launch.sockets`` reports for the launch (a whole tenure, as root)."""

from __future__ import annotations

from typing import Any

import pytest

from backend.probes import listening_inodes, process_group_members
from backend.testing import free_port

pytestmark = pytest.mark.root

LISTEN = ("import socket, time; s = socket.socket(); "
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(1000)")
CONFIG = """
[stacks.tcp.apps.away]
command = ["sh", "-c", "setsid python3 -c \\"{listen}\\" & wait"]
user = "nobody"
ready = {{ kind = "tcp", port = {port}, timeout = 30, interval = 0.1 }}
"""


def test_a_listener_outside_the_process_group_is_attributed_by_the_owner(
        cluster: Any) -> None:
    port = free_port()
    cluster.up(CONFIG.format(port=port, listen=LISTEN.format(port=port)))
    row = cluster.wait_ready(1)["tcp/away/0"]
    (inode,) = listening_inodes(port)
    with cluster.owner() as o:
        launch_key = next(r["launch_key"] for r in o.call("inventory")["launches"]
                          if r["pid"] == row["pid"])
        assert inode in o.call("launch.sockets", {"launch_key": launch_key})["inodes"]
    # what the probe had without the owner: the leader's group holds no listener
    from protocol.procholders import socket_inodes
    assert inode not in socket_inodes(process_group_members(row["pid"]))
