"""Every exit status of the CLI comes from one table, and docs/cli.md lists that table,
every command and every long option."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.cli.exits import Exit

ROOT = Path(__file__).resolve().parents[3]


def test_no_command_returns_a_bare_number() -> None:
    bare = []
    for path in sorted((ROOT / "backend" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, int) and not isinstance(node.value.value,
                                                                         bool):
                bare.append(f"{path.name}:{node.lineno}")
    assert not bare, f"return Exit.<NAME> instead of a number: {bare}"


def test_the_documented_exit_table_is_the_enum() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("## Exit statuses"):text.index("Details that matter")]
    documented = {int(m) for m in re.findall(r"^\| `(\d+)` \|", table, re.M)}
    assert documented == {int(e) for e in Exit}


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], set[str]]]:
    """Every leaf command: its words and its long options."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, {o for a in parser._actions for o in a.option_strings
                       if o.startswith("--") and o != "--help"}
        return
    for name, sub in subs[0].choices.items():
        if not name.startswith("__"):   # hidden: the completion script's own question
            yield from _commands(sub, (*prefix, name))


def test_the_reference_names_every_command_and_long_option() -> None:
    """docs/cli.md is the CLI reference: a command or option it does not name is one an
    operator cannot look up."""
    from backend.cli.cmdline import parser
    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [f"tenure {' '.join(words)}" for words, _ in _commands(parser())
               if f"tenure {' '.join(words)}" not in text]
    missing += [f"tenure {' '.join(words)} {o}" for words, opts in _commands(parser())
                for o in sorted(opts) if o not in text]
    assert not missing, f"docs/cli.md does not name: {missing}"


def _filled(parser: argparse.ArgumentParser) -> tuple[list[str], bool]:
    """Words that a command accepts (a value for each positional and required option),
    and whether a positional takes any number of words (then none is one too many)."""
    words, repeats = [], False
    for a in parser._actions:
        if a.option_strings:
            words += [a.option_strings[0], "x"] if a.required else []
        else:
            words.append(str(sorted(a.choices)[0]) if a.choices else "s/a")
            repeats = repeats or a.nargs in ("*", "+")
    return words, repeats


def _leaves() -> dict[str, argparse.ArgumentParser]:
    from backend.cli.cmdline import parser
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {k: v for k, v in sub.choices.items() if not k.startswith("__")}


@pytest.mark.parametrize("name", sorted(_leaves()))
def test_a_word_too_many_is_refused_with_the_usage_of_its_command(
        name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`tenure start a b` names `tenure start`'s usage (not `tenure COMMAND …`, which
    argparse gives for words a command hands back), exit 2 as every usage error, with or
    without --json; so does an option the command does not have."""
    from backend.cli.main import main
    words, repeats = _filled(_leaves()[name])
    extra = [["--no-such-option"]] + ([] if repeats else [["extra"]])
    for argv in ([*a, name, *words, *x] for x in extra for a in ([], ["--json"])):
        with pytest.raises(SystemExit) as exc:
            main(["--home", str(tmp_path), *argv])
        out, err = capsys.readouterr()
        assert exc.value.code == Exit.USAGE and out == "", argv
        assert err.startswith(f"usage: tenure {name} "), (argv, err)
        assert f"tenure {name}: error: unrecognized arguments: {argv[-1]}\n" in err, argv


def test_an_unexpected_failure_of_a_command_is_one_coded_line(monkeypatch, capsys,
                                                              tmp_path) -> None:
    """Was a Python traceback and exit 1 (a config nested too deeply, parsed by `up`)."""
    from backend.cli import main

    def boom(args: object) -> int:
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(main, "_handler", lambda cmd: boom)
    monkeypatch.delenv("TENURE_DEBUG", raising=False)
    home = str(tmp_path / "h")
    assert main.main(["--home", home, "plan", "--config", "x.toml"]) == Exit.ERROR
    err = capsys.readouterr().err
    assert err == ("tenure: INTERNAL: tenure plan failed unexpectedly: RecursionError: "
                   "maximum recursion depth exceeded (a defect of tenure: please report "
                   "it; TENURE_DEBUG=1 shows the traceback). Whatever the command asked of "
                   "a daemon before it may have been done: `tenure status` says what "
                   "runs\n"), err
    assert main.main(["--home", home, "--json", "plan", "--config", "x.toml"]) == 1
    out = capsys.readouterr().out
    assert '"code": "INTERNAL"' in out and '"exception": "RecursionError"' in out, out
    monkeypatch.setenv("TENURE_DEBUG", "1")
    with pytest.raises(RecursionError):
        main.main(["--home", home, "plan", "--config", "x.toml"])


def test_a_config_is_named_by_its_absolute_path_in_every_error(monkeypatch, capsys,
                                                              tmp_path) -> None:
    """Was `cfg/latin1.toml:2: …` for a read or encoding error but the absolute path for
    a syntax error of the same relative argument."""
    from backend.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "latin1.toml").write_bytes(b"# caf\xe9\n")
    home = str(tmp_path / "h")
    for name in ("latin1", "missing"):   # read here; a syntax error is the backend's,
        # whose `source` was always the absolute path
        assert main.main(["--home", home, "plan", "--config", f"cfg/{name}.toml"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"tenure: CONFIG_INVALID: {tmp_path}/cfg/{name}.toml"), err


@pytest.mark.parametrize("home", ["--ho", "--hom", "--home"])
def test_an_abbreviated_home_before_the_command_is_the_home(home: str) -> None:
    """`tenure --hom H status` built the parser of a command named H: status had no
    --watch (INTERNAL) and stop no target (a usage error)."""
    from backend.cli.cmdline import parser
    argv = [home, "/srv/t", "status"]
    args = parser(argv).parse_args(argv)
    assert (args.cmd, str(args.home), args.watch) == ("status", "/srv/t", False)
    argv = [home, "/srv/t", "--json", "stop", "s/a"]
    args = parser(argv).parse_args(argv)
    assert (args.cmd, str(args.home), args.json, args.target) == ("stop", "/srv/t", True,
                                                                  "s/a")


def test_the_command_table_at_the_top_lists_every_command() -> None:
    """Regression: `metrics` had a reference section but no row in the table an
    operator scans first."""
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("| command | talks to |"):text.index("### Coming from")]
    named = set(re.findall(r"`([a-z-]+)`", table))
    missing = sorted(set(_leaves()) - named)
    assert not missing, f"the command table of docs/cli.md lacks: {missing}"
