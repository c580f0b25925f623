"""A plan refuses what every launch of an app would fail on: a ``limits.nofile`` too low
to exec a program."""

from __future__ import annotations

import pytest

from backend.config import parse_config
from backend.enforce import NOFILE_FLOOR, Host, check_config
from protocol.codes import Code
from protocol.errors import ConfigInvalid

APP = "stacks.demo.apps.web"
ROOT_OWNER = Host(owner_uid=0, controllers=None, backend_uid=0, backend_gid=0,
                  backend_groups=frozenset())


def _check(text: str, host: Host = ROOT_OWNER) -> ConfigInvalid | None:
    try:
        check_config(parse_config(text, "t.toml"), text, host)
    except ConfigInvalid as e:
        assert e.code == Code.CONFIG_INVALID
        return e
    return None


def _nofile(value: int | str, more: str = "") -> str:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return f'[{APP}]\ncommand = ["/bin/true"]\n{more}[{APP}.limits]\nnofile = {shown}\n'


@pytest.mark.parametrize("value", [0, 3, NOFILE_FLOOR - 1])
def test_a_nofile_too_low_to_exec_anything_is_refused_at_plan(value: int) -> None:
    """Was: accepted; every launch exited 127 ('error while loading shared libraries
    ... Error 24') until the start limit gave up."""
    e = _check(_nofile(value))
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.limits.nofile", 4)
    assert f"is {value}, below {NOFILE_FLOOR}" in e.msg, e.msg


def test_the_nofile_floor_counts_the_sockets_and_the_fd_store() -> None:
    more = ('fd_store_max = 4\n[stacks.demo.apps.web.sockets.a]\nlisten = "127.0.0.1:1"\n'
            '[stacks.demo.apps.web.sockets.b]\nlisten = "127.0.0.1:2"\n')
    floor = NOFILE_FLOOR + 2 + 4
    e = _check(_nofile(floor - 1, more))
    assert e is not None and e.data["key"] == f"{APP}.limits.nofile"
    assert f"is {floor - 1}, below {floor}" in e.msg and "fd_store_max" in e.msg, e.msg
    assert _check(_nofile(floor, more)) is None


@pytest.mark.parametrize("value", [NOFILE_FLOOR, 1024])
def test_a_nofile_at_or_above_the_floor_passes(value: int) -> None:
    assert _check(_nofile(value)) is None
