"""The Prometheus exposition is opt-in: a generation whose config has no ``[metrics]
listen`` never imports prometheus_client (it costs a backend start ~80 ms and its
memory), and one that has it serves. Each case runs in a child: this process may have
imported the library already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend.testing import free_port

PROBE = """
import asyncio, sys
from pathlib import Path
from backend.testing import FakeOwner, fake_generation

async def main():
    gen = fake_generation(Path(sys.argv[1]), FakeOwner(), sys.argv[2])
    try:
        await gen.serve_metrics()
        print("listening" if gen.metrics is not None else "off",
              "prometheus_client" in sys.modules)
    finally:
        await gen.close()

asyncio.run(main())
"""


def probe(home: Path, config: str) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE, str(home), config],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_no_listen_no_import(tmp_path: Path) -> None:
    assert probe(tmp_path, '[stacks.s.apps.a]\ncommand = ["true"]\n') == "off False"


def test_listen_serves(tmp_path: Path) -> None:
    config = f'[metrics]\nlisten = "127.0.0.1:{free_port()}"\n'
    assert probe(tmp_path, config) == "listening True"
