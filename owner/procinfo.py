"""Reading processes through /proc and psutil: identity (start ticks), groups, resources.

A pid alone is not an identity: pids are reused. (pid, start_ticks) is, within one boot.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from protocol.errors import NotFound
from protocol.identity import start_ticks as read_start_ticks

__all__ = [
    "Inspector",
    "ProcStat",
    "group_members",
    "inspect",
    "read_pgid",
    "read_start_ticks",
    "read_stat",
]


@dataclass(frozen=True)
class ProcStat:
    """The few /proc/PID/stat fields the owner needs."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start_ticks: int


def parse_stat(pid: int, data: bytes) -> ProcStat:
    """Parse the bytes of /proc/PID/stat.

    comm (field 2) is free text in parentheses and may itself contain spaces and ')', so
    split after the LAST ')'. Raises ValueError or IndexError on a malformed line.
    """
    rest = data[data.rindex(b")") + 2:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    return ProcStat(pid=pid, state=rest[0].decode("ascii", "replace"), ppid=int(rest[1]),
                    pgid=int(rest[2]), start_ticks=int(rest[19]))


def _read_stat_bytes(pid: int | str) -> bytes | None:
    # os.open/os.read instead of open(): a group scan reads every /proc/*/stat every
    # 20 ms during a stop, and the text-file machinery made it ~3x slower.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(pid: int) -> ProcStat | None:
    """The stat of ``pid``, or None if it is gone (or /proc says nothing sensible)."""
    data = _read_stat_bytes(pid)
    if data is None:
        return None
    try:
        return parse_stat(pid, data)
    except (ValueError, IndexError):
        return None


def read_pgid(pid: int) -> int | None:
    """The process group of ``pid`` via /proc (works for zombies too); None if gone."""
    st = read_stat(pid)
    return None if st is None else st.pgid


def group_members(pgid: int, *, include_zombies: bool = False) -> list[int]:
    """Pids whose process group is ``pgid``, by one scan of /proc/*/stat.

    Zombies are dead and hold nothing but a table slot; they are left out unless asked
    for, so "the group is empty" means "nothing in it can still run".
    """
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        data = _read_stat_bytes(name)
        if data is None:
            continue
        # Only fields 3 (state) and 5 (pgrp) matter here: split no further than needed.
        rest = data[data.rfind(b")") + 2:].split(b" ", 3)
        if len(rest) < 4 or not rest[2].isdigit() or int(rest[2]) != pgid:
            continue
        if rest[0] == b"Z" and not include_zombies:
            continue
        members.append(int(name))
    return members


class Inspector:
    """Resource snapshots of launched processes, keeping psutil handles between calls so
    ``cpu_percent`` measures the interval since the previous call (the first call is 0.0)."""

    def __init__(self) -> None:
        self._handles: dict[tuple[int, int], Any] = {}  # psutil.Process, imported lazily

    def inspect(self, pid: int, start_ticks: int) -> dict[str, Any]:
        """cpu_percent, cpu times, rss bytes, thread and (recursive) child counts.

        Raises NotFound if ``pid`` is gone or is now a different process (its start ticks
        differ from ``start_ticks``): never reports on a stranger that reused the pid.
        """
        key = (pid, start_ticks)
        if read_start_ticks(pid) != start_ticks:
            self._handles.pop(key, None)
            raise NotFound(f"process {pid} (start {start_ticks}) is gone",
                           {"pid": pid, "start_ticks": start_ticks})
        import psutil  # only inspect needs it; the owner starts faster without
        try:
            proc = self._handles.get(key) or psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                info = {
                    "pid": pid,
                    "start_ticks": start_ticks,
                    "cpu_percent": proc.cpu_percent(interval=None),
                    "cpu_user_s": times.user,
                    "cpu_system_s": times.system,
                    "rss_bytes": proc.memory_info().rss,
                    "num_threads": proc.num_threads(),
                }
            info["children"] = len(proc.children(recursive=True))
        except psutil.NoSuchProcess:
            self._handles.pop(key, None)
            raise NotFound(f"process {pid} exited while being inspected",
                           {"pid": pid, "start_ticks": start_ticks}) from None
        self._handles[key] = proc
        return info

    def forget(self, pid: int) -> None:
        """Drop cached handles for ``pid`` (call on exit so the cache stays bounded)."""
        for key in [k for k in self._handles if k[0] == pid]:
            del self._handles[key]


_default_inspector = Inspector()


def inspect(pid: int, start_ticks: int) -> dict[str, Any]:
    """:meth:`Inspector.inspect` on a process-wide inspector. Raises NotFound."""
    return _default_inspector.inspect(pid, start_ticks)
