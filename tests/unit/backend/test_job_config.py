"""[stacks.<s>.jobs.<name>] parsing: defaults, every key, errors with key and line, and
the revision (configs without jobs keep theirs; any job change moves it)."""

from __future__ import annotations

import pytest

from backend.config import canonical_form, parse_config
from backend.jobs.model import JobTemplate, Retention, Schedule
from backend.model import StopSpec
from protocol.errors import ConfigInvalid

APP = '[stacks.s.apps.web]\ncommand = ["web"]\n'            # lines 1-2
JOB = "stacks.s.jobs.migrate"
HEAD = f'{APP}[{JOB}]\ncommand = ["migrate", "--all"]\n'   # lines 3-4; the next is 5


def _invalid(text: str) -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.toml")
    return info.value


def test_defaults() -> None:
    job = parse_config(HEAD, "t.toml").job("s", "migrate")
    assert job == JobTemplate(name="migrate", stack="s", command=("migrate", "--all"))
    assert (job.timeout, job.max_concurrent, job.retention, job.schedule, job.after) == \
        (None, 1, Retention(keep=100, days=None), None, ())
    assert job.stop == StopSpec() and job.key == "s/migrate"


def test_every_key() -> None:
    text = HEAD + (
        'env = { B = "2", A = "1" }\ncwd = "/srv"\ntimeout = 90\nmax_concurrent = 3\n'
        "retention = { keep = 10, days = 7 }\n"
        'schedule = "  30  3 * * MON-FRI "\ntime_zone = "Europe/Riga"\ncatch_up = true\n'
        'after = ["web"]\n')
    job = parse_config(text, "t.toml").job("s", "migrate")
    assert job is not None
    assert dict(job.env) == {"A": "1", "B": "2"} and list(job.env) == ["A", "B"]
    assert (job.cwd, job.timeout, job.max_concurrent) == ("/srv", 90.0, 3)
    assert job.retention == Retention(keep=10, days=7.0)
    assert job.schedule == Schedule("30 3 * * MON-FRI", "Europe/Riga", True)
    assert job.after == ("web",)


def test_retention_forms() -> None:
    def retention(body: str) -> Retention:
        job = parse_config(HEAD + f"retention = {{ {body} }}\n", "t.toml").job("s", "migrate")
        assert job is not None
        return job.retention
    assert retention("") == Retention(keep=100, days=None)
    assert retention("days = 30") == Retention(keep=None, days=30.0)
    assert retention("keep = 5") == Retention(keep=5, days=None)


def test_a_stack_of_jobs_only_is_valid_and_an_empty_stack_is_not() -> None:
    config = parse_config('[stacks.ops.jobs.backup]\ncommand = ["b"]\n', "t.toml")
    assert config.stacks["ops"].apps == {} and [j.key for j in config.jobs()] == ["ops/backup"]
    err = _invalid("[stacks.ops]\n")
    assert err.data["key"] == "stacks.ops.apps"
    assert "at least one app or job" in err.data["problem"]


# (id, text, expected key, expected line)
BAD: list[tuple[str, str, str, int]] = [
    ("unknown-key", HEAD + "comand = 1\n", f"{JOB}.comand", 5),
    ("missing-command", f"{APP}[{JOB}]\ntimeout = 1\n", f"{JOB}.command", 3),
    ("command-empty", f"{APP}[{JOB}]\ncommand = []\n", f"{JOB}.command", 4),
    ("command-blank-program", f'{APP}[{JOB}]\ncommand = [" ", "x"]\n', f"{JOB}.command[0]", 4),
    ("bad-name", f'{APP}[stacks.s.jobs."a b"]\ncommand = ["x"]\n', 'stacks.s.jobs."a b"', 3),
    ("not-a-table", f"{APP}[stacks.s.jobs]\nmigrate = 1\n", JOB, 4),
    ("jobs-not-a-table", f"{APP}[stacks.s]\njobs = 1\n", "stacks.s.jobs", 4),
    ("env-type", HEAD + "env = { A = 1 }\n", f"{JOB}.env.A", 5),
    ("env-name", HEAD + 'env = { "A=B" = "1" }\n', f'{JOB}.env."A=B"', 5),
    ("cwd-relative", HEAD + 'cwd = "srv"\n', f"{JOB}.cwd", 5),
    ("timeout-negative", HEAD + "timeout = -1\n", f"{JOB}.timeout", 5),
    ("timeout-type", HEAD + 'timeout = "1m"\n', f"{JOB}.timeout", 5),
    ("max-concurrent-zero", HEAD + "max_concurrent = 0\n", f"{JOB}.max_concurrent", 5),
    ("max-concurrent-big", HEAD + "max_concurrent = 65\n", f"{JOB}.max_concurrent", 5),
    ("retention-key", HEAD + "retention = { count = 1 }\n", f"{JOB}.retention.count", 5),
    ("retention-keep-zero", HEAD + "retention = { keep = 0 }\n", f"{JOB}.retention.keep", 5),
    ("retention-days-zero", HEAD + "retention = { days = 0 }\n", f"{JOB}.retention.days", 5),
    ("retention-type", HEAD + "retention = 5\n", f"{JOB}.retention", 5),
    ("schedule-fields", HEAD + 'schedule = "* * * *"\n', f"{JOB}.schedule", 5),
    ("schedule-six-fields", HEAD + 'schedule = "0 * * * * *"\n', f"{JOB}.schedule", 5),
    ("schedule-value", HEAD + 'schedule = "61 * * * *"\n', f"{JOB}.schedule", 5),
    ("schedule-type", HEAD + "schedule = 5\n", f"{JOB}.schedule", 5),
    ("time-zone-unknown", HEAD + 'schedule = "0 3 * * *"\ntime_zone = "Mars/Olympus"\n',
     f"{JOB}.time_zone", 6),
    ("time-zone-path", HEAD + 'schedule = "0 3 * * *"\ntime_zone = "../etc"\n',
     f"{JOB}.time_zone", 6),
    ("time-zone-without-schedule", HEAD + 'time_zone = "UTC"\n', f"{JOB}.time_zone", 5),
    ("catch-up-without-schedule", HEAD + "catch_up = true\n", f"{JOB}.catch_up", 5),
    ("catch-up-type", HEAD + 'schedule = "0 3 * * *"\ncatch_up = 1\n', f"{JOB}.catch_up", 6),
    ("after-unknown", HEAD + 'after = ["db"]\n', f"{JOB}.after[0]", 5),
    ("after-twice", HEAD + 'after = ["web", "web"]\n', f"{JOB}.after[1]", 5),
    ("after-type", HEAD + 'after = "web"\n', f"{JOB}.after", 5),
]


@pytest.mark.parametrize(("text", "key", "line"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_errors_name_the_key_and_line(text: str, key: str, line: int) -> None:
    err = _invalid(text)
    assert (err.data["key"], err.data["line"]) == (key, line), err.msg
    assert err.msg.startswith(f"t.toml:{line}: {key}: ")


def test_the_revision_of_a_config_without_jobs_has_no_jobs_in_its_canonical_form() -> None:
    form = canonical_form(parse_config(APP, "t.toml"))
    assert form["stacks"]["s"] == {"apps": form["stacks"]["s"]["apps"]}


def test_job_changes_move_the_revision_and_formatting_does_not() -> None:
    base = parse_config(HEAD, "t.toml").revision
    same = parse_config(f'{APP}[stacks.s.jobs]\nmigrate = {{ command = ["migrate", '
                        '"--all"], max_concurrent = 1 }\n', "other.toml").revision
    assert same == base
    for extra in ("timeout = 5\n", 'env = { A = "1" }\n', "max_concurrent = 2\n",
                  'schedule = "0 * * * *"\n', "retention = { keep = 3 }\n",
                  'after = ["web"]\n'):
        assert parse_config(HEAD + extra, "t.toml").revision != base, extra
    assert parse_config(APP, "t.toml").revision != base


def test_job_changes_of_a_plan() -> None:
    from backend.jobs.config import job_changes
    old = parse_config(HEAD + '[stacks.s.jobs.gone]\ncommand = ["g"]\n', "t.toml")
    new = parse_config(HEAD + "timeout = 5\n" + '[stacks.s.jobs.fresh]\ncommand = ["f"]\n',
                       "t.toml")
    assert job_changes(old, new) == [{"action": "add", "job": "s/fresh"},
                                     {"action": "remove", "job": "s/gone"},
                                     {"action": "change", "job": "s/migrate"}]
    assert job_changes(new, new) == []
    from backend.cli import render_changes
    text = render_changes.plan({"id": "plan-1", "fingerprint": "f" * 64, "changes": [],
                        "jobs": job_changes(old, new)})
    assert "no changes" not in text and "  add     job s/fresh" in text


def test_identity_and_max_pending_parse_like_an_apps() -> None:
    from backend.model import RunAs
    job = parse_config(HEAD + 'user = "nobody"\ngroup = "nogroup"\n'
                       'supplementary_groups = ["adm"]\numask = "0027"\nmax_pending = 5\n',
                       "t.toml").job("s", "migrate")
    assert job is not None
    assert job.run_as == RunAs("nobody", "nogroup", ("adm",), 0o027)
    assert job.max_pending == 5
    default = parse_config(HEAD, "t.toml").job("s", "migrate")
    assert default is not None and (default.run_as, default.max_pending) == (RunAs(), 1000)


@pytest.mark.parametrize(("text", "key", "line"), [
    ('user = "a:b"\n', f"{JOB}.user", 5),
    ('group = "g"\n', f"{JOB}.group", 5),
    ('user = "u"\numask = "999"\n', f"{JOB}.umask", 6),
    ("max_pending = 0\n", f"{JOB}.max_pending", 5),
    ("max_pending = 1_000_001\n", f"{JOB}.max_pending", 5),
    ("limits = { nofile = 5 }\n", f"{JOB}.limits", 5),     # apps only
])
def test_bad_identity_and_max_pending_name_the_key_and_line(text: str, key: str, line: int
                                                            ) -> None:
    err = _invalid(HEAD + text)
    assert (err.data["key"], err.data["line"]) == (key, line), err.msg


def test_a_job_config_without_the_new_keys_keeps_its_revision() -> None:
    """Revisions are in certificates and checkpoints: a config with jobs but without
    user or max_pending keeps the revision it had before those keys existed."""
    text = HEAD + "timeout = 5\nmax_concurrent = 2\n"
    assert parse_config(text, "t.toml").revision == \
        "e6d65eb424fadcffe351f186779f58bd60100fd09049e35bbd4f07f64d03a42f"
    assert parse_config(text + "max_pending = 1000\n", "t.toml").revision == \
        parse_config(text, "t.toml").revision                   # the default, spelled out
    for extra in ('user = "nobody"\n', "max_pending = 10\n"):
        assert parse_config(text + extra, "t.toml").revision != \
            parse_config(text, "t.toml").revision, extra
