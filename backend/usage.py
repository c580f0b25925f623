"""CPU and memory of application processes, read straight from /proc/PID/stat.

One read per process (psutil would make several): the status of 200 apps must stay
cheap. CPU percent is measured between two samples of the same process (by pid and
start ticks); the first sample of a process reports 0.0.
"""

from __future__ import annotations

import os
import time

__all__ = ["Usage"]

_HZ = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Usage:
    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, int]] = {}

    def sample(self, pid: int, start_ticks: int) -> tuple[float | None, int | None]:
        """(cpu percent since the previous sample, rss bytes); (None, None) when the
        process is gone or is another process now."""
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                raw = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:
            self._last.pop((pid, start_ticks), None)
            return None, None
        f = raw[raw.rfind(b")") + 2:].split()
        if int(f[19]) != start_ticks:
            return None, None
        cpu, rss = int(f[11]) + int(f[12]), int(f[21]) * _PAGE
        now = time.monotonic()
        prev = self._last.get((pid, start_ticks))
        self._last[(pid, start_ticks)] = (now, cpu)
        if prev is None or now <= prev[0]:
            return 0.0, rss
        return round(100.0 * (cpu - prev[1]) / _HZ / (now - prev[0]), 1), rss

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        for key in [k for k in self._last if k not in live]:
            del self._last[key]
