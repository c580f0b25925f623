"""Smoke test of the benchmark harness (bench/suite.py) with every registered adapter.

Each adapter runs one session through the suite's own ``run_session`` with tiny counts:
3 programs start, the status CLI answers, one program is killed and restarted, another
is restarted by the documented command (a new pid for it, the same for the others), the
control plane is replaced, and the documented stop exits 0 and leaves nothing behind.
Any scenario error fails the test. A peer that cannot be installed on this machine is
skipped with the reason; with ``TENURE_BENCH_PEERS=required`` (as in CI) that fails
instead.

Waits are sized for 3 programs (the longest, circus noticing a kill -9, takes up to its
5 s check_delay), and each adapter's session has a hard deadline: a hang fails with a
message instead of holding the run. The four sessions take 25 to 30 s on 2 CPUs.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import suite
from bench.peers import install
from bench.peers.base import remove_tree

N = 3
TINY = {"ns": [N], "status_runs": 2, "restart_repeats": 1, "log_lines": 1000,
        "scenario_timeout": 15.0, "settle_s": 0.3}
# a hang guard, not a performance bound: one session takes 3 to 12 s on 2 CPUs
DEADLINE_S = 60.0
SCENARIOS = [name for name, _ in suite.SESSION]


def _why(exc: BaseException) -> str:
    detail = getattr(exc, "stderr", None) or ""
    tail = detail.strip().splitlines()[-1:] if isinstance(detail, str) else []
    return f"{type(exc).__name__}: {exc}" + (f" ({tail[0]})" if tail else "")


def _install_or_skip(name: str) -> None:
    try:
        install.ensure_peer(name)
    except (OSError, subprocess.SubprocessError, SystemExit) as exc:
        reason = f"{name} cannot be installed here: {_why(exc)}"
        if os.environ.get("TENURE_BENCH_PEERS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def bench_tmp() -> Iterator[Path]:
    """A short private directory (socket paths must fit in 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="tb", dir="/tmp"))
    try:
        yield path
    finally:
        remove_tree(path)


def _session(name: str, tmp: Path) -> dict[str, Any]:
    """suite.run_session under DEADLINE_S; whatever the deadline interrupted is stopped."""
    try:
        with suite.bounded(DEADLINE_S, f"{name} session", suite.DeadlinePassed):
            return suite.run_session(name, N, tmp, TINY)
    except suite.DeadlinePassed as exc:
        pytest.fail(f"{exc}, its hard deadline: it hung (it takes seconds when it works)")
    finally:
        suite.stop_active()


@pytest.mark.parametrize("name", list(suite.ADAPTERS))
def test_adapter_runs_every_session_scenario(name: str, bench_tmp: Path) -> None:
    _install_or_skip(name)
    out = _session(name, bench_tmp)

    errors = {s: out[s]["error"] for s in SCENARIOS if "error" in out.get(s, {})}
    assert not errors, f"{name} scenarios failed: {errors}"
    assert [s for s in out if s in SCENARIOS] == SCENARIOS
    assert 0 < out["start"]["start_cmd_s"] <= out["start"]["all_running_s"]
    assert out["memory"]["processes"] >= 1 and out["memory"]["rss_mib"] > 0
    assert out["status"]["runs"] == 2 and out["status"]["exit_codes"] == [0]
    assert len(out["restart"]["samples_ms"]) == 1
    by_cmd = out["restart_cmd"]
    assert (by_cmd["pid_changed"], by_cmd["others_changed"]) == (True, 0), by_cmd
    # tenure replaces its backend under running programs; each peer restarts all of them
    assert out["replace"]["pids_changed"] == (0 if name == "tenure" else N)
    assert out["stop"]["exit_status"] == 0, f"the documented stop failed: {out['stop']}"
    assert out["stop"] == {"error": None, "exit_status": 0, "swept": []}, \
        "the documented stop left processes"
    assert {"start", "status", "restart", "replace", "stop", "query"} <= set(out["commands"])
