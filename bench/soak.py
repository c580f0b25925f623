"""Soak: many consecutive backend handoffs under load; nothing may restart, no log line
may be lost or repeated, and tenure's own memory must stay flat.

Usage: python bench/soak.py [--apps 200] [--handoffs 1000] [--keep]

Starts its own tenure in a temporary home (as bench/handoff.py does) with ``--apps``
applications: the numbered-line writer, ``BOUNCERS`` single-instance `sleep` apps that a
client thread restarts, and `sleep` instances for the rest. Then runs ``--handoffs``
upgrades to the selected release, each measured by :func:`bench.handoff.handoff_once`.
Meanwhile the client sends the API's ``restart`` for the next bouncer every
``RESTART_PERIOD`` seconds over one long-lived connection; refusals while a handoff runs
(``SHUTTING_DOWN``, ``BACKEND_UNAVAILABLE``, ``CONNECT_FAILED``) are counted, as is a
``SHUTTING_DOWN`` that names the bouncer as restarted (a handoff began before it was
ready), and a request whose outcome is unknown (``TRANSPORT_LOST``, ``TIMEOUT``) is
counted apart and never retried.

After every handoff it samples the resident memory of the owner, the guardian and the
new backend, and checks the owner's launches. At the end:

- ``app_restarts``: launches of the other apps whose pid or start ticks changed or that
  vanished, plus bouncer launches beyond what the client's restarts explain (those
  answered, and those whose outcome it does not know) — must be 0;
- ``restarts_missing``: restarts answered ready that did not produce a new launch —
  must be 0;
- ``apps_not_running``: instances not ready at the end — must be empty;
- ``apps_left_stopped``: bouncers found stopped after a restart that a handoff cut or
  whose outcome the client does not know (``found_after`` has every state found) — must
  be 0;
- ``log_lines_lost``, ``log_lines_duplicated``: gaps and repeats in the writer's journal,
  read through the API's ``logs`` — must be 0;
- ``rss_growth_mb``: mean RSS sum over the last ``RSS_WINDOW`` handoffs minus the mean over
  the first (half the handoffs each in shorter runs); target at most 5;
- ``pause_p50_ms``, ``pause_p99_ms``: the control-plane pause per handoff.

Everything started here is stopped again, also on failure or Ctrl-C. The last line printed
is one JSON object; the exit status is 1 when a must-be-0 count is not 0.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.testing import Cluster, seal_once  # noqa: E402
from bench.handoff import (  # noqa: E402
    bring_up,
    cleanup,
    config,
    handoff_once,
    journal_numbers,
    lost_lines,
    parser,
    temp_dirs,
)
from protocol.client import Client  # noqa: E402
from protocol.errors import (  # noqa: E402
    BackendUnavailable,
    ConnectFailed,
    OutcomeUnknown,
    ShuttingDown,
    TenureError,
)

STACK = "bench"
BOUNCERS = 3
RESTART_PERIOD = 0.5
RESTART_TIMEOUT = 30.0
LOOK_AFTER = 2.0
RSS_WINDOW = 100
MIB = 1 << 20
# Refusals a handoff may cause: nothing was done, the client may simply ask again later.
REFUSED = (ShuttingDown, BackendUnavailable, ConnectFailed)

Launches = dict[str, tuple[int, int]]


def bouncer_keys() -> list[str]:
    return [f"{STACK}/bouncer{i}/0" for i in range(BOUNCERS)]


def soak_config(apps: int) -> str:
    """bench/handoff.py's sleepers and writer for ``apps - BOUNCERS``, plus the bouncers."""
    text = config(apps - BOUNCERS)
    for i in range(BOUNCERS):
        # a restart counts as a start: allow far more than one per RESTART_PERIOD
        text += (f'\n[stacks.{STACK}.apps.bouncer{i}]\ncommand = ["sleep", "infinity"]\n'
                 "start_limit = { burst = 100, interval = 1 }\n")
    return text


def instance_of(launch_key: str) -> tuple[str, int]:
    """``stack/app/index/generation`` → (``stack/app/index``, generation)."""
    key, _, gen = launch_key.rpartition("/")
    return key, int(gen)


@dataclass
class Restarter:
    """Restarts the bouncers in turn through the public API until :meth:`finish`.

    ``done[key]`` counts restarts that were made (exactly one new launch each): answered
    with the instance ready, or cut by a handoff after the restart (``SHUTTING_DOWN``
    naming the instance as restarted). ``uncertain[key]`` counts requests that may or
    may not have launched one: outcome unknown, or answered with the instance in another
    state. ``outcomes`` counts every request by result: ``ready``, the state it was left
    in, ``restarted_then_SHUTTING_DOWN``, or the error code.

    An instance whose restart was cut or uncertain is not restarted again until the
    client has looked at it (``status``, a read, ``LOOK_AFTER`` seconds later, once the
    API answers): a later restart would hide an instance the request left stopped.
    ``found`` counts the states seen then."""

    sock: str
    keys: list[str]
    done: collections.Counter[str] = field(default_factory=collections.Counter)
    uncertain: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    found: collections.Counter[str] = field(default_factory=collections.Counter)
    pending: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="restarter", daemon=True)
        self.thread.start()

    def _client(self) -> Client:
        return Client(self.sock, pin=False, timeout=RESTART_TIMEOUT * 2 + 10,
                      connect_timeout=1.0)

    def _run(self) -> None:
        client = self._client()
        try:
            for key in itertools.cycle(self.keys):
                if self.stop.wait(RESTART_PERIOD):
                    return
                ok = self._look(client)
                if ok and key not in self.pending:
                    ok = self._restart(client, key)
                if not ok:
                    client.close()
                    client = self._client()
        finally:
            client.close()

    def _look(self, client: Client) -> bool:
        """Record the state of uncertain instances that are due; False when the API did
        not answer (they stay pending)."""
        due = [k for k, t in self.pending.items() if time.monotonic() - t >= LOOK_AFTER]
        if not due:
            return True
        try:
            apps = {r["key"]: r for r in client.call("status")["apps"]}
        except TenureError:
            return False
        for key in due:
            state = apps[key]["state"]
            self.found[state] += 1
            print(f"restart {key}: looked at after the restart: {state}", flush=True)
            del self.pending[key]
        return True

    def _restart(self, client: Client, key: str) -> bool:
        """One request; False when the connection should be replaced."""
        try:
            res = client.call("restart", {"target": key, "timeout": RESTART_TIMEOUT})
        except REFUSED as exc:
            if key in exc.data.get("restarted", ()):
                # restarted; a handoff began before it was ready: the next generation
                # carries it on (looked at below)
                self.outcomes["restarted_then_SHUTTING_DOWN"] += 1
                self.done[key] += 1
                self.pending[key] = time.monotonic()
            else:
                self.outcomes[exc.code_str] += 1
            return False
        except OutcomeUnknown as exc:
            # sent, no answer: the restart may or may not have happened; never replayed
            self.outcomes[exc.code_str] += 1
            self.uncertain[key] += 1
            self.pending[key] = time.monotonic()
            print(f"restart {key}: outcome unknown ({exc})", flush=True)
            return False
        except TenureError as exc:
            self.outcomes[exc.code_str] += 1
            print(f"restart {key}: unexpected {exc.code}: {exc}", flush=True)
            return False
        state = res["instances"].get(key) if res["settled"] else "not_settled"
        self.outcomes[str(state)] += 1
        if state == "ready":
            self.done[key] += 1
        else:
            self.uncertain[key] += 1
            self.pending[key] = time.monotonic()
            print(f"restart {key}: answered {state}", flush=True)
        return True

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(RESTART_TIMEOUT * 2 + 30)
            if self.thread.is_alive():
                raise RuntimeError("the restarting client did not stop")


class Memory:
    """RSS of the owner, the guardian and the current backend after each handoff."""

    def __init__(self, c: Cluster) -> None:
        owner, guardian = c.daemon_pids()
        self.daemons = {"owner": psutil.Process(owner), "guardian": psutil.Process(guardian)}
        self.samples: list[dict[str, int]] = []

    def sample(self, backend_pid: int) -> dict[str, int]:
        """Raises RuntimeError when the owner or the guardian is no longer the process
        seen at start (a restart of either would hide or fake growth)."""
        procs = {**self.daemons, "backend": psutil.Process(backend_pid)}
        for role, p in self.daemons.items():
            if not p.is_running():
                raise RuntimeError(f"the {role} (pid {p.pid}) is gone")
        row = {role: p.memory_info().rss for role, p in procs.items()}
        self.samples.append(row)
        return row

    def growth(self) -> dict[str, float]:
        """MiB per role and in total: mean of the last window minus mean of the first."""
        w = max(1, min(RSS_WINDOW, len(self.samples) // 2))
        first, last = self.samples[:w], self.samples[-w:]
        out = {}
        for role in (*self.daemons, "backend"):
            out[role] = (statistics.fmean(s[role] for s in last)
                         - statistics.fmean(s[role] for s in first)) / MIB
        out["total"] = sum(out.values())
        out["first_mb"] = statistics.fmean(sum(s.values()) for s in first) / MIB
        out["window"] = w
        return out


def changed(before: Launches, now: Launches, skip: set[str]) -> set[str]:
    """Launch keys of ``before`` (instances not in ``skip``) that changed or vanished."""
    return {k for k, v in before.items()
            if instance_of(k)[0] not in skip and now.get(k) != v}


def bouncer_restarts(before: Launches, after: Launches,
                     r: Restarter) -> tuple[int, int, dict[str, Any]]:
    """(unexplained launches, restarts answered ready without a launch, per-bouncer
    detail).

    A bouncer's generation grows by one per launch; the client's requests explain at
    least ``done`` and at most ``done + uncertain`` of them."""
    gen0 = dict(instance_of(k) for k in before)
    gen1 = dict(instance_of(k) for k in after)
    extra = missing = 0
    detail: dict[str, Any] = {}
    for key in r.keys:
        if key not in gen1:  # a restart left it stopped: reported by not_running()
            detail[key] = {"launches": None, "done": r.done[key],
                           "uncertain": r.uncertain[key]}
            continue
        launches = gen1[key] - gen0[key]
        extra += max(0, launches - r.done[key] - r.uncertain[key])
        missing += max(0, r.done[key] - launches)
        detail[key] = {"launches": launches, "done": r.done[key],
                       "uncertain": r.uncertain[key]}
    return extra, missing, detail


def not_running(c: Cluster, apps: int) -> list[str]:
    """Instances not ready once the client has stopped (after up to 30 s to settle)."""
    try:
        c.wait_ready(apps, timeout=30)
    except AssertionError:
        pass  # listed below
    return sorted(k for k, a in c.apps().items() if not a["ready"])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (a value that was measured, never interpolated)."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def run(args: argparse.Namespace, home: Path, scratch: Path) -> dict[str, Any]:
    c = Cluster(home, seal_once(scratch))
    restarter = Restarter(str(c.layout.api_sock), bouncer_keys())
    t0 = time.monotonic()
    try:
        rid, before = bring_up(c, soak_config(args.apps), args.apps)
        memory = Memory(c)
        skip = set(bouncer_keys())
        seen: set[str] = set()
        pauses: list[float] = []
        restarter.start()
        for n in range(1, args.handoffs + 1):
            h = handoff_once(c, rid, n)
            pauses.append(h.pause)
            rss = memory.sample(int(h.activation["backend_pid"]))
            print(f"{h.describe(n)}; rss MiB " + " ".join(
                f"{role} {v / MIB:.1f}" for role, v in rss.items()), flush=True)
            now = changed(before, c.pids(), skip)
            if now - seen:
                print(f"warning: after handoff {n} launches changed: {sorted(now - seen)}",
                      flush=True)
                seen |= now
        restarter.finish()
        down = not_running(c, args.apps)
        after = c.pids()
        extra, missing, detail = bouncer_restarts(before, after, restarter)
        nums = journal_numbers(c)
        lost, dups = lost_lines(nums)
        growth = memory.growth()
        print(f"bouncers: {json.dumps(detail)}", flush=True)
        print("rss growth MiB (window {window}): owner {owner:.2f} guardian {guardian:.2f} "
              "backend {backend:.2f}; first window {first_mb:.1f}".format(**growth), flush=True)
        return {"apps": args.apps, "handoffs": args.handoffs,
                "app_restarts": len(changed(before, after, skip)) + extra,
                "restarts_missing": missing, "apps_not_running": down,
                "restart_requests": dict(sorted(restarter.outcomes.items())),
                "restart_transport_lost": restarter.outcomes["TRANSPORT_LOST"],
                "found_after": dict(sorted(restarter.found.items())),
                "apps_left_stopped": restarter.found["stopped"],
                "log_lines": len(nums), "log_lines_lost": lost, "log_lines_duplicated": dups,
                "rss_growth_mb": round(growth["total"], 2),
                "pause_p50_ms": round(statistics.median(pauses) * 1000, 1),
                "pause_p99_ms": round(percentile(pauses, 99) * 1000, 1),
                "pause_max_ms": round(max(pauses) * 1000, 1),
                "seconds": round(time.monotonic() - t0)}
    finally:
        restarter.stop.set()
        cleanup(c)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, handoffs=1000)
    args = ap.parse_args(argv)
    if args.apps < BOUNCERS + 2:
        ap.error(f"--apps must be at least {BOUNCERS + 2} (the writer, {BOUNCERS} "
                 "restarted apps and one sleeper)")
    if args.handoffs < 1:
        ap.error("--handoffs must be at least 1")
    with temp_dirs(args.keep) as (home, scratch):
        result = run(args, home, scratch)
    print(json.dumps(result), flush=True)
    bad = ("app_restarts", "restarts_missing", "apps_not_running", "apps_left_stopped",
           "log_lines_lost", "log_lines_duplicated")
    return 1 if any(result[k] for k in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
