"""Launch identities and limits: wire decoding (fuzzed), resolution, enforceability."""

from __future__ import annotations

import os
import pwd
import resource
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from owner.limits import Limits, apply_cgroup_limits, require_cgroup_limits
from owner.runas import ChildSetup, Credentials, RunAs, launch_error, resolve, start_dir
from owner.specs import LaunchSpec
from protocol.codes import Code
from protocol.errors import (
    BadRequest,
    LaunchFailed,
    LimitUnenforceable,
    PrivilegeRequired,
    StopTimeout,
)

NOBODY = pwd.getpwnam("nobody")
ROOT_OWNER = (0, 0, frozenset({0}))
NOBODY_OWNER = (NOBODY.pw_uid, NOBODY.pw_gid, frozenset[int]())


def test_identity_and_limits_round_trip_through_the_launch_spec() -> None:
    wire = {"argv": ["x"], "identity": {"user": "nobody", "group": "nogroup",
                                        "supplementary_groups": ["a", "b"], "umask": 0o027},
            "limits": {"nofile": 10, "nproc": 5, "core": "infinity", "memory_max": 4096,
                       "cpu_quota": 0.5, "pids_max": 7}}
    spec = LaunchSpec.from_wire(wire)
    assert spec.run_as == RunAs("nobody", "nogroup", ("a", "b"), 0o027)
    assert spec.limits.core == resource.RLIM_INFINITY
    again = spec.to_wire()
    assert again["identity"] == wire["identity"] and again["limits"] == wire["limits"]
    assert LaunchSpec.from_wire(again) == spec


def test_a_spec_without_identity_keeps_its_old_wire_shape() -> None:
    assert set(LaunchSpec.from_wire({"argv": ["x"]}).to_wire()) == {"argv", "env", "cwd",
                                                                   "stop"}


@pytest.mark.parametrize("identity", [
    "nobody", {"user": ""}, {"user": 5}, {"user": "a\0b"}, {"group": "g"},
    {"supplementary_groups": ["g"]}, {"user": "u", "supplementary_groups": "g"},
    {"user": "u", "supplementary_groups": ["g"] * 65}, {"umask": 0o1000}, {"umask": -1},
    {"umask": True}, {"umask": "022"},
])
def test_bad_identities_are_bad_requests(identity: Any) -> None:
    with pytest.raises(BadRequest):
        RunAs.from_wire(identity)


@pytest.mark.parametrize("limits", [
    [], {"nofile": -1}, {"nofile": "unlimited"}, {"nproc": 1.5}, {"core": True},
    {"memory_max": 0}, {"pids_max": 0}, {"cpu_quota": 0}, {"cpu_quota": float("nan")},
    {"cpu_quota": 5000}, {"cpu_quota": "1"},
])
def test_bad_limits_are_bad_requests(limits: Any) -> None:
    with pytest.raises(BadRequest):
        Limits.from_wire(limits)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c,
                                                                          max_size=4),
                     max_leaves=12)


@given(st.dictionaries(st.sampled_from(["user", "group", "supplementary_groups", "umask",
                                        "x"]), _json) | _json)
def test_fuzz_identity_parses_or_raises_bad_request(obj: Any) -> None:
    try:
        RunAs.from_wire(obj)
    except BadRequest:
        pass


@given(st.dictionaries(st.sampled_from(["nofile", "nproc", "core", "memory_max",
                                        "cpu_quota", "pids_max", "x"]), _json) | _json)
def test_fuzz_limits_parse_or_raise_bad_request(obj: Any) -> None:
    try:
        Limits.from_wire(obj)
    except BadRequest:
        pass


def test_resolve_gives_the_users_own_groups_and_nothing_of_the_owner() -> None:
    creds = resolve(RunAs("nobody"), ROOT_OWNER)
    assert creds is not None
    assert (creds.uid, creds.gid, creds.user) == (NOBODY.pw_uid, NOBODY.pw_gid, "nobody")
    assert set(creds.groups) == set(os.getgrouplist("nobody", NOBODY.pw_gid))
    assert creds.home == NOBODY.pw_dir
    assert resolve(RunAs(umask=0o22), ROOT_OWNER) is None  # nothing to switch


def test_a_non_root_owner_may_not_switch_but_may_run_as_itself() -> None:
    with pytest.raises(PrivilegeRequired) as e:
        resolve(RunAs("root"), NOBODY_OWNER)
    assert e.value.data == {"user": "root", "uid": 0, "owner_uid": NOBODY.pw_uid}
    with pytest.raises(PrivilegeRequired):
        resolve(RunAs("nobody", group="root"), NOBODY_OWNER)
    assert resolve(RunAs("nobody"), NOBODY_OWNER) is None  # itself: nothing to switch


def test_names_that_vanished_since_the_plan_fail_the_launch() -> None:
    with pytest.raises(LaunchFailed, match="does not exist") as e:
        resolve(RunAs("tn-no-such-user-x"), ROOT_OWNER)
    assert type(e.value) is LaunchFailed
    with pytest.raises(LaunchFailed, match="group 'tn-no-such-group-x'"):
        resolve(RunAs("nobody", supplementary_groups=("tn-no-such-group-x",)), ROOT_OWNER)


def test_rlimits_and_cgroup_files() -> None:
    lim = Limits(nofile=8, core=0, memory_max=1 << 20, cpu_quota=1.5, pids_max=9)
    assert dict(lim.rlimits()) == {resource.RLIMIT_NOFILE: (8, 8), resource.RLIMIT_CORE: (0, 0)}
    assert lim.cgroup_files() == {"memory.max": ("memory", "1048576"),
                                  "cpu.max": ("cpu", "150000 100000"),
                                  "pids.max": ("pids", "9")}


def test_cgroup_limits_need_a_cgroup_with_their_controller() -> None:
    require_cgroup_limits(Limits(nofile=5), None)  # rlimits need no cgroup
    with pytest.raises(LimitUnenforceable, match="no delegated cgroup"):
        require_cgroup_limits(Limits(memory_max=4096), None)
    with pytest.raises(LimitUnenforceable, match="pids controller") as e:
        require_cgroup_limits(Limits(pids_max=3, memory_max=4096), ("memory", "cpu"))
    assert e.value.data == {"limits": ["memory_max", "pids_max"], "missing": ["pids"]}
    require_cgroup_limits(Limits(pids_max=3), ("pids",))


def test_cgroup_limits_are_written_and_refusals_reported(tmp_path: Any) -> None:
    apply_cgroup_limits(Limits(memory_max=4096, pids_max=3), tmp_path)
    assert (tmp_path / "memory.max").read_text() == "4096"
    assert (tmp_path / "pids.max").read_text() == "3"
    with pytest.raises(LimitUnenforceable, match=r"cpu\.max"):
        apply_cgroup_limits(Limits(cpu_quota=1.0), tmp_path / "gone")


def test_only_launches_with_an_identity_umask_or_rlimit_take_the_child_setup() -> None:
    assert ChildSetup.for_launch(None, None, Limits(memory_max=4096), "/", None) is None
    setup = ChildSetup.for_launch(None, 0o7, Limits(nofile=3), "/srv", "/cg/app")
    assert setup is not None and setup.creds is None
    assert setup.cgroup_procs == "/cg/app/cgroup.procs" and setup.cwd == "/srv"


def test_a_launch_starts_in_its_cwd_else_root_for_another_user_else_the_owners() -> None:
    nobody = Credentials(65534, 65534, (65534,), "nobody", "/nonexistent")
    assert start_dir("/srv", nobody) == "/srv" and start_dir("/srv", None) == "/srv"
    assert start_dir(None, nobody) == "/"
    assert start_dir(None, None) is None   # the owner's own, which the child keeps


def test_recorded_launch_failures_come_back_as_their_own_kind() -> None:
    assert launch_error(Code.PRIVILEGE_REQUIRED) is PrivilegeRequired
    assert launch_error("LIMIT_UNENFORCEABLE") is LimitUnenforceable
    assert launch_error(Code.STOP_TIMEOUT) is LaunchFailed  # not a launch failure kind
    assert launch_error("NO_SUCH_CODE") is LaunchFailed and launch_error(None) is LaunchFailed
    assert not issubclass(StopTimeout, LaunchFailed)
