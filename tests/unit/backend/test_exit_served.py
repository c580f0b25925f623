"""A generation that has served ends with exit_served: at once, with its exit status,
and with nothing it buffered lost (stdout to a pipe is block-buffered; the log handler
may buffer too)."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import logging, sys
from backend.__main__ import exit_served
logging.basicConfig(stream=sys.stderr, format="%(message)s")
logging.getLogger("tenure.backend").error("last words")
sys.stdout.write("buffered, no newline")
exit_served(3)
print("never")
"""


def test_exit_served_flushes_and_exits_with_the_status():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert done.stderr == "last words\n"
