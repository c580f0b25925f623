"""Golden cases for ``tenure import``: sample files under ``tests/golden/import/<case>/``
and what importing them must give (``expected.toml``, ``expected.report``).

The import runs with a fixed environment and host name (what ``%(ENV_X)s`` and
``%(host_node_name)s`` expand to), and the case directory's absolute path is written as
``/golden`` so the files do not depend on where the repository is checked out.
``python -m backend.importers.testing --regen-golden tests/golden/import`` rewrites the
expected files; tests only compare.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import Context, import_files

__all__ = ["GOLDEN_CASES", "GOLDEN_CONTEXT", "GOLDEN_ROOT", "GoldenCase", "golden_outputs",
           "node_available"]

GOLDEN_ROOT = "/golden"
GOLDEN_CONTEXT = Context(environ={"HOME": "/home/deploy", "SHOP_LOGLEVEL": "info"},
                         hostname="shop1")


@dataclass(frozen=True)
class GoldenCase:
    name: str                      # its directory under tests/golden/import
    files: tuple[str, ...]         # the sources, relative to that directory
    stack: str | None = None       # --stack; None: the default (the directory's name)
    needs_node: bool = False

    def run(self, root: Path) -> tuple[str, str]:
        """(the tenure.toml text, the report) with paths under ``/golden``."""
        base = (root / self.name).absolute()
        result = import_files([str(base / f) for f in self.files], self.stack,
                              ctx=GOLDEN_CONTEXT)
        report = "".join(line + "\n" for line in result.report_lines())
        return (result.text.replace(str(base), GOLDEN_ROOT),
                report.replace(str(base), GOLDEN_ROOT))


GOLDEN_CASES = (
    GoldenCase("supervisord", ("supervisord.conf",), "misc"),
    GoldenCase("pm2-js", ("ecosystem.config.js",), "storefront", needs_node=True),
    GoldenCase("pm2-json", ("process.json",), "storefront"),
    GoldenCase("procfile", ("Procfile",)),
)


def node_available() -> bool:
    return shutil.which("node") is not None


def golden_outputs(root: Path, case: GoldenCase) -> dict[str, bytes]:
    """Relative path under ``root`` → the expected content, for one case."""
    text, report = case.run(root)
    return {f"{case.name}/expected.toml": text.encode(),
            f"{case.name}/expected.report": report.encode()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend.importers.testing",
                                 description="rewrite the golden files of tenure import")
    ap.add_argument("--regen-golden", type=Path, metavar="DIR", required=True,
                    help="the golden directory (tests/golden/import)")
    args = ap.parse_args(argv)
    for case in GOLDEN_CASES:
        if case.needs_node and not node_available():
            print(f"skipped {case.name}: needs node on PATH", file=sys.stderr)
            continue
        for rel, data in golden_outputs(args.regen_golden, case).items():
            (args.regen_golden / rel).write_bytes(data)
            print(args.regen_golden / rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
