"""Every exit status of the CLI comes from one table, and docs/cli.md lists that table,
every command and every long option."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

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


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
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
    from backend.cli.main import _parser
    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [f"tenure {' '.join(words)}" for words, _ in _commands(_parser())
               if f"tenure {' '.join(words)}" not in text]
    missing += [f"tenure {' '.join(words)} {o}" for words, opts in _commands(_parser())
                for o in sorted(opts) if o not in text]
    assert not missing, f"docs/cli.md does not name: {missing}"
