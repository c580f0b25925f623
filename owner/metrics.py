"""Resource figures of every live launch, measured by the owner (``metrics.read``).

The owner knows exactly which processes belong to a launch, so it is the one that
measures. Two sources, picked per launch:

- ``cgroup`` (per-app cgroups, :mod:`owner.cgroups`): the kernel's own accounting for the
  whole app — ``cpu.stat``, ``memory.current``, ``memory.peak``, ``pids.current``,
  ``memory.events`` (``oom_kill``) and ``io.stat``. A file the kernel does not offer
  (a controller not enabled, an older kernel) falls back to /proc of the cgroup's
  members (memory, I/O, process count) or stays unknown (peak, OOM kills).
- ``proc`` (process groups): the leader and the descendants the owner tracks
  (:mod:`owner.descendants`), summed from /proc/PID/stat and /proc/PID/io.

Why the counters are clamped: summed over the tracked processes, CPU seconds and I/O
bytes drop when a process exits and is reaped by no tracked parent (an orphan the owner
reaps takes its time with it; until it is reaped, a zombie's CPU time still counts). A
counter that goes down reads as a reset to Prometheus, so each launch's counters are
reported as the highest value measured so far; ``cpu_seconds`` is the highest sum of
user and system measured, not the sum of each one's highest. ``memory_peak_bytes``
is the kernel's ``memory.peak`` where there is one, else the highest sum the owner saw.
A figure nobody can tell (OOM kills without a cgroup) is None, never 0.

Gone versus unreadable: a process that exited between being listed and being read
(ENOENT, ESRCH) is simply no longer part of the app and is left out of the sums. A figure
/proc would not give for any other reason (the owner out of descriptors: EMFILE; EACCES;
a line that does not parse) makes the sum it belongs to None: leaving that process out
would report less than the app uses, and an app whose every read failed as using 0.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.procfs import read_io_strict, read_usage_strict, start_ticks
from protocol.procholders import socket_inodes

from .cgroups import members, members_strict

__all__ = ["COUNTERS", "FIELDS", "USAGE", "USAGE_REUSE_S", "Member", "Meter", "UsageMemo",
           "launch_inodes", "parse_io_stat",
           "parse_keyed", "parse_value", "read_cgroup", "read_procs"]

_HZ = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")

FIELDS = ("cpu_user_seconds", "cpu_system_seconds", "memory_bytes", "memory_peak_bytes",
          "pids", "io_read_bytes", "io_write_bytes", "oom_kills")
COUNTERS = ("cpu_user_seconds", "cpu_system_seconds", "io_read_bytes", "io_write_bytes",
            "oom_kills")
USAGE = ("cpu_user_seconds", "cpu_system_seconds", "memory_bytes")
"""What a ``usage_only`` measurement reads: the CPU and memory a status line shows."""
_UNKNOWN = dict.fromkeys(FIELDS)

Sample = dict[str, Any]


@dataclass(frozen=True)
class Member:
    """What to measure for one live launch: its cgroup, or its processes."""

    launch_key: str
    cgroup: Path | None
    procs: tuple[tuple[int, int], ...]  # (pid, start ticks), the leader first


def parse_value(text: str | None) -> int | None:
    """A single-number interface file (``memory.current``); None for absent, ``max`` or
    anything else that is not one non-negative integer."""
    if text is None:
        return None
    word = text.strip()
    return int(word) if word.isdigit() else None


def parse_keyed(text: str | None) -> dict[str, int]:
    """A flat-keyed file (``cpu.stat``, ``memory.events``): ``key value`` per line. A
    line that is not exactly that is left out, so a field it would give stays unknown."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_io_stat(text: str | None) -> tuple[int, int] | None:
    """(rbytes, wbytes) summed over every device of ``io.stat``
    (``MAJ:MIN rbytes=N wbytes=N rios=N ...``); None when absent or malformed."""
    if text is None:
        return None
    rbytes = wbytes = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        values = dict(f.partition("=")[::2] for f in fields[1:])
        r, w = values.get("rbytes", ""), values.get("wbytes", "")
        if ":" not in fields[0] or not r.isdigit() or not w.isdigit():
            return None
        rbytes, wbytes = rbytes + int(r), wbytes + int(w)
    return rbytes, wbytes


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


# What a strict /proc reader raises for a figure it could not read (not a process gone).
_UNREADABLE = (OSError, ValueError, IndexError)


def _sum_io(pids: Iterable[int] | None) -> tuple[int, int] | None:
    """(read, write) bytes summed over ``pids``; None when none of them is left, or when
    they or one of them could not be read (``pids`` None; see the module docstring)."""
    rbytes = wbytes = 0
    found = False
    for pid in pids or ():
        try:
            io = read_io_strict(pid)
        except _UNREADABLE:
            return None
        if io is not None:
            rbytes, wbytes, found = rbytes + io[0], wbytes + io[1], True
    return (rbytes, wbytes) if found else None


def _sum_rss(pids: Iterable[int] | None) -> int | None:
    """RSS bytes summed over the live ``pids``; None when none is left, or when they or
    one of them could not be read (``pids`` None)."""
    pages, found = 0, False
    for pid in pids or ():
        try:
            u = read_usage_strict(pid)
        except _UNREADABLE:
            return None
        if u is not None and not u.zombie:
            pages, found = pages + u.rss_pages, True
    return pages * _PAGE if found else None


def read_cgroup(path: Path, usage_only: bool = False) -> Sample:
    """Figures of one app cgroup. Without ``io.stat`` the I/O of its member processes is
    summed from /proc, without ``memory.current`` their RSS; without ``pids.current``
    they are counted. ``usage_only``: CPU and memory alone (:data:`USAGE`), the rest
    None. Raises nothing."""
    cpu = parse_keyed(_read(path / "cpu.stat"))
    memory = parse_value(_read(path / "memory.current"))
    try:
        pids: list[int] | None = members_strict(path) \
            if memory is None or not usage_only else []
    except OSError:
        pids = None   # unreadable, not empty: what is summed over them is unknown
    user, system = cpu.get("user_usec"), cpu.get("system_usec")
    usage = {"cpu_user_seconds": None if user is None else user / 1e6,
             "cpu_system_seconds": None if system is None else system / 1e6,
             "memory_bytes": memory if memory is not None else _sum_rss(pids)}
    if usage_only:
        return {**_UNKNOWN, **usage}
    io = parse_io_stat(_read(path / "io.stat")) or _sum_io(pids)
    events = parse_keyed(_read(path / "memory.events"))
    pids_current = parse_value(_read(path / "pids.current"))
    return {**usage, "memory_peak_bytes": parse_value(_read(path / "memory.peak")),
            "pids": pids_current if pids_current is not None
            else None if pids is None else len(pids),
            "io_read_bytes": None if io is None else io[0],
            "io_write_bytes": None if io is None else io[1],
            "oom_kills": events.get("oom_kill")}


def _sum_usage(procs: Iterable[tuple[int, int]]) -> tuple[int, int, int, list[int]] | None:
    """(user ticks, system ticks, RSS pages, pids) summed over ``procs`` (pid, start
    ticks) that are still that process: a pid gone or now held by another process is
    left out. A zombie (exited, not reaped yet) counts its CPU time, which its stat
    still gives until its parent reaps it into its own ``cutime``: left out, that time
    would vanish from the sum between the two. It holds no memory and is no running
    process of the app: its RSS and pid are not counted (nor its I/O). None when one
    could not be read (see the module docstring): then nothing of the app is known."""
    user = system = rss = 0
    alive: list[int] = []
    for pid, ticks in procs:
        try:
            u = read_usage_strict(pid)
        except _UNREADABLE:
            return None
        if u is None or u.start_ticks != ticks:
            continue
        user, system = user + u.cpu_user_ticks, system + u.cpu_system_ticks
        if not u.zombie:
            rss += u.rss_pages
            alive.append(pid)
    return user, system, rss, alive


def read_procs(procs: Iterable[tuple[int, int]], usage_only: bool = False) -> Sample:
    """Figures summed over ``procs`` (pid, start ticks) that are still that process;
    a pid gone or now held by another process counts for nothing, a zombie for its CPU
    time alone (:func:`_sum_usage`). One whose /proc could not be read makes every
    figure None (the module docstring says why). ``usage_only``: CPU and memory alone
    (:data:`USAGE`; no /proc/PID/io read), the rest None. Raises nothing."""
    summed = _sum_usage(procs)
    if summed is None:
        return dict(_UNKNOWN)
    user, system, rss, alive = summed
    usage = {"cpu_user_seconds": user / _HZ, "cpu_system_seconds": system / _HZ,
             "memory_bytes": rss * _PAGE}
    if usage_only:
        return {**_UNKNOWN, **usage}
    io = _sum_io(alive)
    return {**usage, "memory_peak_bytes": None, "pids": len(alive),
            "io_read_bytes": None if io is None else io[0],
            "io_write_bytes": None if io is None else io[1], "oom_kills": None}


def launch_inodes(cgroup: Path | None, procs: Iterable[tuple[int, int]]) -> set[int]:
    """Socket inodes held by the members of ``cgroup``, or by those of ``procs`` (pid,
    start ticks) that are still that process. Raises nothing."""
    pids = members(cgroup) if cgroup is not None else [
        pid for pid, ticks in procs if start_ticks(pid) == ticks]
    return socket_inodes(pids)


class Meter:
    """Measures members and keeps counters monotonic per launch key (see the module
    docstring). Thread-safe: ``metrics.read`` measures off the owner's loop."""

    def __init__(self) -> None:
        self._high: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def measure(self, batch: list[Member], usage_only: bool = False,
                live: Iterable[str] | None = None) -> tuple[float, list[Sample]]:
        """(CLOCK_MONOTONIC at the start, one sample per member in order). Forgets the
        launches not in ``live`` (the launch keys that still run; default: those of
        ``batch``): a measurement of some launches (an ``inspect``) keeps the others'
        highest counters. ``usage_only``: see :data:`USAGE`. Raises nothing."""
        with self._lock:
            t = time.monotonic()
            out = [self._clamp(m.launch_key, self._read(m, usage_only)) for m in batch]
            keep = {m.launch_key for m in batch} if live is None else set(live)
            for key in [k for k in self._high if k not in keep]:
                del self._high[key]
            return t, out

    @staticmethod
    def _read(m: Member, usage_only: bool) -> Sample:
        sample = read_cgroup(m.cgroup, usage_only) if m.cgroup is not None \
            else read_procs(m.procs, usage_only)
        sample["source"] = "proc" if m.cgroup is None else "cgroup"
        return sample

    def _clamp(self, key: str, sample: Sample) -> Sample:
        high = self._high.setdefault(key, {})
        user, system = sample["cpu_user_seconds"], sample["cpu_system_seconds"]
        # the highest sum, not the sum of each field's highest: those come from
        # different moments, and new time of one kind would hide under the other's
        # old high (CPU% 0.0 for a busy app until it made up the difference)
        sample["cpu_seconds"] = None if user is None or system is None else user + system
        for name in (*COUNTERS, "cpu_seconds", "memory_peak_bytes"):
            value = sample[name]
            if name == "memory_peak_bytes" and sample["memory_bytes"] is not None:
                value = max(value or 0, sample["memory_bytes"])
            if value is not None:
                high[name] = max(value, high.get(name, value))
                sample[name] = high[name]
        return sample


USAGE_REUSE_S = 2.0
"""How long a usage-only measurement answers the usage-only requests of other clients it
covers (owner.metrics.UsageMemo)."""


class UsageMemo:
    """The last usage-only measurement (``at`` and a sample per launch key, pid and start
    ticks), reused for a usage-only request whose launches it all measured, while it is
    younger than :data:`USAGE_REUSE_S`, by a client it was not given to yet (so a client
    that asks again gets newer figures: ``tenure top`` keeps its pace).

    Who profits: a backend that has just started, whose first ``status`` asks for every
    app (~4 ms of /proc reads and a thread hop for 200, inside a handoff's pause), and
    a second client asking beside the first. Clients are told apart by a token of their
    connection; a token seen again after its connection ended only makes the owner
    measure once more."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._at: float | None = None
        self._by_key: dict[str, tuple[int | None, int | None, Sample]] = {}
        self._given: set[int] = set()

    def _fresh(self) -> bool:
        return self._at is not None and self._clock() - self._at < USAGE_REUSE_S

    def reuse(self, client: int, launches: list[tuple[str, int | None, int | None]]
              ) -> tuple[float, list[Sample]] | None:
        """(at, samples in order) for ``launches`` (launch key, pid, start ticks) from
        the kept measurement; None when it is too old, was given to ``client`` already,
        or misses one of them (another process under the same key included)."""
        if not launches or client in self._given or not self._fresh():
            return None
        out = []
        for key, pid, ticks in launches:
            got = self._by_key.get(key)
            if got is None or got[:2] != (pid, ticks):
                return None
            out.append(got[2])
        assert self._at is not None
        self._given.add(client)
        return self._at, out

    def keep(self, client: int, at: float,
             launches: list[tuple[str, int | None, int | None]],
             samples: list[Sample]) -> None:
        """Keep a measurement made for ``client``, unless a fresh one of more launches
        is kept (an ``inspect`` of one app does not displace a ``status`` of all)."""
        if self._fresh() and len(launches) < len(self._by_key):
            return
        self._at, self._given = at, {client}
        self._by_key = {key: (pid, ticks, sample)
                        for (key, pid, ticks), sample in zip(launches, samples, strict=True)}
