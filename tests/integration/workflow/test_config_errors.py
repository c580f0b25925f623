"""A bad config (wrong type, unknown key, bad signal name, duplicate app, a cgroup limit
the owner cannot enforce) is refused by `tenure plan` and `tenure up` with CONFIG_INVALID
naming the file, key and line — and nothing changes in the running system."""

from __future__ import annotations

from typing import Any

import pytest

GOOD = """[stacks.e.apps.a]
command = ["sleep", "1000"]

[stacks.e.apps.b]
command = ["sleep", "1000"]
instances = 2
"""

BASE = """[stacks.e.apps.a]
command = ["sleep", "1000"]

[stacks.e.apps.b]
command = ["sleep", "1000"]
"""

# (name, line 6 and after, expected key, expected line)
BAD = [
    ("wrong-type", 'instances = "two"\n', "stacks.e.apps.b.instances", 6),
    ("unknown-key", 'comand = ["sleep", "1"]\n', "stacks.e.apps.b.comand", 6),
    ("bad-signal", 'stop = { signal = "SIGFOO" }\n', "stacks.e.apps.b.stop.signal", 6),
    ("stop-signal", 'stop = { signal = "stop" }\n', "stacks.e.apps.b.stop.signal", 6),
    ("duplicate-app", '[stacks.e.apps.a]\ncommand = ["true"]\n', "stacks.e.apps.a", 6),
]


def snapshot(cluster: Any) -> dict[str, Any]:
    st = cluster.status()
    return {"pids": cluster.pids(),
            "apps": {k: (r["pid"], r["state"], r["restarts"]) for k, r in cluster.apps().items()},
            "revision": st["backend"]["config_revision"], "source": st["backend"]["config"],
            "ops": len(cluster.call("op.list")["operations"])}


def check_error(res: Any, path: str, key: str, line: int) -> None:
    assert res.code == 1, res
    err = res.out["error"]
    assert err["code"] == "CONFIG_INVALID", err
    assert err["data"]["file"] == path, err
    assert err["data"]["key"] == key, err
    assert err["data"]["line"] == line, err
    assert err["msg"].startswith(f"{path}:{line}: {key}"), err


def test_bad_configs_are_refused_exactly_and_change_nothing(cluster):
    cluster.up(GOOD)
    cluster.wait_ready(3)
    before = snapshot(cluster)
    for name, tail, key, line in BAD:
        path = cluster.write_config(BASE + tail, f"{name}.toml")
        check_error(cluster.cli("plan", "--config", str(path)), str(path), key, line)
        up = cluster.cli("up", "--config", str(path), "--release", str(cluster.release),
                         "--timeout", "60")
        check_error(up, str(path), key, line)
        assert snapshot(cluster) == before, name
    # the problem is the file, not the system: a good file still plans to nothing
    good = cluster.write_config(GOOD, "good.toml")
    assert cluster.cli("plan", "--config", str(good), check=True).out["changes"] == []


def test_cgroup_limits_the_owner_cannot_enforce_are_refused_and_change_nothing(cluster):
    """This owner has no delegated cgroup (it tracks apps by process group): a cgroup
    limit is a config error with its key and line, from plan and from up alike."""
    cluster.up(GOOD)
    cluster.wait_ready(3)
    owner = cluster.cli("owner", "status", check=True).out
    if owner["cgroup_controllers"] is not None:
        pytest.skip(f"this owner has a delegated cgroup ({owner['cgroup_controllers']})")
    before = snapshot(cluster)
    for key, value in (("memory_max", '"64M"'), ("cpu_quota", "0.5"), ("pids_max", "32")):
        path = cluster.write_config(f"{BASE}[stacks.e.apps.b.limits]\n{key} = {value}\n",
                                    f"{key}.toml")
        args = [("plan", "--config", str(path))]
        if key == "memory_max":
            args.append(("up", "--config", str(path), "--release", str(cluster.release),
                         "--timeout", "60"))
        for cmd in args:
            res = cluster.cli(*cmd)
            check_error(res, str(path), f"stacks.e.apps.b.limits.{key}", 7)
            assert "needs per-app cgroups" in res.out["error"]["data"]["problem"], res.out
            assert snapshot(cluster) == before, cmd


def test_a_file_that_is_not_a_config_is_refused_with_its_file_and_problem(cluster):
    """A 2 MiB file was BAD_FRAME (its text did not fit a request), /dev/zero was read
    until memory ran out, and an unreadable file's error had only its file."""
    cluster.up(GOOD)
    cluster.wait_ready(3)
    before = snapshot(cluster)
    big = cluster.write_config(BASE + "# " + "x" * (2 << 20) + "\n", "big.toml")
    missing = str(cluster.home / "missing.toml")
    for path, problem in ((str(big), "larger than 1 MiB, the most a config may be"),
                          ("/dev/zero", "larger than 1 MiB, the most a config may be"),
                          (missing, "cannot read the file: No such file or directory")):
        for verb in (("plan",), ("up", "--timeout", "60")):
            res = cluster.cli(*verb, "--config", path, timeout=60)
            assert res.code == 1 and res.out["error"]["code"] == "CONFIG_INVALID", res
            assert res.out["error"]["data"] == {"file": path, "key": "", "line": None,
                                                "problem": problem}, res.out
    assert snapshot(cluster) == before
    # a client other than the CLI gets the same bound
    with pytest.raises(Exception, match="larger than 1 MiB") as err:
        cluster.call("plan", {"config_text": BASE + "#" * (1 << 20), "source": "api"})
    assert getattr(err.value, "code", None) == "CONFIG_INVALID"
