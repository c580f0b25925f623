"""A failed read of /proc is no proof that a process ended. With the owner out of
descriptors, a stop used to count every tracked descendant of an app gone (and forgot
them for good), and a cgroup's members none: the stop was confirmed while they ran on,
and the next launch ran beside them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from owner import targets
from owner.descendants import Descendants
from owner.specs import ExitStatus
from owner.testing import out_of_descriptors
from protocol.procfs import read_stat


def test_tracked_descendants_stay_tracked_and_alive_while_proc_cannot_be_read() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        st = read_stat(child.pid)
        assert st is not None
        tree = Descendants(leader=os.getpid())
        tree.adopt(child.pid, st.start_ticks)
        with out_of_descriptors():
            tree.refresh(leader_unreaped=False)
            alive = tree.alive()
        assert alive == [child.pid] and child.pid in tree.known
        child.kill()
        child.wait()
        tree.refresh(leader_unreaped=False)   # and gone once /proc says so
        assert tree.alive() == [] and tree.known == {}
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_cgroup_whose_members_cannot_be_read_is_not_empty(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    (tmp_path / "cgroup.procs").write_text("")
    launch = SimpleNamespace(exit=ExitStatus(0, None),
                             spawned=SimpleNamespace(cgroup=str(tmp_path), pid=1))
    target = targets.CgroupTarget(launch, None, lambda: False)  # type: ignore[arg-type]
    assert target.group_alive() is False            # read, and empty
    with out_of_descriptors():
        unreadable = target.group_alive()
    assert unreadable is True
    with pytest.raises(OSError), out_of_descriptors():
        open(tmp_path / "cgroup.procs").close()
