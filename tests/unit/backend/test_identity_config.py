"""Users, groups, umask and limits in tenure.toml: parsing, the revision, and the checks a
plan makes against the host (users and groups exist, the owner can enforce them)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest

from backend.cli.present import identity
from backend.config import parse_config
from backend.enforce import Host, app_env, check_config, identity_view, launch_fields
from backend.model import Limits, RunAs
from protocol.errors import ConfigInvalid

ROOT = Path(__file__).resolve().parents[3]
APP = "stacks.demo.apps.web"
HEAD = f'[{APP}]\ncommand = ["x"]\n'  # lines 1-2
NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid).gr_name
SVC_UID = 4242  # a service account uid no app uses
# owner as root with delegated cgroups, backend as the service account: system scope
SPLIT = Host(owner_uid=0, controllers=("memory", "pids", "cpu"), backend_uid=SVC_UID,
             backend_gid=SVC_UID, backend_groups=frozenset())
USER_SCOPE = Host(owner_uid=1000, controllers=None, backend_uid=1000, backend_gid=1000,
                  backend_groups=frozenset())


def _app(text: str) -> tuple[RunAs, Limits]:
    app = parse_config(HEAD + text, "t.toml").stacks["demo"].apps["web"]
    return app.run_as, app.limits


def test_identity_and_limits_parse() -> None:
    run_as, limits = _app('user = "nobody"\ngroup = "g"\nsupplementary_groups = ["a", "b"]\n'
                          'umask = "0027"\n[stacks.demo.apps.web.limits]\nnofile = 1024\n'
                          'nproc = 64\ncore = "infinity"\nmemory_max = "512M"\n'
                          'cpu_quota = 1.5\npids_max = 100\n')
    assert run_as == RunAs("nobody", "g", ("a", "b"), 0o027)
    assert limits == Limits(nofile=1024, nproc=64, core=-1, memory_max=512 << 20,
                            cpu_quota=1.5, pids_max=100)
    assert _app("umask = 0o077\n")[0].umask == 0o077
    assert _app('limits = { memory_max = 4096 }\n')[1].memory_max == 4096
    assert _app('limits = { memory_max = "2GiB" }\n')[1].memory_max == 2 << 30


@pytest.mark.parametrize("text,key,line", [
    ('user = ""\n', f"{APP}.user", 3),
    ('user = "a:b"\n', f"{APP}.user", 3),
    ('user = 1000\n', f"{APP}.user", 3),
    ('group = "g"\n', f"{APP}.group", 3),
    ('supplementary_groups = ["g"]\n', f"{APP}.supplementary_groups", 3),
    ('user = "u"\nsupplementary_groups = ["g", "g"]\n', f"{APP}.supplementary_groups[1]", 4),
    ('user = "u"\nsupplementary_groups = "g"\n', f"{APP}.supplementary_groups", 4),
    ('umask = "999"\n', f"{APP}.umask", 3),
    ('umask = 512\n', f"{APP}.umask", 3),
    ('limits = { nofile = -1 }\n', f"{APP}.limits.nofile", 3),
    ('limits = { core = "unlimited" }\n', f"{APP}.limits.core", 3),
    ('limits = { memory_max = "lots" }\n', f"{APP}.limits.memory_max", 3),
    ('limits = { memory_max = 0 }\n', f"{APP}.limits.memory_max", 3),
    ('limits = { cpu_quota = 0 }\n', f"{APP}.limits.cpu_quota", 3),
    ('limits = { pids_max = 0 }\n', f"{APP}.limits.pids_max", 3),
    ('limits = { swap = 1 }\n', f"{APP}.limits.swap", 3),
])
def test_bad_identity_and_limits_name_the_key_and_line(text: str, key: str, line: int) -> None:
    with pytest.raises(ConfigInvalid) as e:
        parse_config(HEAD + text, "t.toml")
    assert (e.value.data["key"], e.value.data["line"]) == (key, line)


def test_a_config_without_identity_keeps_its_revision_and_definition() -> None:
    """Revisions are in certificates and checkpoints: code that knows identities must
    give a config without them the revision it always had."""
    # the demo as it was when this revision was pinned (its notifier's status since
    # changed)
    text = (ROOT / "examples" / "demo.toml").read_text()
    assert "--status='waiting for work'" in text
    demo = parse_config(text.replace("--status='waiting for work'", "--status=ready"),
                        "demo.toml")
    assert demo.revision == "03ed0049e4cb97bfafd088b1906393d9bca24c6e9d74683bc5f5b6aa808b6d15"
    plain = parse_config(HEAD, "t.toml").stacks["demo"].apps["web"]
    named = parse_config(HEAD + 'user = "nobody"\n', "t.toml").stacks["demo"].apps["web"]
    assert plain.definition_digest() != named.definition_digest()  # a new user: restart
    assert parse_config(HEAD, "t").revision != parse_config(HEAD + "umask = 7\n", "t").revision


def _check(text: str, host: Host) -> ConfigInvalid | None:
    config = parse_config(text, "t.toml")
    try:
        check_config(config, text, host)
    except ConfigInvalid as e:
        return e
    return None


def test_an_unknown_user_or_group_is_reported_with_its_line() -> None:
    e = _check(HEAD + 'user = "tn-no-such-user"\n', SPLIT)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.user", 3)
    assert "unknown user 'tn-no-such-user'" in e.msg
    e = _check(HEAD + 'user = "nobody"\nsupplementary_groups = ["tn-no-grp"]\n', SPLIT)
    assert e is not None and e.data["key"] == f"{APP}.supplementary_groups[0]"
    assert _check(HEAD + f'user = "nobody"\ngroup = "{NOGROUP}"\n', SPLIT) is None


def test_split_control_plane_requires_a_named_user_other_than_the_service_account() -> None:
    e = _check(HEAD, SPLIT)
    assert e is not None and e.data["key"] == f"{APP}.user" and "run as root" in e.msg
    assert _check(HEAD + 'user = "root"\n', SPLIT) is None  # explicit: the operator's call
    svc = Host(0, None, NOBODY.pw_uid, 4242, frozenset())
    e = _check(HEAD + 'user = "nobody"\n', svc)
    assert e is not None and "service account" in e.msg
    in_group = Host(0, None, 4242, NOBODY.pw_gid, frozenset())
    e = _check(HEAD + 'user = "nobody"\n', in_group)
    assert e is not None and "reaches the owner's socket" in e.msg


def test_a_non_root_owner_cannot_take_another_user() -> None:
    e = _check(HEAD + 'user = "nobody"\n', USER_SCOPE)
    assert e is not None and "not root" in e.msg and e.data["line"] == 3
    me = Host(NOBODY.pw_uid, None, NOBODY.pw_uid, NOBODY.pw_gid, frozenset())
    assert _check(HEAD + 'user = "nobody"\n', me) is None
    assert _check(HEAD, USER_SCOPE) is None  # user scope: apps run as the user


def test_cgroup_limits_need_cgroups_with_their_controller() -> None:
    text = HEAD + '[stacks.demo.apps.web.limits]\nnofile = 64\nmemory_max = "1G"\n'
    e = _check(text, USER_SCOPE)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.limits.memory_max", 5)
    assert "process group" in e.msg
    no_memory = Host(1000, ("pids",), 1000, 1000, frozenset())
    e = _check(text, no_memory)
    assert e is not None and "memory controller" in e.msg
    assert _check(HEAD + 'limits = { nofile = 64, core = 0 }\n', USER_SCOPE) is None


def test_the_viewer_group_must_be_usable_by_the_service_account() -> None:
    text = f'[settings]\nviewer_group = "{NOGROUP}"\n' + HEAD.replace(
        "command", 'user = "root"\ncommand')
    e = _check(text, SPLIT)
    assert e is not None and (e.data["key"], e.data["line"]) == ("settings.viewer_group", 2)
    assert f"usermod -aG {NOGROUP}" in e.msg
    member = Host(0, None, SVC_UID, SVC_UID, frozenset({NOBODY.pw_gid}))
    assert _check(text, member) is None
    e = _check('[settings]\nviewer_group = "tn-no-grp"\n' + HEAD, member)
    assert e is not None and "unknown group" in e.msg


def test_an_app_cannot_be_a_viewer() -> None:
    member = Host(0, None, SVC_UID, SVC_UID, frozenset({NOBODY.pw_gid}))
    text = f'[settings]\nviewer_group = "{NOGROUP}"\n' + HEAD + 'user = "nobody"\n'
    e = _check(text, member)
    assert e is not None and "viewer group" in e.msg and e.data["key"] == f"{APP}.user"


def test_in_user_scope_an_app_as_the_admin_may_be_in_the_viewer_group() -> None:
    """Was: `user = "root"` refused, the same app without a user (running as root all
    the same) accepted. Running as the admin, an app gains nothing by the group."""
    root = Host(owner_uid=0, controllers=None, backend_uid=0, backend_gid=0,
                backend_groups=frozenset())
    text = '[settings]\nviewer_group = "root"\n' + HEAD
    assert _check(text, root) is None
    assert _check(text + 'user = "root"\n', root) is None
    e = _check(f'[settings]\nviewer_group = "{NOGROUP}"\n' + HEAD + 'user = "nobody"\n',
               root)
    assert e is not None and "viewer group" in e.msg, e


def test_launch_fields_env_and_inspect_view() -> None:
    app = parse_config(HEAD + 'user = "nobody"\numask = "022"\nenv = { LOGNAME = "x" }\n'
                       'limits = { nofile = 9, core = "infinity" }\n', "t").stacks[
        "demo"].apps["web"]
    assert launch_fields(app) == {"identity": {"user": "nobody", "umask": 0o22},
                                  "limits": {"nofile": 9, "core": "infinity"}}
    env = app_env({"HOME": "/root", "USER": "root", "PATH": "/bin"}, app)
    assert env == {"HOME": NOBODY.pw_dir, "USER": "nobody", "LOGNAME": "x", "PATH": "/bin"}
    view = identity_view(app)
    assert view["identity"]["umask"] == "0022"
    assert view["identity"]["resolved"]["uid"] == NOBODY.pw_uid
    assert set(view["identity"]["resolved"]["groups"]) == set(
        os.getgrouplist("nobody", NOBODY.pw_gid))
    plain = parse_config(HEAD, "t").stacks["demo"].apps["web"]
    assert launch_fields(plain) == {} and app_env({"HOME": "/h"}, plain) == {"HOME": "/h"}
    own = identity_view(plain)["identity"]      # it runs as the owner: this process's ids
    assert (own["user"], own["resolved"]["uid"]) == (None, os.geteuid())
    assert set(own["resolved"]["groups"]) == {os.getegid(), *os.getgroups()}
    assert identity(own) == (f"the owner's user (uid {os.geteuid()}, gid {os.getegid()}, "
                             f"home {pwd.getpwuid(os.geteuid()).pw_dir})")


JOB = "stacks.demo.jobs.report"


def test_a_job_template_gets_the_apps_checks_with_its_own_line() -> None:
    text = HEAD + 'user = "nobody"\n' + f'[{JOB}]\ncommand = ["r"]\n'
    e = _check(text + 'user = "tn-no-such-user"\n', SPLIT)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{JOB}.user", 6)
    assert "unknown user 'tn-no-such-user'" in e.msg
    e = _check(text, SPLIT)                          # no user: it would run as root
    assert e is not None and e.data["key"] == f"{JOB}.user" and "this job" in e.msg
    e = _check(text + 'user = "nobody"\n', USER_SCOPE)
    assert e is not None and "cannot start" in e.msg
    assert _check(text + 'user = "nobody"\n', SPLIT) is None


def test_a_jobs_user_is_refused_on_the_api_socket_like_an_apps() -> None:
    from backend.enforce import app_uids
    config = parse_config(f'[{JOB}]\ncommand = ["r"]\nuser = "nobody"\n', "t.toml")
    assert app_uids(config) == frozenset({NOBODY.pw_uid})


SOCK = HEAD + f'user = "nobody"\n[{APP}.sockets.s]\nlisten = "unix:/run/t/s.sock"\n'  # 1-5


@pytest.mark.parametrize("text,key,words", [
    ('owner = "no-such-user-xx"\n', f"{APP}.sockets.s.owner", "unknown user"),
    ('group = "no-such-group-xx"\n', f"{APP}.sockets.s.group", "unknown group"),
])
def test_a_socket_owner_or_group_that_does_not_exist_is_refused_at_plan(
        text: str, key: str, words: str) -> None:
    """Was: accepted; the launch then failed (`unknown user or group`), the app failed."""
    err = _check(SOCK + text, SPLIT)
    assert err is not None and err.data["key"] == key and err.data["line"] == 6, err
    assert words in err.data["problem"]


def test_a_socket_can_go_only_to_accounts_a_user_scope_owner_may_give_it_to() -> None:
    user_sock = HEAD + f'[{APP}.sockets.s]\nlisten = "unix:/run/t/s.sock"\n'
    err = _check(user_sock + 'owner = "nobody"\n', USER_SCOPE)
    assert err is not None and err.data["key"] == f"{APP}.sockets.s.owner", err
    assert "cannot give the socket" in err.data["problem"]
    err = _check(user_sock + f'group = "{NOGROUP}"\n', USER_SCOPE)
    assert err is not None and err.data["key"] == f"{APP}.sockets.s.group", err
    assert _check(SOCK + f'owner = "nobody"\ngroup = "{NOGROUP}"\n', SPLIT) is None


@pytest.mark.parametrize(("text", "key", "line"), [
    ('ready = { kind = "delay", delay = 1e300 }\n', "ready.delay", 3),
    ('[stacks.demo.apps.web.ready]\nkind = "tcp"\nport = 1\ntimeout = 604801\n',
     "ready.timeout", 6),
    ('health = { kind = "tcp", port = 1, interval = 1e9 }\n', "health.interval", 3),
    ('backoff = { max = 1e12 }\n', "backoff.max", 3)])
def test_a_wait_longer_than_a_week_is_refused_at_plan(text: str, key: str,
                                                       line: int) -> None:
    """Was accepted: `ready.delay = 1e300` held the apply's operation (and its stack)
    for ever. Refused when a plan is made, so a config applied before still parses."""
    config = parse_config(HEAD + text, "t.toml")   # parses, as it did
    assert config is not None
    e = _check(HEAD + text, USER_SCOPE)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.{key}", line), e
    assert "must be at most 604800 s (a week)" in e.msg
    job = '[stacks.demo.jobs.j]\ncommand = ["true"]\ntimeout = 1e9\n'
    e = _check(HEAD + job, USER_SCOPE)
    assert e is not None and e.data["key"] == "stacks.demo.jobs.j.timeout", e
    assert _check(HEAD + 'ready = { kind = "delay", delay = 604800 }\n', USER_SCOPE) is None


def test_a_config_the_owners_open_file_limit_cannot_hold_is_refused_at_the_plan() -> None:
    """Past the owner's RLIMIT_NOFILE the launches beyond it failed one by one ('Too many
    open files'), each app given up at its start limit; the plan said nothing."""
    text = ('[stacks.s.apps.a]\ncommand = ["x"]\ninstances = 20\n'
            '[stacks.s.apps.b]\ncommand = ["x"]\ninstances = 20\n')
    roomy = Host(0, None, 0, 0, frozenset(), owner_nofile=65536)
    assert _check(text, roomy) is None
    assert _check(text, Host(0, None, 0, 0, frozenset())) is None   # an older owner
    tight = Host(0, None, 0, 0, frozenset(), owner_nofile=150)      # 64 + 60 + 60 > 150
    e = _check(text, tight)
    assert e is not None and (e.data["key"], e.data["line"]) == \
        ("stacks.s.apps.b.instances", 6), e.data
    assert "the owner may hold 150 open files (its RLIMIT_NOFILE)" in e.msg
    assert "LimitNOFILE=" in e.msg


def test_the_fds_an_app_may_store_count_against_the_owners_open_file_limit() -> None:
    """Was: the budget ignored fd_store_max; an owner limited to 300 files accepted
    instances = 4, fd_store_max = 1024, and once one app had stored 240 fds the next
    launches failed 'Too many open files'."""
    text = '[stacks.s.apps.a]\ncommand = ["x"]\ninstances = 4\nfd_store_max = 1024\n'
    e = _check(text, Host(0, None, 0, 0, frozenset(), owner_nofile=300))
    assert e is not None and (e.data["key"], e.data["line"]) == \
        ("stacks.s.apps.a.instances", 3), e.data
    assert "fd_store_max" in e.msg and "store fewer fds" in e.msg, e.msg
    # 64 + 2 * (3 + 1 socket + 50 stored) = 172: exactly what the limit allows
    text = ('[stacks.s.apps.a]\ncommand = ["x"]\ninstances = 2\nfd_store_max = 50\n'
            '[stacks.s.apps.a.sockets.web]\nlisten = "127.0.0.1:1"\n')
    assert _check(text, Host(0, None, 0, 0, frozenset(), owner_nofile=172)) is None
    e = _check(text, Host(0, None, 0, 0, frozenset(), owner_nofile=171))
    assert e is not None and e.data["key"] == "stacks.s.apps.a.instances", e.data
    # no store: the same app fits in 64 + 2 * 4
    assert _check(text.replace("fd_store_max = 50\n", ""),
                  Host(0, None, 0, 0, frozenset(), owner_nofile=72)) is None


def test_an_owner_out_of_descriptors_is_named_in_the_spawn_failure() -> None:
    import errno

    from owner.spawnerr import os_failure
    said = os_failure("srv", OSError(errno.EMFILE, "Too many open files"), None, {})
    assert said["text"].startswith("spawn failed: the owner is out of file descriptors "
                                   "(its limit is "), said
    assert "LimitNOFILE=" in said["text"] and said["errno_name"] == "EMFILE"


@pytest.mark.parametrize(("text", "key", "line", "value"), [
    ('health = { kind = "exec", command = ["true"], interval = 1e-9 }\n',
     "health.interval", 3, "1e-09"),
    ('health = { kind = "tcp", port = 1, timeout = 0.049 }\n', "health.timeout", 3,
     "0.049"),
    ('[stacks.demo.apps.web.ready]\nkind = "exec"\ncommand = ["true"]\ninterval = 1e-9\n',
     "ready.interval", 6, "1e-09"),
    ('ready = { kind = "notify", timeout = 1e-9 }\n', "ready.timeout", 3, "1e-09")])
def test_a_probe_interval_or_timeout_under_the_floor_is_refused_at_plan(
        text: str, key: str, line: int, value: str) -> None:
    """Was accepted: an exec health check with `interval = 1e-9` forked hundreds of times
    a second. Refused when a plan is made, so a config applied before still parses."""
    assert parse_config(HEAD + text, "t.toml") is not None   # parses, as it did
    e = _check(HEAD + text, USER_SCOPE)
    assert e is not None and (e.data["key"], e.data["line"]) == (f"{APP}.{key}", line), e
    assert ("must be at least 0.05 s (the shortest probe interval or timeout), not "
            f"{value}") in e.msg


def test_probe_waits_at_the_floor_and_a_tiny_delay_are_accepted() -> None:
    """The floor is for what repeats: a ready `delay` is waited once per start."""
    at_floor = ('ready = { kind = "tcp", port = 1, interval = 0.05, timeout = 0.05 }\n'
                'health = { kind = "exec", command = ["true"], interval = 0.05, '
                'timeout = 0.05 }\n')
    assert _check(HEAD + at_floor, USER_SCOPE) is None
    assert _check(HEAD + 'ready = { kind = "delay", delay = 1e-300 }\n', USER_SCOPE) is None
