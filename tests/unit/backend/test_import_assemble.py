"""Assembling drafts: valid and unique names (renames reported), stacks, start order
from priorities, unusable values dropped with a report, and the shared restart-limit and
shell rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.config import parse_config
from backend.importers import import_files
from backend.importers.assemble import assemble, clean_name
from backend.importers.model import Draft, FindingKind, Origin
from backend.importers.policy import needs_shell, quick_failure_limit
from backend.importers.toml_writer import render_toml
from backend.model import App, Backoff, StartLimit, StopSpec


def _draft(name: str, stack: str = "", priority: int | None = None,
           **kw: object) -> Draft:
    fields: dict[str, object] = {"command": ("run", name), **kw}
    app = App(name=name, stack=stack, **fields)  # type: ignore[arg-type]
    return Draft(app, Origin("f.conf", 1, f"[program:{name}]"), priority)


def test_names_are_cleaned_and_made_unique_with_a_note() -> None:
    out = assemble([_draft("web"), _draft("web"), _draft("cron: nightly"), _draft("_x"),
                    _draft("!!!")], "shop")
    assert sorted(out.config.stacks["shop"].apps) == ["app", "cron-nightly", "web", "web-2",
                                                       "x"]
    notes = sorted(f.problem for f in out.findings if f.kind is FindingKind.NOTE)
    assert "app 'web' is named 'web-2' in tenure.toml" in notes
    assert "app 'cron: nightly' is named 'cron-nightly' in tenure.toml" in notes
    assert len(notes) == 4


def test_clean_name_keeps_valid_names_and_limits_length() -> None:
    assert clean_name("api.v2_x-1", "f") == "api.v2_x-1"
    assert clean_name("a" * 100, "f") == "a" * 64
    assert clean_name("  ", "fallback") == "fallback"


@pytest.mark.parametrize(("raw", "name"), [
    ("My Project", "My-Project"), (".hidden", "hidden"), ("cron: nightly", "cron-nightly"),
    ("日本app", "app"),         # as much kept as lost: kept
    ("ünï", "f"), ("ab日本語", "f"), ("!!!", "f"),   # mostly lost: the fallback
])
def test_clean_name_falls_back_when_most_of_the_name_is_lost(raw: str, name: str) -> None:
    assert clean_name(raw, "f") == name


def test_a_group_name_mostly_lost_goes_to_the_default_stack_with_a_note() -> None:
    out = assemble([_draft("a", "ünï"), _draft("b")], "shop")
    assert sorted(out.config.stacks["shop"].apps) == ["a", "b"]
    assert [f.problem for f in out.findings] == ["stack 'ünï' is named 'shop' in tenure.toml"]


def test_groups_become_stacks_and_the_rest_goes_to_the_default_stack() -> None:
    out = assemble([_draft("a", "shop"), _draft("b"), _draft("c", "my group")], "misc")
    assert {s: sorted(st.apps) for s, st in out.config.stacks.items()} == {
        "misc": ["b"], "my-group": ["c"], "shop": ["a"]}
    assert any("stack 'my group' is named 'my-group'" in f.problem for f in out.findings)


def test_priorities_become_after_levels_within_a_stack() -> None:
    out = assemble([_draft("web", "s", 20), _draft("db", "s", 10), _draft("cache", "s", 10),
                    _draft("worker", "s", 30), _draft("solo", "t", 5)], "d")
    apps = out.config.stacks["s"].apps
    assert apps["db"].after == () and apps["cache"].after == ()
    assert apps["web"].after == ("cache", "db")
    assert apps["worker"].after == ("web",)
    assert out.config.stacks["t"].apps["solo"].after == ()
    parse_config(render_toml(out.config, out.origins), "t")  # valid: no cycle, known apps


def test_equal_priorities_need_no_order() -> None:
    out = assemble([_draft("a", priority=999), _draft("b", priority=999)], "s")
    assert all(a.after == () for a in out.config.stacks["s"].apps.values())


def test_apps_without_a_priority_take_no_part_in_the_order() -> None:
    """PM2 and Procfile apps have no priority: they wait for no app and none waits for
    them, whatever priorities the supervisord apps beside them have."""
    out = assemble([_draft("db", priority=10), _draft("web", priority=20),
                    _draft("worker"), _draft("clock")], "s")
    apps = out.config.stacks["s"].apps
    assert (apps["db"].after, apps["web"].after) == ((), ("db",))
    assert apps["worker"].after == () and apps["clock"].after == ()
    one = assemble([_draft("web", priority=999), _draft("worker")], "s")
    assert all(a.after == () for a in one.config.stacks["s"].apps.values())


def test_mixing_formats_in_one_stack_adds_no_start_order(tmp_path: Path) -> None:
    (tmp_path / "w.conf").write_text("[program:web]\ncommand=/bin/true\n")
    (tmp_path / "Procfile").write_text('web: node app.js\nworker: sh -c "echo hi"\n')
    result = import_files([str(tmp_path / "w.conf"), str(tmp_path / "Procfile")], "y")
    apps = result.config.stacks["y"].apps
    assert sorted(apps) == ["web", "web-2", "worker"]
    assert all(a.after == () for a in apps.values())


def test_nul_characters_drop_the_app_or_the_variable() -> None:
    out = assemble([_draft("bad", command=("x\0y",)),
                    _draft("env", env={"OK": "1", "": "empty", "A=B": "x", "N": "a\0"})], "s")
    assert list(out.config.stacks["s"].apps) == ["env"]
    assert out.config.stacks["s"].apps["env"].env == {"OK": "1"}
    problems = [f.problem for f in out.findings if f.kind is FindingKind.NOT_MAPPED]
    assert problems[0] == "has a NUL character: app not imported"
    assert len(problems) == 4



def test_what_tenure_refuses_is_reported_not_an_internal_error() -> None:
    """Regression: a blank program name, a value over the exec limit or a stop signal
    that never ends a process went through to tenure's config check and `tenure
    import` ended in INTERNAL. Each is a not-mapped finding now, and the rest of the
    config is written."""
    big = "x" * 131072
    out = assemble([_draft("blank", command=("  ", "foo")),
                    _draft("long", command=("run", big)),
                    _draft("env", env={"BIG": big, "OK": "1"}),
                    _draft("stop", stop=StopSpec(signal="STOP", timeout=3.0)),
                    _draft("cont", stop=StopSpec(signal="CONT"))], "s")
    apps = out.config.stacks["s"].apps
    assert sorted(apps) == ["cont", "env", "stop"]
    assert apps["env"].env == {"OK": "1"}
    assert apps["stop"].stop == StopSpec(signal="TERM", timeout=3.0)
    assert apps["cont"].stop == StopSpec()
    assert sorted(f.problem for f in out.findings if f.kind is FindingKind.NOT_MAPPED) == [
        "argument 1 of the command is over 131072 bytes, more than Linux execs: app not "
        "imported",
        "env 'BIG': over 131072 bytes, more than Linux execs",
        "stop signal SIGCONT never ends a process: SIGTERM is used",
        "stop signal SIGSTOP never ends a process: SIGTERM is used",
        "the program name is empty or blank: app not imported"]
    parse_config(render_toml(out.config, out.origins), "t")   # what is written is valid
@pytest.mark.parametrize(("starts", "uptime", "limit"), [
    (4, 1.0, StartLimit(4, 8.5)),     # supervisord defaults: 4 runs + 0.5 + 1 + 2 + 1
    (1, 0.0, StartLimit(1, 1.0)),     # one start, no waits: just the margin
    (0, 5.0, StartLimit(1, 6.0)),     # at least one start is always allowed
    (10, 1.0, StartLimit(10, 10 + 0.5 + 1 + 2 + 4 + 8 + 16 + 30 * 3 + 1)),  # max caps
])
def test_quick_failure_limit_covers_a_streak_of_quick_failures(
        starts: int, uptime: float, limit: StartLimit) -> None:
    assert quick_failure_limit(starts, uptime, Backoff()) == limit


def test_quick_failure_limit_of_a_huge_streak_is_computed_at_once() -> None:
    """A streak past what start_limit.burst takes is cut to its most (1,000,000
    starts), and the interval of that many is computed without a loop per start."""
    fixed = Backoff(initial=2.0, max=2.0, factor=1.0)
    assert quick_failure_limit(10**9, 0.0, fixed) == \
        StartLimit(burst=10**6, interval=(10**6 - 1) * 2.0 + 1)
    assert quick_failure_limit(10**9, 0.0, Backoff(initial=0.0)).interval == 1.0
    capped = quick_failure_limit(10**9, 0.0, Backoff()).interval
    assert capped == round(0.5 + 1 + 2 + 4 + 8 + 16 + 30 * (10**6 - 7) + 1, 3)


@pytest.mark.parametrize(("command", "shell"), [
    ("bundle exec puma -C config/puma.rb", False),
    ('"/opt/my app/bin/run" --name \'a b\'', False),
    ("puma -p $PORT", True),
    ("yarn build 2>&1 | tee log", True),
    ("a && b", True),
    ("RAILS_ENV=production rails s", True),
    ("cd web && npm start", True),
    ("exec gunicorn app", True),
    ("ls *.txt", True),
    ("echo `date`", True),
    ("python -c 'print(1)'", True),   # parentheses: conservative, sh gives the same result
    ("node server.js --port=3000", False),
])
def test_needs_shell_only_for_shell_syntax(command: str, shell: bool) -> None:
    assert needs_shell(command) is shell
