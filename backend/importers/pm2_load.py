"""Reading a PM2 ecosystem file into plain data.

``.json`` files are parsed as JSON (a leading UTF-8 BOM is skipped, as node skips it).
PM2 itself evaluates them as a JavaScript expression, so one that is not strict JSON
(comments, unquoted keys) is evaluated the same way with ``node`` when it is on PATH.
``.js``/``.cjs``/``.mjs`` files are programs: ``node`` loads the file (in its directory)
and writes the exported object as JSON to a temporary file, not to stdout, because the
program may print to stdout itself (pm2 accepts that). node is ended once the export is
written, even if the file left a timer or a socket open, and anything it left in its
process group is killed. Either run is bounded by a timeout; no node, a failure or a
timeout is a CONFIG_INVALID error that says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

from protocol.errors import ConfigInvalid

from .model import Context, read_utf8, source_error

__all__ = ["load_ecosystem", "run_node"]

_JS_SUFFIXES = (".js", ".cjs", ".mjs")
# writes the module's export (module.exports, or the default export of an ES module) as
# JSON to the file descriptor in argv[2]; stdout stays the module's own. node is ended as
# soon as the export is written (status 0) or cannot be (status 1, the reason on stderr):
# a config may leave a timer or a socket open (pm2 loads it all the same), or set
# process.exitCode, and neither must decide how the import ends
_EXPORT = (
    'const fs = require("fs"); const { pathToFileURL } = require("url");'
    "const out = Number(process.argv[2]);"
    "import(pathToFileURL(process.argv[1]).href).then((m) => {"
    " const c = m.default !== undefined ? m.default : m;"
    " fs.writeFileSync(out, JSON.stringify(c === undefined ? null : c)); process.exit(0); })"
    ".catch((e) => { process.stderr.write(String((e && e.message) || e)); process.exit(1); });")
# evaluates a .json file the way PM2 does: as one JavaScript expression
_EXPRESSION = (
    'const fs = require("fs"); const vm = require("vm");'
    'const c = vm.runInNewContext("(" + fs.readFileSync(process.argv[1], "utf8") + ")",'
    " {}, { timeout: 1000 });"
    "fs.writeFileSync(Number(process.argv[2]), JSON.stringify(c === undefined ? null : c));")


def load_ecosystem(path: str, ctx: Context) -> Any:
    """The ecosystem file's data. Raises ConfigInvalid when it cannot be read or
    evaluated."""
    run = ctx.run_node or run_node
    if path.endswith(_JS_SUFFIXES):
        return _parse_output(path, run(path, _EXPORT, ctx.node_timeout))
    text = read_utf8(path)
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
        raise source_error(path, None, "", "node returned no JSON for it") from None


def run_node(path: str, script: str, timeout: float) -> str:
    """Run ``node -e script path FD`` in the file's directory and return what the script
    wrote to the file descriptor FD, a temporary file: the JSON travels apart from the
    output of the file being read, which may print to stdout (discarded) and stderr (kept
    in another temporary file, so a process node leaves behind holding it cannot keep the
    import waiting). node runs in a session of its own; once it has exited or run out of
    time, everything left in its process group is killed. A process that left that group
    (a child spawned ``detached``, in a session of its own) is not the import's to end.
    Raises ConfigInvalid when node is missing, fails or runs longer than ``timeout``."""
    node = shutil.which("node")
    if node is None:
        raise source_error(path, None, "", "reading it needs `node` on PATH (a PM2 "
                           "ecosystem file is JavaScript); install Node.js, or convert "
                           "it to a .json file")
    full = os.path.abspath(path)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen([node, "-e", script, full, str(out.fileno())],
                                    cwd=os.path.dirname(full), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    pass_fds=(out.fileno(),), start_new_session=True)
        except OSError as e:
            raise source_error(path, None, "", f"cannot run node: {e}") from None
        status = _wait_then_end_group(proc, timeout)
        if status is None:
            raise source_error(path, None, "", f"node did not finish reading it within "
                               f"{timeout:g} s")
        if status != 0:
            err.seek(0)
            text = err.read().decode("utf-8", errors="replace")
            why = (text.strip().splitlines() or ["no message"])[0]
            raise source_error(path, None, "", f"node could not read it: {why}")
        out.seek(0)
        return out.read().decode("utf-8", errors="replace")


def _wait_then_end_group(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """Wait up to ``timeout`` for ``proc`` (the leader of a session of its own) to exit,
    then SIGKILL what is left of its process group and reap it: its exit status, or None
    when it was still running. The group is killed while ``proc`` is unreaped (waited
    for with WNOWAIT), so its id cannot have been reused by an unrelated process."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere: nothing of ours to kill safely
            return proc.wait()
        left = deadline - time.monotonic()
        if exited is not None or left <= 0:
            break
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    status = proc.wait()
    return None if exited is None else status
