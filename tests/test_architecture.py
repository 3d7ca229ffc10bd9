"""The one-way architecture: domain/ is pure (stdlib + eventsourcing.domain); service → domain."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOMAIN_FILES = sorted((ROOT / "domain").rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", DOMAIN_FILES, ids=lambda p: p.name)
def test_domain_imports_only_the_standard_library_and_eventsourcing_domain(path: Path) -> None:
    allowed_outside_stdlib = {"eventsourcing.domain"}
    for module in imported_modules(path):
        top = module.split(".")[0]
        assert (
            top in sys.stdlib_module_names or top == "domain" or module in allowed_outside_stdlib
        ), f"{path.name} imports {module}"


def test_domain_never_imports_the_service() -> None:
    for path in DOMAIN_FILES:
        assert not any(m.split(".")[0] == "service" for m in imported_modules(path)), path.name
