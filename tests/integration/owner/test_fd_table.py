"""The owner grows its descriptor table once, at start (owner.reaper.reserve_fd_table):
a table grown later, while the journal's threads run, stalls the launch that did not
fit for an RCU grace period."""

from __future__ import annotations

import json
import subprocess
import sys

from owner.reaper import FD_TABLE_RESERVE
from owner.testing import OwnerProcess

# Runs in a helper: the table and the limit are process-wide. Prints the table's size
# (FDSize) and the open descriptors before and after, and what reserve_fd_table returned.
PROBE = """
import json, os, resource, sys
from owner.reaper import reserve_fd_table
def size():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("FDSize:")).split()[1])
soft = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(
    resource.RLIMIT_NOFILE)[1]))
before = (size(), sorted(os.listdir("/proc/self/fd")))
got = reserve_fd_table(soft, int(sys.argv[2]))
print(json.dumps({"before": before[0], "after": size(), "got": got,
                  "same_fds": sorted(os.listdir("/proc/self/fd")) == before[1]}))
"""


def probe(soft: int, want: int) -> dict[str, int | bool]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(soft), str(want)],
                         capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, int | bool] = json.loads(out.stdout)
    return result


def fd_table_size(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(next(line for line in f if line.startswith("FDSize:")).split()[1])


def test_the_table_grows_to_what_is_asked_and_no_descriptor_stays_open() -> None:
    r = probe(8192, 4096)
    assert r["before"] < 4096 <= r["after"]
    assert r["got"] == 4096
    assert r["same_fds"] is True


def test_the_soft_limit_bounds_the_table() -> None:
    r = probe(1000, 4096)
    assert r["got"] == 1000
    assert 1000 <= r["after"] < 4096
    assert r["same_fds"] is True


def test_a_refusal_is_reported_as_zero_and_leaves_nothing_open() -> None:
    # told a limit above the real one: the kernel refuses the descriptor
    refused = subprocess.run(
        [sys.executable, "-c", "import os, resource\n"
         "from owner.reaper import reserve_fd_table\n"
         "resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit("
         "resource.RLIMIT_NOFILE)[1]))\n"
         "before = sorted(os.listdir('/proc/self/fd'))\n"
         "print(reserve_fd_table(100_000), sorted(os.listdir('/proc/self/fd')) == before)"],
        capture_output=True, text=True, timeout=60, check=True)
    assert refused.stdout.split() == ["0", "True"]
    assert "cannot reserve 4096 descriptor slots" in refused.stderr


def test_the_owner_starts_with_its_table_reserved(owner: OwnerProcess) -> None:
    assert owner.proc is not None
    assert fd_table_size(owner.proc.pid) >= FD_TABLE_RESERVE
