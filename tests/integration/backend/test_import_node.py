"""tenure import with the real node: a PM2 .config.js is evaluated and matches its golden
files; a broken file, a file that never finishes and a missing node are CONFIG_INVALID
errors that say so."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from backend.importers import Context, import_files
from backend.importers.pm2_load import load_ecosystem, run_node
from backend.importers.testing import GOLDEN_CASES, GoldenCase, golden_outputs, node_available
from protocol.errors import ConfigInvalid
from protocol.procfs import read_stat

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "import"

needs_node = pytest.mark.skipif(not node_available(), reason="needs node on PATH")


@needs_node
@pytest.mark.parametrize("case", [c for c in GOLDEN_CASES if c.needs_node],
                         ids=lambda c: c.name)
def test_config_js_matches_golden_files(case: GoldenCase) -> None:
    for rel, data in golden_outputs(GOLDEN, case).items():
        assert (GOLDEN / rel).read_bytes() == data, rel


@needs_node
def test_es_module_default_export_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ecosystem.config.mjs"
    path.write_text('export default { apps: [{ name: "esm", script: "a.js" }] };\n')
    assert load_ecosystem(str(path), Context()) == {"apps": [{"name": "esm",
                                                              "script": "a.js"}]}


@needs_node
def test_config_js_that_prints_while_it_loads_is_read(tmp_path: Path) -> None:
    """pm2 accepts a file that logs; what it prints is not taken for the export."""
    path = tmp_path / "log.config.js"
    path.write_text('console.log("noise");\nprocess.stdout.write("{}");\n'
                    'console.error("to stderr");\n'
                    'module.exports = { apps: [{ name: "n", script: "/bin/true" }] };\n')
    assert load_ecosystem(str(path), Context()) == {"apps": [{"name": "n",
                                                              "script": "/bin/true"}]}


@needs_node
def test_json_that_pm2_accepts_as_javascript_is_read(tmp_path: Path) -> None:
    path = tmp_path / "process.json"
    path.write_text("{\n  // PM2 evaluates this file\n  apps: [{ script: 'a.js' }],\n}\n")
    assert load_ecosystem(str(path), Context()) == {"apps": [{"script": "a.js"}]}


@needs_node
@pytest.mark.parametrize(("source", "problem"), [
    ("module.exports = {", "node could not read it: "),
    ('throw new Error("no config here")', "node could not read it: no config here"),
    # the export cannot be written as JSON: the reason, not a stack trace's first line
    ("module.exports = { apps: [], n: 1n };",
     "node could not read it: Do not know how to serialize a BigInt"),
])
def test_broken_config_js_is_config_invalid(tmp_path: Path, source: str,
                                            problem: str) -> None:
    path = tmp_path / "ecosystem.config.js"
    path.write_text(source)
    with pytest.raises(ConfigInvalid) as e:
        import_files([str(path)], "s")
    assert e.value.data["file"] == str(path)
    assert e.value.data["problem"].startswith(problem)


@needs_node
def test_node_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "ecosystem.config.js"
    path.write_text("for (;;) {}\n")
    with pytest.raises(ConfigInvalid, match=r"did not finish reading it within 0\.5 s"):
        import_files([str(path)], "s", ctx=Context(node_timeout=0.5))


@needs_node
@pytest.mark.parametrize("opens", [
    "setInterval(() => {}, 1000);",
    'require("net").createServer().listen(0, "127.0.0.1");',
    "process.exitCode = 3;",   # pm2 loads it all the same
])
def test_config_js_that_keeps_node_running_is_read_at_once(tmp_path: Path,
                                                           opens: str) -> None:
    """pm2 loads a config that leaves a timer or a socket open (a db client, say):
    the import takes the export as soon as it is there, not node's own end."""
    path = tmp_path / "t.config.js"
    path.write_text(opens + '\nmodule.exports = { apps: [{ name: "x", script: "x.js" }] };\n')
    started = time.monotonic()
    assert load_ecosystem(str(path), Context(node_timeout=5.0)) == {
        "apps": [{"name": "x", "script": "x.js"}]}
    assert time.monotonic() - started < 4.0


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not yet reaped by its new parent counts)."""
    st = read_stat(pid)
    return st is None or st.zombie


def _child_pid(path: Path) -> int:
    return int(path.read_text())


_SPAWN = ('const cp = require("child_process"); const fs = require("fs");\n'
          'const c = cp.spawn("sleep", ["30"], {{ stdio: ["ignore", "ignore", "inherit"],'
          " detached: {detached} }}); c.unref();\n"
          'fs.writeFileSync("child.pid", String(c.pid));\n'
          'module.exports = {{ apps: [{{ name: "x", script: "x.js" }}] }};\n')


@needs_node
def test_a_detached_child_holding_stderr_does_not_hold_the_import(tmp_path: Path) -> None:
    """node exits at once; a child it started in a session of its own still holds
    node's stderr. The import does not wait for that: it is done when node is. The child
    is outside what the import started (its own session), so it is left running."""
    path = tmp_path / "t.config.js"
    path.write_text(_SPAWN.format(detached="true"))
    started = time.monotonic()
    try:
        assert load_ecosystem(str(path), Context(node_timeout=5.0))["apps"][0]["name"] == "x"
        assert time.monotonic() - started < 4.0
    finally:
        pid = _child_pid(tmp_path / "child.pid")
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


@needs_node
def test_what_node_leaves_in_its_process_group_is_ended(tmp_path: Path) -> None:
    path = tmp_path / "t.config.js"
    path.write_text(_SPAWN.format(detached="false"))
    try:
        assert load_ecosystem(str(path), Context(node_timeout=5.0))["apps"][0]["name"] == "x"
        deadline = time.monotonic() + 3.0
        while not _gone(_child_pid(tmp_path / "child.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(_child_pid(tmp_path / "child.pid"))
    finally:
        pid = _child_pid(tmp_path / "child.pid")
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_without_node_a_config_js_is_a_clear_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ecosystem.config.js"
    path.write_text("module.exports = { apps: [] }\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigInvalid, match="needs `node` on PATH"):
        run_node(str(path), "", 5.0)
    # a .json file that is strict JSON needs no node
    strict = tmp_path / "process.json"
    strict.write_text(json.dumps({"apps": [{"script": "a.js"}]}))
    assert import_files([str(strict)], "s").config.stacks["s"].apps["a"].command[0] == "node"
