"""Fixtures of the system tier: a booted systemd container (root only)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.harness import SystemdContainer, unavailable_reason


@pytest.fixture
def systemd_container() -> Iterator[SystemdContainer]:
    """A running systemd 252 in its own namespaces; powered off and its cgroup removed
    at teardown, whatever the test did."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"SKIP system test: {reason}")
        pytest.skip(reason)
    work = Path(tempfile.mkdtemp(prefix="tsys", dir="/tmp"))
    try:
        with SystemdContainer(work) as c:
            yield c
    finally:
        shutil.rmtree(work, ignore_errors=True)
