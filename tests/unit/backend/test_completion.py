"""The completion scripts in the real shells: commands, options from the parser,
actions, files after file options, and live targets from `tenure __complete`."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from backend.cli.cmdline import parser
from backend.cli.completion import AFTER_ACTION, script, targets

FAKE_TENURE = """#!/bin/sh
# answers `tenure [--home H] __complete targets` like a backend with two apps
if [ "$1" = --home ]; then echo "$2" > "$(dirname "$0")/home-seen"; shift 2
else echo "env:$TENURE_HOME" > "$(dirname "$0")/home-seen"; fi
[ "$1 $2" = "__complete targets" ] && printf 'shop\\nshop/web\\nshop/web/0\\nshop/worker\\n'
"""


def complete(tmp_path: Path, shell: str, words: list[str], setup: str = "",
             env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY for ``words`` (the last one is being completed) in ``shell``, after the
    shell ran ``setup``, in ``env``."""
    fake = tmp_path / "tenure"
    fake.write_text(FAKE_TENURE)
    fake.chmod(0o755)
    (tmp_path / "a.toml").write_text("")
    src = tmp_path / f"completion.{shell}"
    src.write_text(script(parser(), shell))
    arr = " ".join(shlex.quote(w) for w in [str(fake), *words])
    body = (f"source {src}\n{setup}\n" + ("setopt ksharrays\n" if shell == "zsh" else "") +
            f"COMP_WORDS=({arr}); COMP_CWORD={len(words)}\n_tenure\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    run = subprocess.run([shell, "-c", body], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0 and not run.stderr, run.stderr
    out = [w for w in run.stdout.splitlines() if w]
    # zsh's compgen leaves matching the typed prefix to compadd, as completion runs it
    return [w for w in out if w.startswith(words[-1])] if shell == "zsh" else out


SHELLS = [pytest.param(s, marks=pytest.mark.skipif(
    shutil.which(s) is None, reason=f"{s} is not installed (.ci/run installs it)"))
    for s in ("bash", "zsh")]


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_in_the_shell(shell: str, tmp_path: Path) -> None:
    assert sorted(complete(tmp_path, shell, ["sta"])) == ["stack", "start", "status"]
    assert "--watch" in complete(tmp_path, shell, ["status", "--"])
    assert "--grep" in complete(tmp_path, shell, ["logs", "-f", "--"])
    assert complete(tmp_path, shell, ["backend", "up"]) == ["upgrade"]
    assert complete(tmp_path, shell, ["restart", "shop/w"]) == \
        ["shop/web", "shop/web/0", "shop/worker"]
    assert complete(tmp_path, shell, ["--home", "/srv/t", "logs", "shop/web/"]) == \
        ["shop/web/0"]
    assert (tmp_path / "home-seen").read_text().strip() == "/srv/t"
    assert complete(tmp_path, shell, ["up", "--config", "a.t"]) == ["a.toml"]
    assert complete(tmp_path, shell, ["--js"]) == ["--json"]


SHOP = ["shop/web", "shop/web/0", "shop/worker"]


@pytest.mark.parametrize("shell", SHELLS)
def test_targets_ask_the_home_however_it_is_written(shell: str, tmp_path: Path) -> None:
    """--home=DIR as bash hands it over (--home, =, DIR: '=' is in COMP_WORDBREAKS) and as
    zsh does (one word), before or after the command, with ~, $H or quotes as typed (the
    shell expands none of them for completion); nothing in the word is run."""
    def home(words: list[str]) -> str:
        (tmp_path / "home-seen").unlink(missing_ok=True)
        assert complete(tmp_path, shell, words, "H=/srv/h", env=env) == SHOP
        return (tmp_path / "home-seen").read_text().strip()

    env = {**os.environ, "HOME": "/home/op", "TENURE_HOME": "/srv/env"}
    assert home(["--home", "=", "/srv/t", "stop", "shop/w"]) == "/srv/t"
    assert home(["--home=/srv/t", "stop", "shop/w"]) == "/srv/t"
    assert home(["restart", "--home", "=", "/srv/u", "shop/w"]) == "/srv/u"
    assert home(["--json", "inspect", "--home=/srv/u", "shop/w"]) == "/srv/u"
    assert home(["--home=$H", "stop", "shop/w"]) == "/srv/h"
    assert home(["--home", "=", '"${H}/x"', "stop", "shop/w"]) == "/srv/h/x"
    assert home(["--home", "~/t", "stop", "shop/w"]) == "/home/op/t"
    assert home(["--home", "'$H'", "stop", "shop/w"]) == "$H"
    assert home(["--home", "$(touch ran)", "stop", "shop/w"]) == "$(touch ran)"
    assert home(["--home", "${H;touch ran}", "stop", "shop/w"]) == "${H;touch ran}"
    assert not (tmp_path / "ran").exists()
    assert home(["stop", "shop/w"]) == "env:/srv/env"   # tenure reads $TENURE_HOME


@pytest.mark.parametrize("shell", SHELLS)
def test_the_word_after_an_action_is_what_that_action_takes(shell: str,
                                                            tmp_path: Path) -> None:
    (tmp_path / "rel-1").mkdir()
    assert complete(tmp_path, shell, ["--home", "/srv/t", "stack", "stop", ""]) == ["shop"]
    assert complete(tmp_path, shell, ["stack", "--digest", "d", "start", "s"]) == ["shop"]
    assert complete(tmp_path, shell, ["stack", "stop", "shop", ""]) == []
    assert complete(tmp_path, shell, ["job", "list", "sh"]) == ["shop"]
    assert complete(tmp_path, shell, ["backend", "--check", "upgrade", "rel"]) == ["rel-1"]
    assert complete(tmp_path, shell, ["release", "install", "rel"]) == ["rel-1"]
    assert complete(tmp_path, shell, ["op", "show", ""]) == []
    assert complete(tmp_path, shell, ["backend", "status", ""]) == []
    assert complete(tmp_path, shell, ["--home=/srv/t", "stack", "st"]) == ["start", "stop"]
    # one target, or any number; an option's value is not one
    assert complete(tmp_path, shell, ["start", "shop/web", ""]) == []
    assert complete(tmp_path, shell, ["status", "shop", "shop/w"]) == SHOP
    assert complete(tmp_path, shell, ["logs", "--since", "=", "1h", "shop/w"]) == SHOP
    assert complete(tmp_path, shell, ["logs", "-n", "5", "shop/w"]) == SHOP
    assert complete(tmp_path, shell, ["logs", "--since", ""]) == []


def test_every_command_with_actions_says_what_its_actions_take() -> None:
    """A command whose first positional is an action word and which has another: each
    action's next word is decided in AFTER_ACTION (if only to offer nothing)."""
    for name, p in _subparsers().items():
        pos = [a for a in p._actions if not a.option_strings]
        if pos and pos[0].choices and len(pos) > 1:
            assert name in AFTER_ACTION, name
            assert set(AFTER_ACTION[name]) <= set(pos[0].choices), name


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {k: v for k, v in sub.choices.items() if not k.startswith("_")}


def test_hidden_commands_are_not_offered_and_every_option_exists() -> None:
    text = script(parser(), "bash")
    assert "__complete" not in text.split("_tenure_targets() {")[0]
    assert "completion)" in text and "'__complete'" not in text
    assert "--follow" in text and "--no-such-option" not in text


def test_targets_lists_stacks_apps_and_instances() -> None:
    status = {"apps": [{"key": "s/a/0", "stack": "s", "app": "a"},
                       {"key": "s/a/1", "stack": "s", "app": "a"},
                       {"key": "t/b/0", "stack": "t", "app": "b"}]}
    assert targets(status) == ["s", "s/a", "s/a/0", "s/a/1", "t", "t/b", "t/b/0"]
