"""protocol.backendstate.check_backend_state, which the guardian runs in a handoff's
``checked`` phase, refuses exactly what a backend generation's start refuses of its state
(creating backend/ and opening backend.db and recovery.db, as backend.generation does),
with the same UNSAFE_PATH message, and creates and changes nothing. Was: the handoff
checked none of it, so an upgrade with backend.db at 0644 (or the home at 0777) retired
the incumbent before the candidate was refused. Real files, real SQLite."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.store import BackendStore, RecoveryStore
from protocol.backendstate import check_backend_state
from protocol.errors import UnsafePath
from protocol.layout import Layout
from protocol.sockets import ensure_private_dir


def _start_opens(layout: Layout) -> None:
    """What a generation's start does to its state (backend.generation.Generation.start):
    create backend/, open both databases."""
    ensure_private_dir(layout.backend, root=layout.home)
    BackendStore(layout.backend_db).close()
    RecoveryStore(layout.recovery_db).close()


def _symlink(path: str) -> None:
    moved = f"{path}.moved"
    os.rename(path, moved)
    os.symlink(moved, path)


def _dir_in_place(path: str) -> None:
    os.unlink(path)
    os.mkdir(path, 0o700)


DAMAGES: dict[str, Callable[[Layout], None]] = {
    "backend.db 0644": lambda lay: os.chmod(lay.backend_db, 0o644),
    "backend.db 0620": lambda lay: os.chmod(lay.backend_db, 0o620),
    "backend.db symlink": lambda lay: _symlink(lay.backend_db),
    "backend.db a directory": lambda lay: _dir_in_place(lay.backend_db),
    "recovery.db 0604": lambda lay: os.chmod(lay.recovery_db, 0o604),
    "recovery.db symlink": lambda lay: _symlink(lay.recovery_db),
    "home 0777": lambda lay: os.chmod(lay.home, 0o777),
    "home 0750": lambda lay: os.chmod(lay.home, 0o750),
    "backend/ 0755": lambda lay: os.chmod(lay.backend, 0o755),
    "backend/ symlink": lambda lay: _symlink(str(lay.backend)),
    "above the home 0777": lambda lay: os.chmod(lay.home.parent, 0o777),
}


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` (itself too): (mode, inode, size)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            p = os.path.normpath(os.path.join(dirpath, name))
            st = os.lstat(p)
            out[p] = (st.st_mode, st.st_ino, st.st_size if stat.S_ISREG(st.st_mode) else 0)
    return out


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    os.chmod(tmp_path, 0o700)
    home = tmp_path / "above" / "home"
    home.parent.mkdir(mode=0o755)
    home.mkdir(mode=0o700)
    lay = Layout(home)
    _start_opens(lay)
    return lay


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_refuses_what_the_start_refuses_and_changes_nothing(layout: Layout, damage: str
                                                             ) -> None:
    DAMAGES[damage](layout)
    before = _snapshot(layout.home.parent)
    with pytest.raises(UnsafePath) as checked:
        check_backend_state(layout)
    assert _snapshot(layout.home.parent) == before
    with pytest.raises(UnsafePath) as started:
        _start_opens(layout)
    assert checked.value.msg == started.value.msg
    assert checked.value.data == started.value.data


def test_the_messages_say_how_to_put_it_right(layout: Layout) -> None:
    os.chmod(layout.backend_db, 0o644)
    with pytest.raises(UnsafePath) as err:
        check_backend_state(layout)
    assert err.value.msg == (f"{layout.backend_db} is open to other users (mode 0644); "
                             "find out who changed it, then chmod 600 it")
    os.chmod(layout.backend_db, 0o600)
    os.chmod(layout.home, 0o777)
    with pytest.raises(UnsafePath) as err:
        check_backend_state(layout)
    assert err.value.msg == (f"{layout.home} has mode 0777; it must be 0700: find out who "
                             "changed it, then chmod 700 it")


def test_safe_state_passes(layout: Layout) -> None:
    check_backend_state(layout)
    os.chmod(layout.home, 0o710)      # a viewer group may search the home and backend/
    os.chmod(layout.backend, 0o710)
    check_backend_state(layout)
    _start_opens(layout)


@pytest.mark.parametrize("missing", ["databases", "backend/"])
def test_what_is_missing_passes_and_is_not_created(tmp_path: Path, missing: str) -> None:
    """The generation creates them private; the check must not create them for it."""
    os.chmod(tmp_path, 0o700)
    lay = Layout(tmp_path / "home")
    lay.home.mkdir(mode=0o700)
    if missing == "databases":
        lay.backend.mkdir(mode=0o700)
    before = _snapshot(tmp_path)
    check_backend_state(lay)
    assert _snapshot(tmp_path) == before
    _start_opens(lay)   # and the start agrees
