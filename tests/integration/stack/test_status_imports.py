"""`tenure status` loads only what it uses. Interpreter start-up and imports are most of
its time (bench/cli.py), so a module on its path that pulls in pathlib, argparse or typing
costs every status call milliseconds. The command runs for real against a running home,
in a child so that this process's imports do not count."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HEAVY = ("pathlib", "argparse", "typing", "re", "json", "shlex", "threading",
         "urllib.parse", "backend.cli.cmdline", "backend.cli.commands")

PROBE = """
import sys
from backend.cli.main import main
code = main(["--home", sys.argv[1], "status"])
print(repr((int(code), sorted(sys.modules))), file=sys.stderr)
"""


def status_modules(home: Path) -> tuple[int, set[str], str]:
    r = subprocess.run([sys.executable, "-c", PROBE, str(home)], capture_output=True,
                       text=True, timeout=60)
    code, modules = ast.literal_eval(r.stderr.strip().splitlines()[-1])
    return code, set(modules), r.stdout


def test_status_imports_nothing_it_does_not_use(cluster):
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"100000\"]\n")
    cluster.wait_ready(1)
    code, modules, out = status_modules(cluster.home)
    assert code == 0 and "s/a/0" in out, out
    loaded = [m for m in HEAVY if m in modules]
    assert not loaded, f"tenure status imported {loaded}"


def test_other_commands_still_get_the_full_parser(short_home):
    r = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", str(short_home),
                        "status", "--bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--bogus" in r.stderr, r   # argparse's usage error
