"""`tenure status` against `supervisorctl status`, 200 programs each, same run.

    python bench/cli.py [--apps 200] [--runs 20]

Both supervisors run the same number of `sleep` programs; the two status commands are
timed alternately (wall clock of the whole process, as an operator sees it). Prints the
medians and the ratio; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import install  # noqa: E402
from bench.peers.base import Supervisor, timed_run, wait_until  # noqa: E402
from bench.peers.supervisord import Supervisord  # noqa: E402
from bench.tenure_adapter import Tenure  # noqa: E402


def time_cli(sup: Supervisor) -> float:
    elapsed, code = timed_run(sup.status_cli(), sup.cli_env())
    if code != 0:
        raise RuntimeError(f"{sup.name} status exited {code}")
    return elapsed * 1000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--apps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    install.ensure()
    sups: list[Supervisor] = [Tenure(), Supervisord()]
    times: dict[str, list[float]] = {s.name: [] for s in sups}
    with tempfile.TemporaryDirectory(prefix="tbc", dir="/tmp") as tmp:
        try:
            for s in sups:
                work = Path(tmp) / s.name
                work.mkdir()
                s.setup(work, a.apps, ["sleep", "100000"])
                s.start()
                wait_until(lambda s=s: len(s.all_running()) == a.apps, 120, 0.1,  # type: ignore[misc]
                           f"{s.name} running {a.apps}")
            for s in sups:
                time_cli(s)  # warm caches once
            for _ in range(a.runs):
                for s in sups:
                    times[s.name].append(time_cli(s))
        finally:
            for s in sups:
                s.stop()
    t = statistics.median(times["tenure"])
    p = statistics.median(times["supervisord"])
    res = {"apps": a.apps, "tenure_status_ms": round(t, 1),
           "supervisorctl_status_ms": round(p, 1), "ratio": round(t / p, 2)}
    print(f"tenure status: median {t:.1f} ms over {a.runs} runs ({a.apps} apps)")
    print(f"supervisorctl status: median {p:.1f} ms ({a.apps} programs)")
    print(f"ratio tenure/supervisorctl: {res['ratio']} (target <= 0.35)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
