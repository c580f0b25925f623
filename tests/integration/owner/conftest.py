"""Fixtures of the owner's integration tests."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from owner.testing import OwnerProcess

UNIFIED = Path("/sys/fs/cgroup/unified")
"""This host's cgroup2 mount (hybrid: membership only, no controllers)."""


@pytest.fixture
def owner(short_home: Path) -> Iterator[OwnerProcess]:
    """A real owner on a short home; stopped at the end, which must be clean (exit 0)."""
    o = OwnerProcess(short_home).start()
    yield o
    if o.proc is not None and o.proc.poll() is None:
        assert o.stop() == 0, o.stderr_path.read_text() if o.stderr_path else ""


def _real_cgroups_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    if not (UNIFIED / "cgroup.procs").exists():
        return f"no cgroup2 mount at {UNIFIED}"
    return None


def _empty_and_remove(path: Path) -> None:
    """Kill everything below ``path`` and rmdir it, deepest first (bounded: a cgroup
    whose last process is still exiting refuses rmdir with EBUSY for a moment)."""
    if not path.exists():
        return
    subs = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                  reverse=True)
    for sub in [*subs, path]:
        deadline = time.monotonic() + 5.0
        while sub.exists() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                (sub / "cgroup.kill").write_text("1")
            with contextlib.suppress(FileNotFoundError, OSError):
                sub.rmdir()
            time.sleep(0.02)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A new cgroup under :data:`UNIFIED` (root only), emptied and removed at the end."""
    reason = _real_cgroups_reason()
    if reason:
        print(f"SKIP real cgroup tests: {reason}")
        pytest.skip(reason)
    path = UNIFIED / f"tenure-test-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    try:
        yield path
    finally:
        _empty_and_remove(path)
        assert not path.exists(), f"cgroup {path} left behind"
