"""The owner's measurements: cgroup interface files, /proc sums, monotonic counters."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from backend.cli import render, render_metrics, top
from backend.metrics import MEASURED
from backend.usage import Usage
from owner import metrics
from owner.metrics import (
    FIELDS,
    USAGE,
    Member,
    Meter,
    parse_io_stat,
    parse_keyed,
    parse_value,
    read_cgroup,
    read_procs,
)
from owner.testing import out_of_descriptors
from protocol import procfs
from protocol.procfs import parse_io, parse_usage, read_stat

CGROUPFS = Path(__file__).parent / "cgroupfs"
STAT = (b"4242 (a) b)) S 1 4242 4242 0 -1 4194560 500 0 0 0 "
        b"300 200 40 10 20 0 1 0 987654 10000000 25 18446744073709551615")


def test_a_full_cgroup_gives_every_figure_from_the_kernel():
    s = read_cgroup(CGROUPFS / "full")
    assert s == {"cpu_user_seconds": 2.5, "cpu_system_seconds": 1.0,
                 "memory_bytes": 52428800, "memory_peak_bytes": 73400320, "pids": 3,
                 "io_read_bytes": 5096, "io_write_bytes": 8192, "oom_kills": 2}


def test_missing_controller_files_are_unknown_or_counted_never_zero_guesses():
    s = read_cgroup(CGROUPFS / "old_kernel")
    assert s["cpu_user_seconds"] == 0.0001 and s["cpu_system_seconds"] == 0.00002
    assert s["memory_bytes"] == 4096
    assert s["memory_peak_bytes"] is None and s["oom_kills"] is None
    assert s["io_read_bytes"] is None and s["io_write_bytes"] is None
    assert s["pids"] == 0  # no pids.current: cgroup.procs is counted (empty here)


def test_a_cgroup_that_is_gone_reports_nothing_known():
    s = read_cgroup(CGROUPFS / "no-such-cgroup")
    assert s["memory_bytes"] is None and s["cpu_user_seconds"] is None
    assert s["pids"] == 0 and s["oom_kills"] is None


@pytest.mark.parametrize("text", ["max\n", "", "-1", "12 13", "0x10", None])
def test_a_value_file_that_is_not_one_number_is_unknown(text):
    assert parse_value(text) is None


def test_keyed_files_skip_malformed_lines():
    assert parse_keyed("a 1\nb x\nc 2 3\n\nd 4\n") == {"a": 1, "d": 4}


@pytest.mark.parametrize("text", ["8:0 rbytes=1\n", "8:0 rbytes=x wbytes=1\n",
                                  "nodev rbytes=1 wbytes=2\n"])
def test_malformed_io_stat_fails_closed(text):
    assert parse_io_stat(text) is None


def test_empty_io_stat_is_zero_bytes():
    assert parse_io_stat("") == (0, 0)


def test_stat_usage_includes_reaped_children_and_survives_odd_comm():
    u = parse_usage(STAT)
    assert (u.cpu_user_ticks, u.cpu_system_ticks) == (340, 210)
    assert u.start_ticks == 987654 and u.rss_pages == 25 and not u.zombie


def test_proc_io_needs_both_lines():
    assert parse_io(b"rchar: 9\nread_bytes: 4096\nwrite_bytes: 512\n") == (4096, 512)
    with pytest.raises(ValueError):
        parse_io(b"rchar: 9\nread_bytes: 4096\n")


def test_proc_sum_counts_only_the_tracked_process_not_a_pid_reuser():
    st = read_stat(os.getpid())
    assert st is not None
    mine = read_procs([(os.getpid(), st.start_ticks)])
    assert mine["pids"] == 1 and mine["memory_bytes"] > 0
    assert mine["cpu_user_seconds"] + mine["cpu_system_seconds"] > 0
    assert mine["oom_kills"] is None
    twice = read_procs([(os.getpid(), st.start_ticks)] * 2)
    assert twice["memory_bytes"] >= 2 * mine["memory_bytes"] * 0.9
    stranger = read_procs([(os.getpid(), st.start_ticks + 1), (2**22 + 7, 1)])
    assert stranger["pids"] == 0 and stranger["memory_bytes"] == 0
    assert stranger["io_read_bytes"] is None


def test_usage_only_reads_cpu_and_memory_alone():
    full, usage = read_cgroup(CGROUPFS / "full"), read_cgroup(CGROUPFS / "full", True)
    assert usage == {**dict.fromkeys(full), **{k: full[k] for k in USAGE}}
    assert usage["memory_bytes"] == 52428800 and usage["cpu_user_seconds"] == 2.5
    gone = read_cgroup(CGROUPFS / "old_kernel", usage_only=True)
    assert gone["memory_bytes"] == 4096 and gone["pids"] is None
    st = read_stat(os.getpid())
    assert st is not None
    mine = read_procs([(os.getpid(), st.start_ticks)], usage_only=True)
    assert mine["memory_bytes"] > 0 and mine["cpu_user_seconds"] > 0
    assert mine["io_read_bytes"] is None and mine["pids"] is None


def _fake(seq: list[dict[str, Any]]) -> Any:
    def read(procs: Any, usage_only: bool = False) -> dict[str, Any]:
        base = {"cpu_user_seconds": 0.0, "cpu_system_seconds": 0.0, "memory_bytes": 0,
                "memory_peak_bytes": None, "pids": 1, "io_read_bytes": 0,
                "io_write_bytes": 0, "oom_kills": None}
        return {**base, **seq.pop(0)}
    return read


def test_counters_never_go_down_and_peak_is_the_highest_seen(monkeypatch):
    monkeypatch.setattr(metrics, "read_procs", _fake([
        {"cpu_user_seconds": 5.0, "cpu_system_seconds": 1.0, "memory_bytes": 300,
         "io_read_bytes": 10},
        {"cpu_user_seconds": 2.0, "cpu_system_seconds": 1.5, "memory_bytes": 100,
         "io_read_bytes": 4},
        {"cpu_user_seconds": 2.0, "cpu_system_seconds": 1.0, "memory_bytes": 50},
    ]))
    meter, m = Meter(), Member("k", None, ((1, 1),))
    _, [a] = meter.measure([m])
    _, [b] = meter.measure([m])
    assert (a["cpu_seconds"], a["memory_peak_bytes"], a["source"]) == (6.0, 300, "proc")
    assert (b["cpu_user_seconds"], b["cpu_system_seconds"]) == (5.0, 1.5)
    assert b["cpu_seconds"] == 6.0 and b["io_read_bytes"] == 10   # the sum: 3.5 < 6.0
    assert b["memory_bytes"] == 100 and b["memory_peak_bytes"] == 300
    meter.measure([])  # the launch ended: forgotten
    _, [c] = meter.measure([m])
    assert c["cpu_seconds"] == 3.0 and c["memory_peak_bytes"] == 50


def test_cpu_seconds_is_the_highest_sum_not_the_sum_of_each_highest(monkeypatch):
    """Regression: user and system were each kept at their highest, and cpu_seconds
    was their sum, from different moments: a child's user time leaving the sum made
    the app's new user time vanish under the old high, and CPU% read 0.0 for a busy
    app (here 1 s of CPU in each second) until it made up the difference."""
    monkeypatch.setattr(metrics, "read_procs", _fake([
        {"cpu_user_seconds": 5.0, "cpu_system_seconds": 1.0},   # a child's 3 s of user
        {"cpu_user_seconds": 2.5, "cpu_system_seconds": 4.5},   # ... left; busy in system
        {"cpu_user_seconds": 3.5, "cpu_system_seconds": 4.5},   # busy in user
        {"cpu_user_seconds": 4.5, "cpu_system_seconds": 4.5},
    ]))
    meter, m = Meter(), Member("k", None, ((1, 1),))
    got = [meter.measure([m])[1][0]["cpu_seconds"] for _ in range(4)]
    assert got == [6.0, 7.0, 8.0, 9.0]


def _usage(user: int, system: int, rss: int, ticks: int, zombie: bool) -> Any:
    return procfs.ProcUsage(user, system, rss, ticks, zombie)


def test_a_zombie_childs_cpu_counts_until_it_is_reaped_but_not_its_memory(monkeypatch):
    """Regression: an exited child not yet reaped (a zombie) was left out whole, so its
    CPU time vanished from the app's sum the moment it exited (CPU% 0.0 meanwhile, and
    the counter held below what the app used). Its /proc stat still gives its CPU time;
    a zombie holds no memory and is no process of the app any more."""
    hz = os.sysconf("SC_CLK_TCK")
    table = {10: _usage(2 * hz, hz, 100, 7, False), 11: _usage(3 * hz, hz, 0, 8, True)}
    monkeypatch.setattr(metrics, "read_usage_strict", lambda pid: table.get(pid))
    monkeypatch.setattr(metrics, "read_io_strict", lambda pid: (1, 2))
    got = read_procs([(10, 7), (11, 8)])
    assert (got["cpu_user_seconds"], got["cpu_system_seconds"]) == (5.0, 2.0)
    assert got["memory_bytes"] == 100 * os.sysconf("SC_PAGE_SIZE") and got["pids"] == 1
    assert got["io_read_bytes"] == 1   # of the living process alone
    usage = read_procs([(10, 7), (11, 8)], usage_only=True)
    assert (usage["cpu_user_seconds"], usage["cpu_system_seconds"]) == (5.0, 2.0)
    assert read_procs([(11, 9)])["cpu_user_seconds"] == 0.0   # another process's pid


def test_measuring_some_launches_keeps_the_others_highest_counters(monkeypatch):
    """An inspect of one app measures that launch alone: another launch's counters
    must not go down at the next status for it (a child of it ended meanwhile)."""
    monkeypatch.setattr(metrics, "read_procs", _fake([
        {"cpu_user_seconds": 5.0, "io_read_bytes": 10},   # a, then b
        {"cpu_user_seconds": 7.0, "io_read_bytes": 20},
        {"cpu_user_seconds": 6.0},                        # a alone
        {"cpu_user_seconds": 6.0},                        # a, then b: its child ended
        {"cpu_user_seconds": 1.0, "io_read_bytes": 2},
        {"cpu_user_seconds": 6.0},                        # a alone, b gone
        {"cpu_user_seconds": 1.0},                        # b under a new start
    ]))
    meter = Meter()
    a, b = Member("a", None, ((1, 1),)), Member("b", None, ((2, 2),))
    meter.measure([a, b])
    meter.measure([a], live=["a", "b"])
    _, [_, b2] = meter.measure([a, b])
    assert b2["cpu_user_seconds"] == 7.0 and b2["io_read_bytes"] == 20
    meter.measure([a], live=["a"])                       # b ended: forgotten
    assert meter.measure([b])[1][0]["cpu_user_seconds"] == 1.0


def _me() -> tuple[int, int]:
    st = read_stat(os.getpid())
    assert st is not None
    return os.getpid(), st.start_ticks


def test_an_owner_out_of_descriptors_reports_unknown_not_zero():
    """Regression: with /proc unreadable (EMFILE) an app showed MEM 0 B, CPU 0.0% and
    PIDS 0: the sums started at 0 and every unreadable process was skipped."""
    me = _me()
    with out_of_descriptors():
        with pytest.raises(OSError) as err:
            os.open("/dev/null", os.O_RDONLY)
        full, usage = read_procs([me]), read_procs([me], usage_only=True)
        cgroup = read_cgroup(CGROUPFS / "old_kernel")   # no pids.current: counts members
    assert err.value.errno == errno.EMFILE
    assert full == dict.fromkeys(FIELDS) and usage == dict.fromkeys(FIELDS)
    assert cgroup["pids"] is None and cgroup["memory_bytes"] is None


@pytest.mark.parametrize("err", [errno.EMFILE, errno.EACCES, errno.EIO])
def test_a_process_that_cannot_be_read_makes_every_figure_unknown(monkeypatch, err):
    ghost = 2**22 + 7
    _fail_open(monkeypatch, f"/proc/{ghost}/stat", err)
    assert read_procs([_me(), (ghost, 1)]) == dict.fromkeys(FIELDS)


@pytest.mark.parametrize("err", [errno.ENOENT, errno.ESRCH])
def test_a_process_gone_between_listing_and_reading_is_left_out(monkeypatch, err):
    """It exited: not part of the app any more, so the others' sums stay known."""
    ghost = 2**22 + 7
    _fail_open(monkeypatch, f"/proc/{ghost}/stat", err)
    got = read_procs([_me(), (ghost, 1)])
    assert got["pids"] == 1 and got["memory_bytes"] > 0
    assert got["cpu_user_seconds"] is not None and got["io_read_bytes"] is not None


def test_io_of_one_unreadable_process_is_unknown_not_a_partial_sum(monkeypatch):
    """EACCES on /proc/PID/io (a non-dumpable process): the app's I/O is None while its
    CPU and memory, read from /proc/PID/stat, stay known."""
    _fail_open(monkeypatch, f"/proc/{os.getpid()}/io", errno.EACCES, after=1)
    got = read_procs([_me(), _me()])
    assert got["io_read_bytes"] is None and got["io_write_bytes"] is None
    assert got["pids"] == 2 and got["memory_bytes"] > 0


def _fail_open(monkeypatch: pytest.MonkeyPatch, path: str, err: int, after: int = 0
               ) -> None:
    """os.open of ``path`` fails with ``err`` (after ``after`` opens that work)."""
    real, seen = os.open, [0]

    def fake(p: Any, *args: Any, **kwargs: Any) -> int:
        if p == path:
            seen[0] += 1
            if seen[0] > after:
                raise OSError(err, os.strerror(err), p)
        return real(p, *args, **kwargs)
    monkeypatch.setattr(procfs.os, "open", fake)


def test_unknown_figures_reach_status_top_and_metrics_as_dashes_and_null():
    """The owner's None goes through the backend (backend.usage, backend.metrics) to
    the CLI: `-` in `status`, `top` and `metrics`, null in `--json`, never 0."""
    pid, ticks = _me()
    with out_of_descriptors():
        at, [sample] = Meter().measure([Member("k", None, ((pid, ticks),))])
    answer = {"at": at, "launches": [{**sample, "launch_key": "k", "pid": pid,
                                      "start_ticks": ticks}]}
    cpu, rss = Usage(clock=lambda: at).from_owner(answer)[(pid, ticks)]
    assert (cpu, rss) == (None, None)
    row = {"key": "s/a/0", "stack": "s", "app": "a", "state": "ready", "pid": pid,
           "uptime": 5.0, "restarts": 0, "ready": True, "cpu_percent": cpu, "rss": rss}
    out = render.status({"backend": {"activation": "a1", "epoch": 2, "pid": 10,
                                     "draining": False, "config": "/c.toml"},
                         "intents": {}, "apps": [row]})
    assert out.splitlines()[-1].split()[6:] == ["-", "-"]     # CPU, MEM
    snap = top.pick({"apps": [row]}, "cpu", None)
    assert snap["rss"] is None and snap["cpu_percent"] is None
    app = {"key": "s/a/0", "state": "ready", "ready": True, "restarts": 0,
           "start_time_seconds": None, **{name: sample.get(name) for name in MEASURED}}
    shown = render_metrics.metrics({"apps": [app], "owner_connected": True, "epoch": 2,
                                    "certificate_age_seconds": None, "log_dropped": [],
                                    "listener": None})
    assert shown.splitlines()[1].split()[4:] == ["-"] * 6   # UPTIME .. OOM
