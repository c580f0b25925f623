"""With the guardian stopped (SIGSTOP), the commands that ask it say which process is
silent and how to continue it; they said only 'cannot connect to …/guardian.sock:
timed out'."""

from __future__ import annotations

import os
import signal

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def test_a_stopped_guardian_is_named_with_the_command_that_continues_it(cluster) -> None:
    cluster.up(ONE)
    cluster.wait_ready(1)
    guardian = cluster.cli("guardian", "status", check=True).out["guardian"]["pid"]
    os.kill(guardian, signal.SIGSTOP)
    try:
        res = cluster.cli("guardian", "status", timeout=60)
        backend = cluster.cli("backend", "status", timeout=60)
    finally:
        os.kill(guardian, signal.SIGCONT)
    err = res.out["error"]
    assert res.code == 3 and err["code"] == "CONNECT_FAILED", res
    assert err["data"] == {"pid": guardian, "listening": True}, err
    assert f"the guardian (pid {guardian}) accepts on" in err["msg"], err
    assert f"kill -CONT {guardian} continues it" in err["msg"], err
    assert backend.code == 3 and f"kill -CONT {guardian}" in backend.out["error"]["msg"], \
        backend
