"""System scope: the guardian runs as an account of its own, and the owner's records
under execution/ (root:GROUP 0710, files root 0600) are not its to read. Reading one is
then no error: that owner runs only copies staged for it, so none of the guardian's
releases (`tenure release prune`/`remove`), and a viewer's `tenure up` leaves the
maintenance window to the owner's own start. Real file modes, read by a forked child
that drops to another uid."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another uid")

NOBODY = 65534


def _as(uid: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a forked child as ``uid`` (and gid): its result, or the exception
    it raised, as (kind, text)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                out: Any = ("ok", fn())
            except BaseException as exc:
                out = ("raised", f"{type(exc).__name__}: {exc}")
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def _execution(home: Path, name: str, record: dict[str, Any]) -> Path:
    """execution/ as system scope makes it (root:NOBODY 0710), with ``name`` root 0600."""
    os.chmod(home, 0o711)
    ex = home / "execution"
    ex.mkdir(mode=0o710)
    os.chown(ex, 0, NOBODY)
    os.chmod(ex, 0o710)
    path = ex / name
    path.write_text(json.dumps(record))
    os.chmod(path, 0o600)
    return path


def test_prune_reads_past_an_owner_record_the_guardian_may_not_read(short_home: Path
                                                                    ) -> None:
    """`tenure release prune`/`remove` always failed UNSAFE_PATH "Permission denied" in
    system scope: the unreadable record was refused instead of skipped."""
    from guardian.removal import _owner_record
    from owner.release import KIND
    rid = "a" * 64
    path = _execution(short_home, "owner-release.json",
                      {"kind": KIND, "format": 1, "release": rid, "previous": None})
    assert _owner_record(str(path)) == [(rid, "the owner's record names it")]   # root
    assert _as(NOBODY, lambda: _owner_record(str(path))) == ("ok", [])


def test_a_symlinked_owner_record_is_still_refused(short_home: Path) -> None:
    """Only a refusal for want of permission is skipped; what the reader refuses for
    safety still refuses the command."""
    from guardian.removal import _owner_record
    path = _execution(short_home, "elsewhere.json", {})
    link = path.parent / "owner-release.json"
    link.symlink_to(path)
    kind, text = _as(NOBODY, lambda: _owner_record(str(link)))
    assert kind == "raised" and text.startswith("UnsafePath"), text


def test_up_by_an_account_that_may_not_read_the_window_record(short_home: Path) -> None:
    """refuse_owner_start meant to leave a window record it may not read to the owner's
    own start, but got UNSAFE_PATH instead of the PermissionError it caught."""
    from backend.cli.ownerwindow import refuse_owner_start
    from protocol.layout import MAINTENANCE_KIND, Layout
    _execution(short_home, "maintenance.json",
               {"kind": MAINTENANCE_KIND, "format": 1, "step": "drained"})
    assert _as(NOBODY, lambda: refuse_owner_start(Layout(short_home))) == ("ok", None)
