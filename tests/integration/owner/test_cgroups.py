"""Owner cgroup mode: detection and naming on a fake tree, and the real thing as root.

The fake tree is a tmp directory laid out like a cgroup2 mount (the kernel's behaviour
is not emulated: files are plain files). The real tests create a scratch cgroup under
this host's cgroup2 mount at /sys/fs/cgroup/unified (membership only, no controllers,
cgroup.kill works; the ``scratch`` fixture in conftest.py) and remove every cgroup they
create.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from owner import cgroups
from owner.cgroups import CgroupTree, cgroup_name, detect, members, setup
from owner.limits import Limits
from owner.procs import ExitStatus, LaunchSpec, ProcessTable, StopOutcome, StopPolicy
from owner.runas import RunAs
from protocol.errors import LaunchFailed, LimitUnenforceable

ENV = {"PATH": "/usr/bin:/bin"}
HANG_GUARD = 20.0

# -- names -----------------------------------------------------------------------------


def test_cgroup_name_keeps_simple_keys_and_hashes_the_rest() -> None:
    assert cgroup_name("web-1_a") == "web-1_a"
    name = cgroup_name("shop/web/0/3")
    assert name.startswith("shop_web_0_3-") and len(name) == len("shop_web_0_3-") + 12
    assert cgroup_name("shop/web/0/3") == name  # stable


@pytest.mark.parametrize("key", ["..", ".", "cgroup.procs", "memory.max", "a b", "x" * 300,
                                 "ä/ö", "a\\b", "-"])
def test_cgroup_name_is_always_a_safe_directory_name(key: str) -> None:
    name = cgroup_name(key)
    assert name not in ("", ".", "..")
    assert "/" not in name and "." not in name
    assert len(name) <= 64 + 13
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def test_cgroup_names_of_keys_that_sanitize_alike_differ() -> None:
    assert cgroup_name("a/b") != cgroup_name("a_b")
    assert cgroup_name("a/b") != cgroup_name("a.b")
    assert cgroup_name("x" * 100 + "1") != cgroup_name("x" * 100 + "2")


# -- detection on a fake tree ------------------------------------------------------------


def _fake_mount(tmp: Path, own: str = "system.slice/tenure-owner.service",
                controllers: str = "cpu memory pids io") -> tuple[Path, Path]:
    mount = tmp / "cgroup"
    d = mount / own
    d.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text(controllers + "\n")
    for f in ("cgroup.procs", "cgroup.subtree_control"):
        (d / f).write_text("")
    (d / "cgroup.controllers").write_text(controllers + "\n")
    proc = tmp / "self-cgroup"
    proc.write_text(f"0::/{own}\n")
    return mount, proc


def test_detect_finds_a_delegated_cgroup(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    assert detect(mount, proc) == mount / "system.slice/tenure-owner.service"


def test_detect_refuses_hybrid_mounts(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    (mount / "cgroup.controllers").unlink()  # a tmpfs of v1 hierarchies has none
    assert detect(mount, proc) is None


def test_detect_refuses_v1_only_and_the_root(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    proc.write_text("4:memory:/x\n1:name=systemd:/x\n")
    assert detect(mount, proc) is None
    proc.write_text("0::/\n")
    assert detect(mount, proc) is None
    proc.write_text("0::/gone (deleted)\n")
    assert detect(mount, proc) is None
    assert detect(mount, tmp_path / "missing") is None


def test_detect_refuses_a_cgroup_without_writable_interface_files(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    (mount / "system.slice/tenure-owner.service/cgroup.subtree_control").unlink()
    assert detect(mount, proc) is None


def test_setup_on_a_fake_tree_moves_the_owner_into_its_leaf(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    tree = setup(mount, proc)
    assert tree is not None
    own = mount / "system.slice/tenure-owner.service"
    assert (own / "owner/cgroup.procs").read_text() == str(os.getpid())
    assert (own / "apps").is_dir()
    assert (own / "cgroup.subtree_control").read_text().startswith("+")
    assert tree.app_dir("s/a/0/1").parent == own / "apps"


def test_setup_refuses_a_cgroup_shared_with_other_processes(tmp_path: Path) -> None:
    mount, proc = _fake_mount(tmp_path)
    own = mount / "system.slice/tenure-owner.service"
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n1\n")
    assert setup(mount, proc) is None
    assert not (own / "owner").exists()


def test_sweep_removes_empty_leftovers_and_reports_populated(tmp_path: Path) -> None:
    tree = CgroupTree(own=tmp_path, controllers=(), has_kill=False)
    (tmp_path / "apps/empty").mkdir(parents=True)
    (tmp_path / "apps/busy").mkdir()
    (tmp_path / "apps/busy/cgroup.procs").write_text("1\n")  # rmdir fails: not empty
    assert tree.sweep() == ["busy"]
    assert not (tmp_path / "apps/empty").exists()


def test_usage_reads_kernel_files_and_skips_absent_ones(tmp_path: Path) -> None:
    (tmp_path / "memory.current").write_text("4096\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 12\nuser_usec 10\nsystem_usec 2\n")
    (tmp_path / "cgroup.procs").write_text("7\n8\n")
    tree = CgroupTree(own=tmp_path, controllers=(), has_kill=False)
    u = tree.usage(tmp_path)
    assert u["memory_current_bytes"] == 4096 and u["cpu_usage_usec"] == 12
    assert u["procs"] == 2 and "pids_current" not in u


def test_this_host_is_not_delegated() -> None:
    """NOTES.md: hybrid hierarchies here, so the owner keeps process groups."""
    if (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
        pytest.skip("this host mounts pure cgroup2 at /sys/fs/cgroup")
    assert detect() is None


# -- the real thing ----------------------------------------------------------------------


def _tree(scratch: Path) -> CgroupTree:
    # The test process must stay where it is: a helper stands in for the owner.
    helper = subprocess.Popen(["sleep", "60"])
    try:
        tree = cgroups.arrange(scratch, helper.pid)
        assert tree is not None
        assert members(scratch / "owner") == [helper.pid]
        assert members(scratch) == []
    finally:
        helper.kill()
        helper.wait()
    return tree


def _run(body: Callable[[ProcessTable], Awaitable[None]], tree: CgroupTree) -> None:
    async def main() -> None:
        exits: dict[int, ExitStatus] = {}
        table = ProcessTable(lambda key, pid, st: exits.__setitem__(pid, st))
        table.cgroups = tree
        try:
            await body(table)
        finally:
            for key in table.live_keys():
                await table.stop(key, StopPolicy(signal.SIGKILL, 5, 5))
            table.close()
    asyncio.run(asyncio.wait_for(main(), HANG_GUARD))


async def _read_all(fd: int) -> bytes:
    out = b""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            await asyncio.sleep(0.01)
            continue
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out


def test_app_runs_in_its_own_cgroup_from_its_first_instruction(scratch: Path) -> None:
    tree = _tree(scratch)

    async def body(table: ProcessTable) -> None:
        sp = table.launch(LaunchSpec(argv=("cat", "/proc/self/cgroup"), env=ENV),
                          key="s/cat/0/1")
        os.close(sp.stderr_fd)
        out = (await _read_all(sp.stdout_fd)).decode()
        assert f"0::/{scratch.name}/apps/{cgroup_name('s/cat/0/1')}\n" in out
        await table.wait("s/cat/0/1")
        # It left nothing behind, so its exit already removed the cgroup.
        assert not tree.app_dir("s/cat/0/1").exists()

    _run(body, tree)


def test_shim_passes_every_argument_through_unchanged(scratch: Path) -> None:
    tree = _tree(scratch)
    args = ("a b", "$HOME", "*", "'\"", "", "-n", "$(id)", "\\x")

    async def body(table: ProcessTable) -> None:
        sp = table.launch(LaunchSpec(argv=("printf", "%s|", *args), env=ENV),
                          key="s/printf/0/1")
        os.close(sp.stderr_fd)
        out = (await _read_all(sp.stdout_fd)).decode()
        assert out == "".join(f"{a}|" for a in args)
        await table.wait("s/printf/0/1")

    _run(body, tree)


def test_stop_kills_a_forked_grandchild_that_left_the_group(scratch: Path) -> None:
    tree = _tree(scratch)

    async def body(table: ProcessTable) -> None:
        # The grandchild starts its own session: a process-group stop would miss it.
        sp = table.launch(LaunchSpec(argv=("sh", "-c", "setsid sleep 300 & exec sleep 300"),
                                     env=ENV), key="s/fork/0/1")
        for fd in (sp.stdout_fd, sp.stderr_fd):
            os.close(fd)
        path = tree.app_dir("s/fork/0/1")
        deadline = time.monotonic() + HANG_GUARD
        while len(members(path)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        pids = members(path)
        assert sp.pid in pids and len(pids) == 2
        usage = tree.usage(path)
        assert usage["procs"] == 2 and "cpu_usage_usec" in usage
        result = await table.stop("s/fork/0/1", StopPolicy(signal.SIGTERM, 5, 5))
        assert result.outcome is StopOutcome.STOPPED and not result.escalated
        assert all(not Path(f"/proc/{p}").exists() or _is_zombie(p) for p in pids)
        assert not path.exists()

    _run(body, tree)


def test_stop_escalates_with_cgroup_kill(scratch: Path) -> None:
    tree = _tree(scratch)
    assert tree.has_kill

    async def body(table: ProcessTable) -> None:
        sp = table.launch(LaunchSpec(
            argv=("sh", "-c", "trap '' TERM; setsid sleep 300 & sleep 300"), env=ENV),
            key="s/stubborn/0/1")
        for fd in (sp.stdout_fd, sp.stderr_fd):
            os.close(fd)
        path = tree.app_dir("s/stubborn/0/1")
        deadline = time.monotonic() + HANG_GUARD
        while len(members(path)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        result = await table.stop("s/stubborn/0/1", StopPolicy(signal.SIGTERM, 0.3, 5))
        assert result.outcome is StopOutcome.STOPPED and result.escalated
        assert members(path) == [] and not path.exists()

    _run(body, tree)


def test_signal_reaches_every_member(scratch: Path) -> None:
    tree = _tree(scratch)

    async def body(table: ProcessTable) -> None:
        sp = table.launch(LaunchSpec(argv=("sh", "-c", "setsid sleep 300 & exec sleep 300"),
                                     env=ENV), key="s/sig/0/1")
        for fd in (sp.stdout_fd, sp.stderr_fd):
            os.close(fd)
        path = tree.app_dir("s/sig/0/1")
        deadline = time.monotonic() + HANG_GUARD
        while len(members(path)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        table.signal("s/sig/0/1", signal.SIGKILL)
        status = await table.wait("s/sig/0/1")
        assert status.signal == signal.SIGKILL
        while members(path) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert members(path) == []
        result = await table.stop("s/sig/0/1")
        assert result.outcome is StopOutcome.ALREADY_EXITED and not path.exists()

    _run(body, tree)


def test_missing_program_fails_the_launch_and_leaves_no_cgroup(scratch: Path,
                                                               tmp_path: Path) -> None:
    tree = _tree(scratch)
    plain = tmp_path / "not-executable"
    plain.write_text("echo hi\n")
    plain.chmod(0o644)

    async def body(table: ProcessTable) -> None:
        with pytest.raises(LaunchFailed, match="no-such-program"):
            table.launch(LaunchSpec(argv=("no-such-program",), env=ENV),
                         key="s/missing/0/1")
        with pytest.raises(LaunchFailed):
            table.launch(LaunchSpec(argv=(os.fspath(plain),), env=ENV),
                         key="s/noexec/0/1")
        assert sorted(p.name for p in tree.apps.iterdir() if p.is_dir()) == []

    _run(body, tree)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2:].startswith(b"Z")


def test_an_app_switched_to_another_user_still_starts_in_its_own_cgroup(
        scratch: Path) -> None:
    tree = _tree(scratch)

    async def body(table: ProcessTable) -> None:
        spec = LaunchSpec(argv=("sh", "-c", "id -u; cat /proc/self/cgroup"), env=ENV,
                          run_as=RunAs("nobody"))
        sp = table.launch(spec, "s/nobody/0/1")
        os.close(sp.stderr_fd)
        out = (await _read_all(sp.stdout_fd)).decode()
        # the cgroup is joined as root before the switch, so no shim is needed
        assert out.startswith("65534\n")
        assert f"0::/{scratch.name}/apps/{cgroup_name('s/nobody/0/1')}\n" in out
        await table.wait("s/nobody/0/1")

    _run(body, tree)


def test_cgroup_limits_are_set_before_the_app_runs_or_refused(scratch: Path) -> None:
    """This host's cgroup2 mount has no memory or pids controller: the launch is refused
    and leaves nothing. Where they exist, the app's cgroup has the limits."""
    tree = _tree(scratch)
    limits = Limits(memory_max=64 << 20, pids_max=17)

    async def body(table: ProcessTable) -> None:
        spec = LaunchSpec(argv=("cat", "/proc/self/cgroup"), env=ENV, limits=limits)
        if not {"memory", "pids"} <= set(tree.controllers):
            with pytest.raises(LimitUnenforceable):
                table.launch(spec, "s/lim/0/1")
            assert not tree.app_dir("s/lim/0/1").exists() and table.pids() == []
            return
        sp = table.launch(spec, "s/lim/0/1")
        path = tree.app_dir("s/lim/0/1")
        assert (path / "memory.max").read_text().strip() == str(64 << 20)
        assert (path / "pids.max").read_text().strip() == "17"
        os.close(sp.stderr_fd)
        await _read_all(sp.stdout_fd)
        await table.wait("s/lim/0/1")

    _run(body, tree)


def test_metrics_of_an_app_in_its_cgroup_come_from_the_cgroup(scratch: Path) -> None:
    """What ``metrics.read`` measures for a launch in cgroup mode (membership from the
    table, then owner.metrics.Meter): CPU from cpu.stat, the processes of cgroup.procs
    (a child included), memory from memory.current or the members' RSS; with a memory
    controller, an app over memory_max is OOM-killed and ``oom_kills`` counts it."""
    from owner.metrics import Member, Meter
    tree = _tree(scratch)
    busy = "sh -c 'while :; do :; done' & sleep 1000"

    async def body(table: ProcessTable) -> None:
        sp = table.launch(LaunchSpec(argv=("sh", "-c", busy), env=ENV), "s/m/0/1")
        for fd in (sp.stdout_fd, sp.stderr_fd):
            os.close(fd)
        meter, deadline = Meter(), time.monotonic() + 10
        while True:
            cgroup, procs = table.membership("s/m/0/1")
            (sample,) = meter.measure([Member("s/m/0/1", cgroup, procs)])[1]
            if sample["pids"] >= 3 and sample["cpu_seconds"] >= 0.2:
                break
            assert time.monotonic() < deadline, repr(sample)
            await asyncio.sleep(0.1)
        assert cgroup == tree.app_dir("s/m/0/1") and sample["source"] == "cgroup"
        stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
        assert abs(sample["cpu_user_seconds"] - int(stat["user_usec"]) / 1e6) < 0.5
        assert sample["pids"] == len(members(cgroup)) == 3  # sh, its loop and sleep
        assert sample["memory_bytes"] > 0
        if "memory" not in tree.controllers:
            assert sample["oom_kills"] is None
            print("oom_kills not tested: no memory controller in this host's cgroup2")
            return
        assert sample["memory_bytes"] == int((cgroup / "memory.current").read_text())
        # the child is killed, its shell lives on: the cgroup stays to be read
        hog = LaunchSpec(argv=("sh", "-c", "python3 -c 'b = bytearray(256 << 20)'; "
                               "exec sleep 1000"), env=ENV,
                         limits=Limits(memory_max=32 << 20))
        sp = table.launch(hog, "s/hog/0/1")
        for fd in (sp.stdout_fd, sp.stderr_fd):
            os.close(fd)
        while True:
            cgroup, procs = table.membership("s/hog/0/1")
            (after,) = meter.measure([Member("s/hog/0/1", cgroup, procs)])[1]
            if after["oom_kills"]:
                break
            assert time.monotonic() < deadline + 20, repr(after)
            await asyncio.sleep(0.1)

    _run(body, tree)
