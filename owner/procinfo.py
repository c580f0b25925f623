"""Resource snapshots of launched processes (psutil), and the /proc readers the owner
uses, re-exported from :mod:`protocol.procfs` (the one place /proc is parsed).

A pid alone is not an identity: pids are reused. (pid, start_ticks) is, within one boot.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import NotFound
from protocol.procfs import ProcStat, children, group_members, parse_stat, read_stat
from protocol.procfs import start_ticks as read_start_ticks

__all__ = [
    "Inspector",
    "ProcStat",
    "children",
    "group_members",
    "inspect",
    "parse_stat",
    "read_pgid",
    "read_start_ticks",
    "read_stat",
]


def read_pgid(pid: int) -> int | None:
    """The process group of ``pid`` via /proc (works for zombies too); None if gone."""
    st = read_stat(pid)
    return None if st is None else st.pgid


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

    def __len__(self) -> int:
        return len(self._handles)

    def keep_only(self, live: set[tuple[int | None, int | None]]) -> None:
        """Drop the handles of processes not in ``live`` ((pid, start ticks) of the live
        launches): a handle was kept per process ever inspected until that process was
        inspected again after its exit, which none is."""
        for key in [k for k in self._handles if k not in live]:
            del self._handles[key]


_default_inspector = Inspector()


def inspect(pid: int, start_ticks: int) -> dict[str, Any]:
    """:meth:`Inspector.inspect` on a process-wide inspector. Raises NotFound."""
    return _default_inspector.inspect(pid, start_ticks)
