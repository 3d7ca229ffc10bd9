"""The one-way architecture: domain/ is pure (stdlib + eventsourcing.domain); service → domain.
Test modules share code through tests/support/, never by importing one another."""

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


# ------------------------------------------------------------------------------ the tests
TESTS = ROOT / "tests"


def imported_names(source: str, package: str) -> set[str]:
    """Every module an import in ``source`` may name (in functions too), relative ones resolved
    in ``package``: ``from a import b`` names ``a`` and ``a.b``, as ``b`` may be a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and parts[0] == "tests" and parts[1].startswith("test_")


@pytest.mark.parametrize(
    ("source", "package"),
    [
        ("from tests.test_live import free_port", "tests"),
        ("import tests.test_live", "tests"),
        ("from tests import test_live", "tests"),
        ("from .test_live import free_port", "tests"),
        ("from . import test_live", "tests"),
        ("from ..test_live import free_port", "tests.support"),
        ("def later() -> None:\n    from tests.test_live import free_port\n", "tests"),
    ],
)
def test_the_check_sees_a_test_module_however_it_is_imported(source: str, package: str) -> None:
    assert any(is_test_module(name) for name in imported_names(source, package))


@pytest.mark.parametrize(
    ("source", "package"),
    [
        ("from tests.support.servers import free_port", "tests"),
        ("import tests.support.servers", "tests"),
        ("from tests import support", "tests"),
        ("from .servers import free_port", "tests.support"),
        ("from service.http.app import create_app", "tests"),
    ],
)
def test_the_check_lets_the_support_package_and_the_service_be_imported(
    source: str, package: str
) -> None:
    assert not any(is_test_module(name) for name in imported_names(source, package))


def test_no_module_under_tests_imports_a_test_module() -> None:
    """Shared test code lives in tests/support/ (servers, HTTP, games, polling, stored rows): no
    module under tests/, support and conftest.py included, imports a test module for its helpers
    (which would tie the two together)."""
    found = set()
    for path in TESTS.rglob("*.py"):
        package = ".".join(path.relative_to(ROOT).parent.parts)
        for name in imported_names(path.read_text(encoding="utf-8"), package):
            if is_test_module(name):
                module = ".".join(name.split(".")[:2])
                found.add(f"{path.relative_to(ROOT)} imports {module}")
    assert not found, "\n".join(sorted(found))
