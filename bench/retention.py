"""State file sizes over many upgrades with retention: do they stay bounded?

    python bench/retention.py [--upgrades 10000] [--dir /dev/shm]

Drives the real stores through the records that upgrades leave, with the default
``[retention]`` counts and the same prune calls tenure makes:

- state.db (guardian): per upgrade one activation through all ten phases, its receipts
  and its grant; pruned when it ends, as the guardian does;
- backend.db: per upgrade one applied plan and its finished operation; pruned every 50
  upgrades (the backend prunes every 10 minutes);
- owner.db: per upgrade five launch rows (restarts) ending; pruned every 50 upgrades.

Runs in ``--dir`` (tmpfs by default: each write is a durable commit, and the sizes, not
the time, are the point). Prints one line per checkpoint and, last, one JSON object:
``upgrades``, and per file ``<name>_kib`` at each checkpoint (``sizes``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.model import RetentionSettings
from backend.store import BackendStore
from guardian.phases import Kind, Phase
from guardian.state import StateStore
from owner.store import OwnerStore
from protocol.grant import Grant

PHASES = [Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING, Phase.CHECKPOINTED, Phase.FENCED,
          Phase.RETIRED, Phase.STARTED, Phase.VERIFIED, Phase.COMPLETE]
ENV = {f"VAR_{i}": "x" * 40 for i in range(20)}   # an app environment of about 1 KiB


def _kib(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists()) // 1024


def _upgrade(state: StateStore, epoch: int) -> str:
    act = state.create_activation(Kind.UPGRADE, "r" * 64, "q" * 64, epoch - 1)
    state.record_grant(Grant(epoch, act.id, "r" * 64, "owner", time.time()), b"s" * 64)
    phase = Phase.CREATED
    for nxt in PHASES:
        state.advance(act.id, phase, nxt, {"detail": "x" * 200})
        phase = nxt
    return act.id


def _apply(store: BackendStore, i: int) -> None:
    store.add_plan({"id": f"p{i}", "config_text": "x" * 2000, "config_source": "t.toml",
                    "config_revision": "r", "live_revision": "l", "fingerprint": "f",
                    "changes": [{"action": "add", "app": "s/a"}], "kind": "apply"})
    store.create_operation({"id": f"o{i}", "plan": f"p{i}", "kind": "apply",
                            "stacks": ["s"], "stage": "running", "request_id": None,
                            "generation": "g"})
    store.advance_operation(f"o{i}", "running", "complete", 1, outcome="success")


def _launches(store: OwnerStore, i: int) -> None:
    for j in range(5):
        key = f"s/a/0/{i * 5 + j}"
        store.insert_launch(key, {"stack": "s", "app": "a", "instance": 0,
                                  "generation": i * 5 + j}, {"env": ENV}, i, "boot")
        store.mark_running(key, 100, 1, 100, time.time())
        store.mark_exited(key, {"exit_code": 1, "signal": None})


def run(upgrades: int, base: Path) -> dict[str, Any]:
    policy = RetentionSettings()
    files = {"state_db": base / "state.db", "backend_db": base / "backend.db",
             "owner_db": base / "owner.db"}
    state, backend = StateStore(str(files["state_db"])), BackendStore(str(files["backend_db"]))
    owner = OwnerStore(str(files["owner_db"]))
    marks = sorted({m for m in (1_000, 2_000, 5_000, upgrades) if m <= upgrades})
    sizes: dict[str, dict[str, int]] = {}
    try:
        for i in range(1, upgrades + 1):
            current = _upgrade(state, i)
            state.prune(policy.activations, {current})
            _apply(backend, i)
            _launches(owner, i)
            if i % 50 == 0:
                backend.prune(policy.operations, policy.plans)
                owner.prune_ended(policy.launches, set())
            if i in marks:
                sizes[str(i)] = {f"{k}_kib": _kib(p) for k, p in files.items()}
                print(f"{i:>6} upgrades: " + ", ".join(
                    f"{k} {v} KiB" for k, v in sizes[str(i)].items()), flush=True)
    finally:
        for s in (state, backend, owner):
            s.close()
    return {"upgrades": upgrades, "sizes": sizes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upgrades", type=int, default=10_000)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tenure-retention-", dir=args.dir))
    try:
        print(json.dumps(run(args.upgrades, base)))
    finally:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
