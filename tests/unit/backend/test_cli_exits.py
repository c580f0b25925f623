"""Every exit status of the CLI comes from one table, and docs/cli.md lists that table."""

from __future__ import annotations

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
