"""Real children writing into real pipes, drained by PipeDrainer on a real asyncio loop
into a real Journal in a temporary directory."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from owner.drain import PipeDrainer
from owner.journal import Journal, LogSource
from owner.linesplit import CONTINUED, MAX_LINE, PARTIAL
from owner.testing import read_all
from protocol.errors import StateCorrupt, UnsafePath

WEB = LogSource("shop", "web", 0, 1)
WORKER = LogSource("shop", "worker", 0, 1)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    before = open_fds()
    yield
    assert psutil.Process().children() == []
    assert open_fds() <= before


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    yield j
    j.close()


async def run_child(journal: Journal, source: LogSource, code: str, *,
                    stream: str = "stdout", stdin: int | None = None,
                    partial_delay: float = 0.1) -> int:
    """Run ``python -c code`` with its stdout (or stderr) drained; return its status.

    Takes ownership of ``stdin`` (closed once the child has it).
    """
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    target = {"stdout": wfd} if stream == "stdout" else {"stderr": wfd}
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=stdin, **target)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
        if stdin is not None:
            os.close(stdin)
    eof = loop.create_future()
    drainer = PipeDrainer(loop, rfd, journal, source, stream, partial_delay=partial_delay,
                          on_eof=lambda: eof.set_result(None))
    try:
        await eof
        return await loop.run_in_executor(None, proc.wait)
    finally:
        drainer.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_200k_numbered_lines_all_present_in_order(journal: Journal) -> None:
    n = 200_000
    code = (f"import sys\nw = sys.stdout.write\nfor i in range({n}): w('line %d\\n' % i)\n")
    start = time.perf_counter()
    assert asyncio.run(run_child(journal, WEB, code)) == 0
    assert journal.flush(timeout=120)
    elapsed = time.perf_counter() - start
    print(f"\n200,000 lines captured durably in {elapsed:.3f} s "
          f"({n / elapsed:,.0f} lines/s)")
    recs = read_all(journal)
    assert [r.data for r in recs] == [b"line %d" % i for i in range(n)]
    assert all(r.flags == 0 and r.stream == "stdout" for r in recs)
    ids = [r.id for r in recs]
    assert ids == sorted(set(ids))
    assert journal.overflow_total == 0


def test_binary_output_and_missing_final_newline(journal: Journal) -> None:
    code = ("import sys\nb = sys.stderr.buffer\n"
            "b.write(bytes(range(256)) + b'\\n' + b'\\x00\\xff\\xc3\\x28 tail')\n")
    assert asyncio.run(run_child(journal, WEB, code, stream="stderr")) == 0
    assert journal.flush(timeout=30)
    recs = read_all(journal)
    first, rest = bytes(range(10)), bytes(range(11, 256))
    assert [(r.data, r.flags, r.stream) for r in recs] == [
        (first, 0, "stderr"), (rest, 0, "stderr"), (b"\x00\xff\xc3\x28 tail", PARTIAL, "stderr")]


def test_one_mebibyte_line_chunked_and_reassembled(journal: Journal) -> None:
    code = ("import sys\nline = bytes(33 + i % 90 for i in range(1 << 20))\n"
            "sys.stdout.buffer.write(line + b'\\n')\n")
    assert asyncio.run(run_child(journal, WEB, code)) == 0
    assert journal.flush(timeout=30)
    recs = read_all(journal)
    assert len(recs) == (1 << 20) // MAX_LINE
    assert all(len(r.data) == MAX_LINE for r in recs)
    assert [r.flags for r in recs] == [CONTINUED] * (len(recs) - 1) + [0]
    assert b"".join(r.data for r in recs) == bytes(33 + i % 90 for i in range(1 << 20))


def test_quiet_partial_line_flushed_by_timer(journal: Journal) -> None:
    """A prompt without newline reaches the journal while the child still waits."""

    async def scenario() -> int:
        rfd, wfd = os.pipe()
        task = asyncio.create_task(run_child(
            journal, WEB, "import sys\nsys.stdout.write('prompt> '); sys.stdout.flush()\n"
            "sys.stdin.read()\nprint('done')\n", stdin=rfd, partial_delay=0.05))
        try:
            while not journal.read(0, 10) and not task.done():  # polling, not a timed assert
                await asyncio.sleep(0.02)
                journal.flush(timeout=5)
        finally:
            os.close(wfd)
        return await task

    assert asyncio.run(scenario()) == 0
    assert journal.flush(timeout=30)
    assert [(r.data, r.flags) for r in read_all(journal)] == [
        (b"prompt> ", PARTIAL), (b"done", 0)]


def test_child_finishes_while_nobody_reads(journal: Journal) -> None:
    """32 MiB through a 64 KiB pipe: the child can only exit if we keep draining."""
    code = ("import sys\nchunk = (b'x' * 1023 + b'\\n') * 1024\n"
            "for _ in range(32): sys.stdout.buffer.write(chunk)\n")
    assert asyncio.run(run_child(journal, WEB, code)) == 0
    assert journal.flush(timeout=120)
    assert len(read_all(journal)) + journal.overflow_total == 32 * 1024


def test_retention_with_two_apps(tmp_path: Path) -> None:
    limit = 256 * 1024
    with Journal(tmp_path / "journal.db", retention_bytes_per_app=limit) as j:
        small = "import sys\nfor i in range(100): print('worker %d' % i)\n"
        big = ("import sys\nfor i in range(2000): "
               "sys.stdout.write('%06d' % i + '.' * 994 + '\\n')\n")

        async def both() -> list[int]:
            return list(await asyncio.gather(run_child(j, WORKER, small),
                                             run_child(j, WEB, big)))

        assert asyncio.run(both()) == [0, 0]
        assert j.flush(timeout=60)
        web = read_all(j, stack="shop", app="web")
        assert sum(len(r.data) for r in web) <= limit
        assert [r.data[:6] for r in web] == [b"%06d" % i for i in range(2000 - len(web), 2000)]
        assert len(web) < 2000
        worker = read_all(j, stack="shop", app="worker")
        assert [r.data for r in worker] == [b"worker %d" % i for i in range(100)]
        last = j.last_id()
        assert last == 2100
        assert asyncio.run(run_child(j, WEB, "print('later')")) == 0
        assert j.flush(timeout=30)
        assert [(r.id, r.data) for r in j.read(last, 10)] == [(last + 1, b"later")]


def test_overflow_never_blocks_the_drainer(tmp_path: Path) -> None:
    gate = threading.Event()
    j = Journal(tmp_path / "journal.db", queue_bytes=64 * 1024,
                before_batch=lambda rows: gate.wait())
    try:
        code = "import sys\nfor i in range(100000): print(i)\n"
        assert asyncio.run(run_child(j, WEB, code)) == 0  # the writer is still stuck
        dropped = j.take_overflow()
        assert dropped[WEB] > 0
        gate.set()
        assert j.flush(timeout=60)
        assert len(read_all(j)) + dropped[WEB] == 100000
    finally:
        gate.set()
        j.close()


def test_unsafe_or_unknown_journal_refused(tmp_path: Path) -> None:
    link = tmp_path / "journal.db"
    link.symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(UnsafePath):
        Journal(link)
    path = tmp_path / "old.db"
    Journal(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value=2 WHERE key='format_version'")
    conn.close()
    with pytest.raises(StateCorrupt):
        Journal(path)
