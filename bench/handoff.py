"""Hot backend handoff benchmark: how long is the control plane unavailable, and do the
applications notice anything?

Usage: python bench/handoff.py [--apps 200] [--handoffs 10] [--keep]

Starts its own tenure (owner, guardian, backend) in a temporary home from a freshly sealed
release, with ``--apps`` applications: ``apps - 1`` `sleep` instances and one writer of a
numbered line every 10 ms. Then runs ``--handoffs`` upgrades (`tenure backend upgrade` to
the selected release) while a second thread polls the public API's ``status`` in a tight
loop. For each handoff the control-plane pause is the time from the first refused request
(the incumbent drains) to the first request answered by the new generation.

Afterwards: app restarts (launches whose pid or start ticks changed, or that vanished —
must be 0) and log lines lost (numbers missing from the writer's journal — must be 0).
Everything started here is stopped again, also on failure or Ctrl-C. The last line
printed is one JSON object:
{"apps", "handoffs", "pause_p50_ms", "pause_max_ms", "upgrade_call_p50_ms", "app_restarts",
 "log_lines_lost"}; ``upgrade_call_p50_ms`` is the median wall time of the guardian's
``upgrade`` call (what `tenure backend upgrade` waits for: check, preflight, standby,
drain, the pause, verification).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.testing import Cluster, seal_once  # noqa: E402
from protocol.client import Client  # noqa: E402
from protocol.errors import TenureError  # noqa: E402

PHASES = ["created", "checked", "admitted", "draining", "checkpointed", "fenced", "retired",
          "started", "verified", "complete"]
COUNTER = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done"


def config(apps: int) -> str:
    """``apps - 1`` sleepers in apps of at most 50 instances, plus the numbered writer."""
    text, left, n = "", apps - 1, 0
    while left > 0:
        k = min(left, 50)
        text += (f'[stacks.bench.apps.sleeper{n}]\ncommand = ["sleep", "infinity"]\n'
                 f"instances = {k}\n\n")
        left, n = left - k, n + 1
    return text + f"[stacks.bench.apps.counter]\ncommand = [\"sh\", \"-c\", '{COUNTER}']\n"


@dataclass
class Poller:
    """Polls `status` on api.sock as fast as it answers; records (t, backend pid | None)."""

    sock: str
    samples: list[tuple[float, int | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        client = Client(self.sock, pin=False, timeout=5.0, connect_timeout=1.0)
        try:
            while not self.stop.is_set():
                try:
                    pid = int(client.call("status")["backend"]["pid"])
                except TenureError:
                    pid = None
                    client.close()
                    client = Client(self.sock, pin=False, timeout=5.0, connect_timeout=1.0)
                    time.sleep(0.001)
                self.samples.append((time.monotonic(), pid))
        finally:
            client.close()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    def pause(self, old_pid: int, new_pid: int) -> float | None:
        """Seconds from the first refused request to the first answer of ``new_pid``."""
        first_refused = None
        for t, pid in self.samples:
            if first_refused is None and pid is None:
                first_refused = t
            elif pid == new_pid:
                return t - first_refused if first_refused is not None else 0.0
        return None


def journal_numbers(c: Cluster) -> list[int]:
    out: list[int] = []
    after = 0
    while True:
        recs = c.call("logs", {"after": after, "limit": 5000, "stack": "bench",
                               "app": "counter", "stream": "stdout"})["records"]
        if not recs:
            return out
        for r in recs:
            data = r["data"]
            text = data.decode() if isinstance(data, bytes | bytearray) else str(data)
            out.extend(int(x) for x in text.split())
        after = recs[-1]["id"]


def lost_lines(nums: list[int]) -> tuple[int, int]:
    """(numbers missing between the first and the last, duplicates)."""
    if not nums:
        return 0, 0
    seen = set(nums)
    return (max(nums) - min(nums) + 1) - len(seen), len(nums) - len(seen)


@dataclass
class Handoff:
    """One completed upgrade: its control-plane pause and what the guardian answered."""

    pause: float
    took: float
    polls: int
    activation: dict[str, Any]
    receipts: list[dict[str, Any]]

    def describe(self, n: int) -> str:
        at = {r["phase"]: r["at"] for r in self.receipts}
        steps = " ".join(f"{b}+{(at[b] - at[a]) * 1000:.0f}"
                         for a, b in itertools.pairwise(PHASES))
        return (f"handoff {n}: pause {self.pause * 1000:.1f} ms, upgrade call "
                f"{self.took * 1000:.0f} ms, epoch {self.activation['epoch']}, "
                f"{self.polls} polls; ms per phase: {steps}")


def handoff_once(c: Cluster, rid: str, n: int) -> Handoff:
    """Upgrade to ``rid`` while a :class:`Poller` runs; measure the pause.

    Raises RuntimeError when the activation does not end ``complete`` or the new backend
    does not answer within 30 s; the Poller is stopped on every path."""
    old_pid = c.backend_pid()
    poller = Poller(str(c.layout.api_sock))
    poller.start()
    try:
        time.sleep(0.2)
        t = time.monotonic()
        with c.guardian() as g:
            res = g.call("upgrade", {"release": rid})
        took = time.monotonic() - t
        act = res["activation"]
        if act["phase"] != "complete":
            raise RuntimeError(f"handoff {n} ended {act['phase']}: {act}")
        new_pid = int(act["backend_pid"])
        deadline = time.monotonic() + 30
        while poller.pause(old_pid, new_pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        poller.finish()
    pause = poller.pause(old_pid, new_pid)
    if pause is None:
        raise RuntimeError(f"handoff {n}: the new backend never answered")
    return Handoff(pause, took, len(poller.samples), act, res["receipts"])


def bring_up(c: Cluster, config_text: str, apps: int) -> tuple[str, dict[str, tuple[int, int]]]:
    """`tenure up` with ``config_text``; wait for ``apps`` ready instances. Returns the
    selected release id and the owner's launches (launch key → (pid, start ticks))."""
    t0 = time.monotonic()
    c.up(config_text, timeout=300)
    c.wait_ready(apps, timeout=300)
    print(f"up: {apps} apps ready in {time.monotonic() - t0:.1f} s", flush=True)
    rid = c.cli("backend", "status", check=True).out["selector"]["current"]
    launches = c.pids()
    if len(launches) != apps:
        raise RuntimeError(f"{len(launches)} launches, expected {apps}")
    return rid, launches


def run(args: argparse.Namespace, home: Path, scratch: Path) -> dict[str, Any]:
    c = Cluster(home, seal_once(scratch))
    try:
        rid, before = bring_up(c, config(args.apps), args.apps)
        pauses: list[float] = []
        calls: list[float] = []
        for n in range(1, args.handoffs + 1):
            h = handoff_once(c, rid, n)
            pauses.append(h.pause)
            calls.append(h.took)
            print(h.describe(n), flush=True)
        time.sleep(0.5)
        after = c.pids()
        restarts = sum(1 for k, v in before.items() if after.get(k) != v)
        lost, dups = lost_lines(journal_numbers(c))
        if dups:
            print(f"warning: {dups} duplicate numbered lines in the journal", flush=True)
        return {"apps": args.apps, "handoffs": args.handoffs,
                "pause_p50_ms": round(statistics.median(pauses) * 1000, 1),
                "pause_max_ms": round(max(pauses) * 1000, 1),
                "upgrade_call_p50_ms": round(statistics.median(calls) * 1000, 1),
                "app_restarts": restarts, "log_lines_lost": lost}
    finally:
        cleanup(c)


def cleanup(c: Cluster) -> None:
    """Stop everything of this home: `tenure down`, then any leftover by its pid."""
    try:
        c.down()
    except Exception as exc:  # still kill what is left below
        print(f"tenure down failed: {exc}", file=sys.stderr)
    deadline = time.monotonic() + 15
    left = c.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = c.leftovers()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        print(f"killed leftover processes {left}", file=sys.stderr)


def _rmtree(path: Path) -> None:
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def temp_dirs(keep: bool) -> Iterator[tuple[Path, Path]]:
    """(home, scratch): a short private TENURE_HOME and a directory for the sealed
    release. Both are removed afterwards, the home unless ``keep``; SIGTERM runs this
    cleanup like Ctrl-C does."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    home = Path(tempfile.mkdtemp(prefix="tnb", dir="/tmp"))   # short: socket paths
    os.chmod(home, 0o700)
    scratch = Path(tempfile.mkdtemp(prefix="tnbr", dir="/tmp"))
    try:
        yield home, scratch
    finally:
        if keep:
            print(f"home kept at {home}", file=sys.stderr)
        else:
            _rmtree(home)
        _rmtree(scratch)


def parser(doc: str, handoffs: int) -> argparse.ArgumentParser:
    """The options of a handoff benchmark: ``--apps``, ``--handoffs``, ``--keep``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--apps", type=int, default=200)
    ap.add_argument("--handoffs", type=int, default=handoffs)
    ap.add_argument("--keep", action="store_true", help="keep the temp home (logs)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, handoffs=10)
    args = ap.parse_args(argv)
    if args.apps < 2:
        ap.error("--apps must be at least 2 (one is the numbered-line writer)")
    with temp_dirs(args.keep) as (home, scratch):
        result = run(args, home, scratch)
    print(json.dumps(result), flush=True)
    return 0 if result["app_restarts"] == 0 and result["log_lines_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
