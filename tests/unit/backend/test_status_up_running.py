"""`tenure status` while a `tenure up` is under way (it, or the background start of
`tenure up --no-wait`, holds runtime/up.lock) and no backend answers yet: it said
"tenure is not running", which a script running `up --no-wait && status` met."""

from __future__ import annotations

import os
from pathlib import Path

from backend.cli.everyday import up_running
from protocol.flocks import hold
from protocol.layout import Layout


def test_the_holder_of_the_up_lock_is_the_up_running(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    os.makedirs(Path(lay.up_lock).parent, mode=0o700)
    assert up_running(lay) is None                    # no lock file
    fd = hold(lay.up_lock)
    assert fd is not None
    try:
        assert up_running(lay) == os.getpid()
    finally:
        os.close(fd)
    assert up_running(lay) is None                    # let go
