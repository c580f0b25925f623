"""An exec probe running when its backend is SIGKILLed does not outlive it: it ran on
under init for good, the recovered backend started a second copy beside it, and
`tenure down` left the first running."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil

from protocol.layout import home_id

CONFIG = """
[stacks.p.apps.web]
command = ["sleep", "infinity"]
health = {{ kind = "exec", command = ["sh", "-c", "sleep 600; : {token}"], timeout = 600, \
interval = 0.2, failures = 3 }}
"""


def _probes(token: str) -> dict[int, int]:
    """pid -> parent pid of the probe commands (the ``sh`` carrying ``token``)."""
    out = {}
    for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
        if token in " ".join(p.info["cmdline"] or []):
            out[p.info["pid"]] = p.info["ppid"]
    return out


def test_a_probe_of_a_killed_backend_is_ended_by_the_next(cluster: Any) -> None:
    token = f"probe-orphan-{os.path.basename(cluster.home)}"
    try:
        cluster.up(CONFIG.format(token=token))
        cluster.wait_ready(1)
        cluster.wait(lambda: len(_probes(token)) == 1, 30, "the first probe running")
        time.sleep(2.5)   # the probe stays running: it sleeps for 600 s
        dead = cluster.backend_pid()
        marker = f"TENURE_PROBE={home_id(str(cluster.home))}:{dead}:"
        cluster.kill_backend()
        cluster.wait(lambda: cluster.backend_pid() != dead, 60, "a recovered backend")
        again = cluster.backend_pid()

        def settled() -> bool:
            probes = _probes(token)
            return (len(probes) == 1 and list(probes.values()) == [again]
                    and not _marked(marker))
        cluster.wait(settled, 30, "one probe, under the recovered backend, none of the "
                     f"dead one's (now {_probes(token)})")
        assert "exec probes: ended 2 process(es) left by probes of a dead backend" in \
            cluster.backend_log()   # the probe's sh and its sleep
        cluster.down()
        cluster.wait(lambda: not _probes(token), 30, "no probe after down")
    finally:
        for pid in _probes(token):   # only what this test started, should it fail
            try:   # the probe leads its own group: its sleep goes with it
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid \
                    else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_down_ends_the_probes_of_a_backend_that_died_with_its_guardian(
        cluster: Any) -> None:
    """No generation starts after this backend: `tenure down` ends its probes."""
    token = f"probe-down-{os.path.basename(cluster.home)}"
    try:
        cluster.up(CONFIG.format(token=token))
        cluster.wait_ready(1)
        cluster.wait(lambda: len(_probes(token)) == 1, 30, "the probe running")
        with cluster.guardian() as g:
            guardian = g.call("status")["guardian"]["pid"]
        os.kill(guardian, signal.SIGKILL)   # first: it would start another backend
        cluster.wait(lambda: _gone(guardian), 30, "the guardian gone")
        dead = cluster.kill_backend()
        cluster.wait(lambda: _gone(dead), 30, "the backend gone")
        assert len(_probes(token)) == 1   # left running: no backend to end it
        res = cluster.cli("down", timeout=120)
        assert res.code == 0, res
        assert res.out["probes_ended"] == 2, res.out   # the probe's sh and its sleep
        assert not _probes(token)
    finally:
        for pid in _probes(token):
            try:
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid \
                    else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _marked(prefix: str) -> list[int]:
    """Pids whose environment holds a probe marker that starts with ``prefix``."""
    name, _, value = prefix.partition("=")
    out = []
    for p in psutil.process_iter(["pid", "environ"]):
        if (p.info["environ"] or {}).get(name, "").startswith(value):
            out.append(p.info["pid"])
    return out
