"""Benchmark durable log capture: child → pipe → PipeDrainer → Journal (SQLite WAL).

Usage: python bench/journal.py [N]   (default N = 1,000,000 short lines)

A child process writes N numbered lines as fast as it can into a pipe; the owner-side
PipeDrainer reads it on an asyncio loop into a Journal in a temporary directory. The clock
runs from the first byte read to the moment every line is committed (Journal.flush).
The last line printed is one JSON object: {"log_lines_per_s": ..., "log_lines_lost": ...}.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from owner.drain import PipeDrainer
from owner.journal import Journal, LogSource

CHILD = r"""
import os, sys
n = int(sys.argv[1])
out = os.fdopen(1, "wb", buffering=1 << 20)
step = 10000
for start in range(0, n, step):
    out.write(b"".join(b"line %d\n" % i for i in range(start, min(n, start + step))))
out.flush()
"""


async def capture(journal: Journal, n: int) -> tuple[float, float, int]:
    """Run the child; return (first-byte time, committed time, child exit status)."""
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(n)], stdout=wfd)
    os.close(wfd)
    done = loop.create_future()
    first: list[float] = []
    source = LogSource("bench", "writer", 0, 1)
    drainer = PipeDrainer(loop, rfd, journal, source, "stdout",
                          on_eof=lambda: done.set_result(None))
    real = drainer._on_readable

    def timed() -> None:
        if not first:
            first.append(time.perf_counter())
        real()

    loop.remove_reader(rfd)
    loop.add_reader(rfd, timed)
    await done
    status = await loop.run_in_executor(None, proc.wait)
    await loop.run_in_executor(None, journal.flush)
    return first[0], time.perf_counter(), status


def count_rows(journal: Journal) -> tuple[int, bool]:
    """(rows stored, whether they are exactly line 0..n-1 in order)."""
    after, total, expect, ordered = 0, 0, 0, True
    while True:
        recs = journal.read(after, 10_000)
        if not recs:
            return total, ordered
        for rec in recs:
            ordered = ordered and rec.data == b"line %d" % expect
            expect += 1
        total += len(recs)
        after = recs[-1].id


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as tmp:
        journal = Journal(Path(tmp) / "journal.db",
                          retention_bytes_per_app=1 << 30)
        try:
            t0, t1, status = asyncio.run(capture(journal, n))
            stored, ordered = count_rows(journal)
            lost = n - stored
            overflow = journal.overflow_total
        finally:
            journal.close()
    rate = n / (t1 - t0)
    print(f"child exit status: {status}")
    print(f"lines written: {n}, stored: {stored}, in order: {ordered}, "
          f"dropped (overflow): {overflow}")
    print(f"capture time: {t1 - t0:.3f} s (first byte -> all committed)")
    print(f"durable capture rate: {rate:,.0f} lines/s")
    print(json.dumps({"log_lines_per_s": round(rate), "log_lines_lost": lost}))


if __name__ == "__main__":
    main()
