"""tenure import with the real node: a PM2 .config.js is evaluated and matches its golden
files; a broken file, a file that never finishes and a missing node are CONFIG_INVALID
errors that say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.importers import Context, import_files
from backend.importers.pm2_load import load_ecosystem, run_node
from backend.importers.testing import GOLDEN_CASES, GoldenCase, golden_outputs, node_available
from protocol.errors import ConfigInvalid

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
