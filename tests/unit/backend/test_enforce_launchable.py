"""A plan refuses what every launch of an app would fail on: a ``limits.nofile`` too low
to exec a program, and a relative program another user's app would look for in ``/``."""

from __future__ import annotations

import pytest

from backend.config import parse_config
from backend.enforce import NOFILE_FLOOR, Host, check_config
from protocol.codes import Code
from protocol.errors import ConfigInvalid

APP = "stacks.demo.apps.web"
JOB = "stacks.demo.jobs.report"
ROOT_OWNER = Host(owner_uid=0, controllers=None, backend_uid=0, backend_gid=0,
                  backend_groups=frozenset())
USER_SCOPE = Host(owner_uid=1000, controllers=None, backend_uid=1000, backend_gid=1000,
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


def _program(program: str, extra: str = "") -> str:
    return f'[{APP}]\ncommand = ["{program}", "--flag"]\nuser = "nobody"\n{extra}'


def test_another_users_relative_program_without_cwd_is_refused_at_plan() -> None:
    """It would start in / and exec would look for /rvbin/hello.sh: was accepted, then
    ran when the app had a socket and failed without one."""
    e = _check(_program("rvbin/hello.sh"))
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.command[0]", 2)
    assert "'/rvbin/hello.sh'" in e.msg and "give an absolute path or a cwd" in e.msg, e.msg
    assert _check(_program("./hello.sh")) is not None


@pytest.mark.parametrize("program, extra", [
    ("rvbin/hello.sh", 'cwd = "/srv/web"\n'),    # found from its cwd
    ("/srv/web/rvbin/hello.sh", ""),
    ("hello.sh", ""),                            # looked up in PATH, not a path
])
def test_a_program_found_the_same_wherever_it_starts_passes(program: str,
                                                            extra: str) -> None:
    assert _check(_program(program, extra)) is None


def test_without_a_user_switch_a_relative_program_is_found_from_the_owners_directory(
        ) -> None:
    """As docs/config.md promises (``command = ["./worker"]`` without a cwd)."""
    text = f'[{APP}]\ncommand = ["./worker"]\n'
    assert _check(text, USER_SCOPE) is None
    assert _check(text, ROOT_OWNER) is None
    me = Host(owner_uid=65534, controllers=None, backend_uid=65534, backend_gid=65534,
              backend_groups=frozenset())
    assert _check(text + 'user = "nobody"\n', me) is None   # nobody is the owner: no switch


def test_a_job_template_gets_the_same_program_check() -> None:
    text = f'[{APP}]\ncommand = ["/bin/true"]\nuser = "nobody"\n' \
           f'[{JOB}]\ncommand = ["bin/report"]\nuser = "nobody"\n'
    e = _check(text)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{JOB}.command[0]", 5)
    assert "this job runs as 'nobody'" in e.msg
    assert _check(text + 'cwd = "/srv/report"\n') is None
