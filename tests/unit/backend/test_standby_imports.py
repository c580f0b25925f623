"""A standby imports before its activation what serving imports: a module left to
``serve()`` would be imported inside the handoff's pause."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys, tempfile, shutil
from pathlib import Path
from protocol.startup import import_asyncio_without_tls, use_builtin_hashes
use_builtin_hashes(); import_asyncio_without_tls()   # as backend.__main__.main does
import asyncio
from backend.__main__ import report, serve
report()                       # what a standby runs before it reads its activation
before = set(sys.modules)
home = Path(tempfile.mkdtemp(prefix="tsi"))
try:
    asyncio.run(serve(home, "a1"))   # no handoff record: fails once its imports ran
except FileNotFoundError as exc:
    assert exc.filename.endswith("a1.json"), exc
else:
    raise AssertionError("serve() started without a handoff record")
finally:
    shutil.rmtree(home)
print(sorted(set(sys.modules) - before))
"""


def test_serve_imports_nothing_the_standby_did_not():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"
