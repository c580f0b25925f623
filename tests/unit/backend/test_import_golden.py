"""tenure import on realistic sample files: the output matches the golden files, passes
the parser `tenure plan` uses, and is the same every time. Cases that run node (a PM2
.config.js) are compared in tests/integration/backend/test_import_node.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import backend.importers
from backend.config import parse_config
from backend.importers.testing import GOLDEN_CASES, GOLDEN_ROOT, GoldenCase, golden_outputs

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "import"
REGEN = "python -m backend.importers.testing --regen-golden tests/golden/import"


def _skip_node_cases(case: GoldenCase) -> None:
    if case.needs_node:
        pytest.skip("runs node: compared in tests/integration/backend/test_import_node.py")


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_import_matches_golden_files(case: GoldenCase) -> None:
    _skip_node_cases(case)
    for rel, data in golden_outputs(GOLDEN, case).items():
        assert (GOLDEN / rel).read_bytes() == data, f"{rel} differs; review, then `{REGEN}`"


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_golden_tenure_toml_passes_the_plan_parser(case: GoldenCase) -> None:
    text = (GOLDEN / case.name / "expected.toml").read_text()
    config = parse_config(text, "expected.toml")
    assert config.stacks, case.name
    assert all(a.cwd is None or a.cwd.startswith("/") for a in config.apps())


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_import_is_deterministic(case: GoldenCase) -> None:
    _skip_node_cases(case)
    assert case.run(GOLDEN) == case.run(GOLDEN)


def test_every_case_has_its_expected_files_and_no_others() -> None:
    expected = {f"{c.name}/expected.{ext}" for c in GOLDEN_CASES for ext in ("toml", "report")}
    on_disk = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("expected.*")}
    assert on_disk == expected
    assert {p.name for p in GOLDEN.iterdir()} == {c.name for c in GOLDEN_CASES}


def test_golden_paths_are_placeholders_not_this_checkout() -> None:
    for path in GOLDEN.rglob("expected.*"):
        text = path.read_text()
        assert str(GOLDEN) not in text, path
        assert GOLDEN_ROOT in text, path


def test_public_surface_is_pinned() -> None:
    assert sorted(backend.importers.__all__) == [
        "Context", "Finding", "FindingKind", "ImportResult", "SourceFormat",
        "default_stack", "detect_format", "import_files"]
    for name in backend.importers.__all__:
        assert hasattr(backend.importers, name), name
