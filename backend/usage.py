"""CPU and memory of application instances for ``status``.

The owner measures (``metrics.read``, capability ``metrics`` 1): it knows every process of
a launch, so its figures cover the whole app, not just the leader. CPU percent is the
rate between two successive CPU-seconds samples of the same process identity (pid and
start ticks); the first sample of one reports None (unknown, shown as ``-``), not 0.0:
right after a start or a backend handoff a busy process is not said to be idle.

Only when the owner predates that capability does the backend read /proc/PID/stat of the
leader itself (one read per process: the status of 200 apps must stay cheap).

A process's figures stand for FRESH_S: a ``status`` or ``inspect`` within that time of
the last measurement of a process shows that measurement, and asks the owner only for
the processes it has no figures that recent for (a new process always has none). The
owner reads /proc for each process it measures, and the backend decodes the answer: for
50 apps that was 60% of a ``status`` (2.4 against 1.0 ms), paid again by every poll of
a tool that asks many times a second, and a CPU percent over a few milliseconds says
little anyway. ``tenure top --every 0.2`` sees new figures every 0.4 to 0.6 s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocol.errors import TenureError
from protocol.schema import is_count, is_number

__all__ = ["CAPABILITY", "FRESH_S", "CpuRate", "Usage", "owner_metrics"]

CAPABILITY = {"metrics": 1}
FRESH_S = 0.5

_HZ = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")

Ident = tuple[int, int]  # (pid, start ticks)
Figures = tuple[float | None, int | None]  # (cpu percent, memory bytes)


class CpuRate:
    """CPU percent (100 = one core) between successive CPU-seconds samples per identity.
    Pure: the caller gives the time of each sample."""

    def __init__(self) -> None:
        self._last: dict[Ident, tuple[float, float, float | None]] = {}  # t, cpu s, rate

    def rate(self, ident: Ident, t: float, cpu_seconds: float) -> float | None:
        """Percent since the previous sample of ``ident``; None (unknown: there is no
        interval to measure over) for the first one and for a counter that went down (a
        different measurement source) — never a made-up 0.0, nor a negative or infinite
        rate. A sample not later than the previous one (the owner may answer with a
        measurement it made for another connection, owner.metrics.UsageMemo: the one
        already seen, or one older than an ``inspect``'s) gives the previous rate and is
        not kept."""
        prev = self._last.get(ident)
        if prev is not None and t <= prev[0]:
            return prev[2]
        percent = None if prev is None or cpu_seconds < prev[1] else \
            round(100.0 * (cpu_seconds - prev[1]) / (t - prev[0]), 1)
        self._last[ident] = (t, cpu_seconds, percent)
        return percent

    def forget_except(self, live: Iterable[Ident]) -> None:
        keep = set(live)
        for key in [k for k in self._last if k not in keep]:
            del self._last[key]


async def owner_metrics(owner: Any, capabilities: Mapping[str, Any],
                        launch_keys: list[str] | None = None, usage_only: bool = False
                        ) -> dict[str, Any] | None:
    """The owner's ``metrics.read`` answer, for ``launch_keys`` only when given (an
    older owner measures every launch: the caller picks its own), of CPU and memory
    only with ``usage_only`` (an older owner measures everything); None when the owner
    predates the capability (the caller reads /proc instead). An owner out of reach
    gives an answer without launches: status still answers, without figures, and never
    guesses from /proc."""
    if capabilities.get("metrics") != CAPABILITY["metrics"]:
        return None
    params: dict[str, Any] = {}
    if launch_keys is not None:
        params["launch_keys"] = launch_keys
    if usage_only:
        params["usage_only"] = True
    try:
        answer: dict[str, Any] = await owner.call("metrics.read", params or None,
                                                  timeout=5.0)
    except TenureError:
        return {"at": time.monotonic(), "launches": []}
    return answer


class Usage:
    """Per-instance ``(cpu percent, memory bytes)`` from the owner's answers (each kept
    FRESH_S), or from /proc when there are none."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.cpu = CpuRate()
        self._clock = clock
        self._taken: dict[Ident, tuple[float, Figures]] = {}   # when we got them, and them

    def __len__(self) -> int:
        """How many processes' figures are held."""
        return len(self._taken)

    def stale(self, launches: Mapping[Ident, str]) -> list[str]:
        """The launch keys among ``launches`` (by process identity) whose process has no
        figures from the last FRESH_S: the ones to measure again."""
        now = self._clock()
        return [key for ident, key in launches.items()
                if (got := self._taken.get(ident)) is None or now - got[0] >= FRESH_S]

    def recent(self, idents: Iterable[Ident]) -> dict[Ident, Figures]:
        """The figures held for ``idents`` (those without any are left out)."""
        return {i: self._taken[i][1] for i in idents if i in self._taken}

    def from_owner(self, answer: Any) -> dict[Ident, Figures]:
        """Figures by (pid, start ticks) from one ``metrics.read`` answer, kept. What
        the answer does not say in the shape asked (an owner of another release) gives
        no figures: a row without an integer pid and start ticks is left out, a CPU
        time that is not a finite number or a memory size that is not an integer is
        None."""
        out: dict[Ident, Figures] = {}
        if not isinstance(answer, Mapping):
            return out
        at, rows = answer.get("at"), answer.get("launches")
        if not is_number(at) or not isinstance(rows, list):
            return out
        now = self._clock()
        for row in rows:
            if not isinstance(row, Mapping) or not is_count(row.get("pid")) or \
                    not is_count(row.get("start_ticks")):
                continue
            ident = (row["pid"], row["start_ticks"])
            cpu, memory = row.get("cpu_seconds"), row.get("memory_bytes")
            out[ident] = (self.cpu.rate(ident, at, cpu) if is_number(cpu) else None,
                          memory if is_count(memory) else None)
            self._taken[ident] = (now, out[ident])
        return out

    def sample(self, pid: int, start_ticks: int) -> tuple[float | None, int | None]:
        """(cpu percent since the previous sample, rss bytes) of the leader alone, from
        /proc; the percent is None at its first sample; (None, None) when the process is
        gone or is another process now."""
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                raw = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:
            return None, None
        f = raw[raw.rfind(b")") + 2:].split()
        if int(f[19]) != start_ticks:
            return None, None
        cpu, rss = (int(f[11]) + int(f[12])) / _HZ, int(f[21]) * _PAGE
        return self.cpu.rate((pid, start_ticks), time.monotonic(), cpu), rss

    def forget_except(self, live: Iterable[Ident]) -> None:
        keep = set(live)
        self.cpu.forget_except(keep)
        for key in [k for k in self._taken if k not in keep]:
            del self._taken[key]
