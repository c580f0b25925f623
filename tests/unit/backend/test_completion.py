"""The completion scripts in the real shells: commands, options from the parser,
actions, files after file options, and live targets from `tenure __complete`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from backend.cli.completion import script, targets
from backend.cli.main import _parser

FAKE_TENURE = """#!/bin/sh
# answers `tenure [--home H] __complete targets` like a backend with two apps
[ "$1" = --home ] && { echo "$2" > "$(dirname "$0")/home-seen"; shift 2; }
[ "$1 $2" = "__complete targets" ] && printf 'shop\\nshop/web\\nshop/web/0\\nshop/worker\\n'
"""


def complete(tmp_path: Path, shell: str, words: list[str]) -> list[str]:
    """COMPREPLY for ``words`` (the last one is being completed) in ``shell``."""
    fake = tmp_path / "tenure"
    fake.write_text(FAKE_TENURE)
    fake.chmod(0o755)
    (tmp_path / "a.toml").write_text("")
    src = tmp_path / f"completion.{shell}"
    src.write_text(script(_parser(), shell))
    arr = " ".join(f"'{w}'" for w in [str(fake), *words])
    body = (f"source {src}\n" + ("setopt ksharrays\n" if shell == "zsh" else "") +
            f"COMP_WORDS=({arr}); COMP_CWORD={len(words)}\n_tenure\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    run = subprocess.run([shell, "-c", body], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path)
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


def test_hidden_commands_are_not_offered_and_every_option_exists() -> None:
    text = script(_parser(), "bash")
    assert "__complete" not in text.split("_tenure_targets() {")[0]
    assert "completion)" in text and "'__complete'" not in text
    assert "--follow" in text and "--no-such-option" not in text


def test_targets_lists_stacks_apps_and_instances() -> None:
    status = {"apps": [{"key": "s/a/0", "stack": "s", "app": "a"},
                       {"key": "s/a/1", "stack": "s", "app": "a"},
                       {"key": "t/b/0", "stack": "t", "app": "b"}]}
    assert targets(status) == ["s", "s/a", "s/a/0", "s/a/1", "t", "t/b", "t/b/0"]
