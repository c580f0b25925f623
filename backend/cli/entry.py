"""The ``tenure`` command's entry point, what runs before the command line is imported.

- A closed standard stream (``tenure status >&-``) is opened on /dev/null: Python leaves
  ``sys.stdout`` None then, which the first print met with a traceback, and the next
  file or socket the command opened would take that descriptor and get its output.
- Ctrl-C while the command line is still being imported ends it as a Ctrl-C does
  before anything was asked of tenure: exit 130, silently (docs/cli.md, exit statuses).
"""

from __future__ import annotations

import os
import sys

__all__ = ["run"]

_INTERRUPTED = 130


def run() -> None:
    try:
        standard_streams()
        from .early import prefork
        prefork(sys.argv[1:])   # `up --no-wait` on a stopped home: verify meanwhile
        from .main import run as command
    except KeyboardInterrupt:
        os._exit(_INTERRUPTED)
    command()


def standard_streams() -> None:
    """Open descriptors 0, 1 and 2 on /dev/null where they are closed, and give Python
    its streams back for them."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)   # the lowest free one: ``fd`` itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)   # noqa: SIM115 (the process's own stream)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)   # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)   # noqa: SIM115


if __name__ == "__main__":   # python -m backend.cli.entry: the `tenure` script's path
    run()
