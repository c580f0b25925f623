"""What the `tenure` command does before its command line is imported: closed standard
streams, and a Ctrl-C that comes while it starts. The entry point as the installed
script runs it (backend.cli.entry:run), in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENTRY = "import sys; sys.argv[0] = 'tenure'; from backend.cli.entry import run; run()"

# a Ctrl-C that lands while the command line is imported, or while it parses argv
CTRL_C_IN_IMPORT = """
import sys
class Finder:
    def find_spec(self, name, path, target=None):
        if name == "backend.cli.main":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Finder())
""" + ENTRY
CTRL_C_IN_PARSE = """
import sys
import backend.cli.cmdline as c
def parser(argv):
    raise KeyboardInterrupt
c.parser = parser
""" + ENTRY


def _run(code: str, home: Path, *args: str, close: str = ""
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", f'exec "$@" {close}', "sh", sys.executable, "-c", code,
                           "--home", str(home), *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_a_closed_stdout_is_no_traceback(tmp_path: Path) -> None:
    """Was `AttributeError: 'NoneType' object has no attribute 'isatty'` (or 'write',
    'flush'), exit 1: Python leaves sys.stdout None when descriptor 1 is closed."""
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    for args in (["status"], ["--json", "status"], ["logs", "-n", "1"], ["metrics"]):
        done = _run(ENTRY, home, *args, close=">&-")
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode in (1, 3), (args, done)   # nothing runs here: said on
        # stderr, as with stdout open


def test_closed_stdin_and_stderr_are_no_traceback_either(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    done = _run(ENTRY, home, "status", close="<&- 2>&-")
    assert done.returncode == 3 and done.stderr == "", done
    assert "tenure is not running" in done.stdout


def test_ctrl_c_while_the_command_starts_ends_it_silently(tmp_path: Path) -> None:
    """Was a KeyboardInterrupt traceback from the imports or argparse, killed by
    SIGINT; cli.md: a command that asked nothing ends silently, exit 130."""
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    for code in (CTRL_C_IN_IMPORT, CTRL_C_IN_PARSE):
        done = _run(code, home, "logs", "-n", "10")
        assert (done.returncode, done.stdout, done.stderr) == (130, "", ""), done


def test_json_output_to_a_full_disk_is_said_on_stderr(tmp_path: Path) -> None:
    """Was two chained tracebacks: the --json error object was written to the stdout
    that had just failed (/dev/full)."""
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    (tmp_path / "Procfile").write_text("web: sleep 1\n")
    for args in (["--json", "status"], ["--json", "import", str(tmp_path / "Procfile")],
                 ["import", str(tmp_path / "Procfile")]):
        done = _run(ENTRY, home, *args, close=">/dev/full")
        assert done.returncode == 1, (args, done)
        assert done.stderr.startswith("tenure: STORAGE_FAILED: ") and \
            "No space left on device" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert "carried out" not in done.stderr   # they ask tenure for nothing
