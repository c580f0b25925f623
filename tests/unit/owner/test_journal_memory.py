"""The journal's memory after a burst: the writer holds no written lines while idle
(its last batch, up to 4096 x 16 KiB, stayed referenced until the next one), and a
drained backlog of at least memtrim.TRIM_AFTER calls ``after_backlog`` once, with its
peak; memtrim.trim gives freed heap back to the system (a real glibc call, in a child)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

from owner import memtrim
from owner.journal import Journal, LogSource

SRC = LogSource("s", "a", 0, 1)
LINE = 16 * 1024


def _lines(n: int) -> list[tuple[bytes, int]]:
    return [(bytes(bytearray(LINE)), 0) for _ in range(n)]   # n distinct objects


def test_an_idle_writer_holds_none_of_the_lines_it_wrote(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.db") as j:
        tracemalloc.start()
        try:
            j.append(SRC, "stdout", _lines(500))   # 8 MiB, one batch
            assert j.flush(timeout=30)
            deadline = time.monotonic() + 10
            while tracemalloc.get_traced_memory()[0] > 2 << 20:
                assert time.monotonic() < deadline, \
                    f"{tracemalloc.get_traced_memory()[0] >> 20} MiB still held"
                time.sleep(0.01)
        finally:
            tracemalloc.stop()


def test_a_drained_backlog_is_reported_once_with_its_peak(tmp_path: Path) -> None:
    go = threading.Event()
    drained: list[int] = []
    with Journal(tmp_path / "journal.db", before_batch=lambda rows: go.wait(30),
                 after_backlog=drained.append) as j:
        for _ in range(11):
            assert j.append(SRC, "stdout", _lines(100)) == 100   # 11 x 1.6 MiB queued
        go.set()
        assert j.flush(timeout=30)
        deadline = time.monotonic() + 10
        while not drained:
            assert time.monotonic() < deadline, "after_backlog was not called"
            time.sleep(0.01)
        assert len(drained) == 1 and memtrim.TRIM_AFTER <= drained[0] < 2 * memtrim.TRIM_AFTER
        j.append(SRC, "stdout", _lines(10))   # a small write afterwards: no second call
        assert j.flush(timeout=30)
        time.sleep(0.1)
        assert len(drained) == 1, drained


_TRIM = r"""
from owner import memtrim
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
held = [bytes(bytearray(16384)) for _ in range(6000)]   # as the pipe readers do
kept = held[::500]          # a few still live, the last among them: the heap cannot shrink
del held
before = rss()
memtrim.trim(96 << 20)
print(before, rss())
"""


def test_trim_gives_freed_heap_back(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", _TRIM], capture_output=True, text=True,
                       timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    assert before - after >= 50, (before, after)   # ~94 MiB freed, in pages
