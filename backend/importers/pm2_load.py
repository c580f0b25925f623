"""Reading a PM2 ecosystem file into plain data.

``.json`` files are parsed as JSON. PM2 itself evaluates them as a JavaScript expression,
so one that is not strict JSON (comments, unquoted keys) is evaluated the same way with
``node`` when it is on PATH. ``.js``/``.cjs``/``.mjs`` files are programs: ``node`` loads
the file (in its directory) and prints the exported object as JSON. Either run is bounded
by a timeout; no node, a failure or a timeout is a CONFIG_INVALID error that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from protocol.errors import ConfigInvalid

from .model import Context, source_error

__all__ = ["load_ecosystem", "run_node"]

_JS_SUFFIXES = (".js", ".cjs", ".mjs")
# prints the module's export (module.exports, or the default export of an ES module)
_EXPORT = (
    'const { pathToFileURL } = require("url");'
    "import(pathToFileURL(process.argv[1]).href).then((m) => {"
    " const c = m.default !== undefined ? m.default : m;"
    " process.stdout.write(JSON.stringify(c === undefined ? null : c)); },"
    " (e) => { process.stderr.write(String((e && e.message) || e)); process.exit(1); });")
# evaluates a .json file the way PM2 does: as one JavaScript expression
_EXPRESSION = (
    'const fs = require("fs"); const vm = require("vm");'
    'const c = vm.runInNewContext("(" + fs.readFileSync(process.argv[1], "utf8") + ")",'
    " {}, { timeout: 1000 });"
    "process.stdout.write(JSON.stringify(c === undefined ? null : c));")


def load_ecosystem(path: str, ctx: Context) -> Any:
    """The ecosystem file's data. Raises ConfigInvalid when it cannot be read or
    evaluated."""
    run = ctx.run_node or run_node
    if path.endswith(_JS_SUFFIXES):
        return _parse_output(path, run(path, _EXPORT, ctx.node_timeout))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise source_error(path, None, "", f"cannot read the file: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        error = source_error(path, e.lineno, "", f"not valid JSON: {e.msg}")
    if ctx.run_node is None and shutil.which("node") is None:
        raise error
    try:
        return _parse_output(path, run(path, _EXPRESSION, ctx.node_timeout))
    except ConfigInvalid:
        raise error from None  # not JavaScript either: the JSON error says where


def _parse_output(path: str, output: str) -> Any:
    try:
        return json.loads(output)
    except json.JSONDecodeError:
        raise source_error(path, None, "", "node printed no JSON for it") from None


def run_node(path: str, script: str, timeout: float) -> str:
    """Run ``node -e script path`` in the file's directory and return its output.
    Raises ConfigInvalid when node is missing, fails or runs longer than ``timeout``."""
    node = shutil.which("node")
    if node is None:
        raise source_error(path, None, "", "reading it needs `node` on PATH (a PM2 "
                           "ecosystem file is JavaScript); install Node.js, or convert "
                           "it to a .json file")
    full = os.path.abspath(path)
    try:
        proc = subprocess.run([node, "-e", script, full], cwd=os.path.dirname(full),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise source_error(path, None, "", f"node did not finish reading it within "
                           f"{timeout:g} s") from None
    except OSError as e:
        raise source_error(path, None, "", f"cannot run node: {e}") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise source_error(path, None, "", f"node could not read it: {why}")
    return proc.stdout
