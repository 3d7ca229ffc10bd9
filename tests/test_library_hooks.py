"""The private parts of libraries the service relies on (service/hooks.py) are still as recorded.

Each hook is one test, named by its path: it fails naming the hook, the version installed, where
the service uses it and what to re-check, with the values to record once it has been re-read.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from service.hooks import HOOKS, Check, Hook

ROOT = Path(__file__).resolve().parent.parent


def _fresh(module_name: str) -> ModuleType:
    """A new copy of a library module, as shipped: for a callable found there whose module is
    another package's (one put in the library's place, or re-exported from elsewhere)."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.loader is not None, module_name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolve(dotted: str) -> Any:
    """The object at ``dotted``: its longest importable module prefix, then attributes. A
    function the service put in a library's place is looked up in a fresh copy of the module."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        found: Any = module
        for name in parts[split:]:
            found = getattr(found, name)
        owner = getattr(found, "__module__", None)
        if isinstance(owner, str) and callable(found) and owner.split(".")[0] != parts[0]:
            # Put there by another package.
            found = _fresh(module_name)
            for name in parts[split:]:
                found = getattr(found, name)
        return found
    raise ModuleNotFoundError(dotted)


def signature_of(found: Any) -> str:
    """The signature as printed, without the addresses of default values' objects."""
    return re.sub(r" at 0x[0-9a-f]+", "", str(inspect.signature(found)))


def sha256_of(found: Any) -> str:
    return hashlib.sha256(inspect.getsource(found).encode()).hexdigest()


def problems(check: Check) -> list[str]:
    """What no longer holds of ``check``'s target, each with the value found now."""
    try:
        found = resolve(check.target)
    except (ImportError, AttributeError) as exc:
        return [f"{check.target} is gone ({type(exc).__name__}: {exc})"]
    wrong = []
    if check.signature is not None and signature_of(found) != check.signature:
        wrong.append(
            f"{check.target}: signature {signature_of(found)!r}, recorded {check.signature!r}"
        )
    if check.sha256 is not None and sha256_of(found) != check.sha256:
        wrong.append(
            f"{check.target}: its source changed (sha256 now {sha256_of(found)!r}, recorded "
            f"{check.sha256!r})"
        )
    if check.contains:
        source = inspect.getsource(found)
        wrong += [
            f"{check.target} no longer says {text!r}"
            for text in check.contains
            if text not in source
        ]
    return wrong


def installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def failure(hook: Hook, wrong: list[str]) -> str:
    lines = "\n  - ".join(wrong)
    return (
        f"library hook {hook.path} ({hook.distribution} {installed(hook.distribution)} "
        f"installed) is not what the service relies on:\n  - {lines}\n"
        f"used in: {', '.join(hook.used_in)}\n"
        f"re-check: {hook.recheck}\n"
        f"why it is there: {hook.why}\n"
        "Once the library's code is re-read and the use still holds (and tests/test_fast_paths.py "
        "passes), record the values found now in service/hooks.py."
    )


@pytest.mark.parametrize("hook", HOOKS, ids=[hook.path for hook in HOOKS])
def test_the_library_hook_is_still_as_recorded(hook: Hook) -> None:
    owner = hook.path.rsplit(".", 1)[0] if hook.instance else hook.path
    wrong: list[str] = []
    try:
        resolve(owner)
    except (ImportError, AttributeError) as exc:
        wrong.append(f"{owner} is gone ({type(exc).__name__}: {exc})")
    for check in hook.checks:
        wrong += problems(check)
    assert not wrong, failure(hook, wrong)


def test_hook_paths_are_unique_and_each_hook_is_checked() -> None:
    paths = [hook.path for hook in HOOKS]
    assert len(paths) == len(set(paths)), sorted(p for p in paths if paths.count(p) > 1)
    for hook in HOOKS:
        assert hook.checks, f"{hook.path}: nothing checks it"
        assert hook.used_in and hook.why and hook.recheck, hook.path
        # An instance attribute is only seen in the source that sets it.
        assert not hook.instance or any(c.contains for c in hook.checks), hook.path


def _used_in() -> list[str]:
    return sorted({place for hook in HOOKS for place in hook.used_in})


@pytest.mark.parametrize("place", _used_in())
def test_every_place_a_hook_is_used_in_exists(place: str) -> None:
    module_name, _, qualname = place.partition(":")
    found: Any = importlib.import_module(module_name)
    for name in qualname.split("."):
        assert hasattr(found, name), f"{place}: {name} not found (service/hooks.py names it)"
        found = getattr(found, name)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = (Requirement(line) for line in project["dependencies"])
    return {_normalized(requirement.name): requirement for requirement in requirements}


@pytest.mark.parametrize("distribution", sorted({hook.distribution for hook in HOOKS}))
def test_every_library_with_a_hook_is_pinned_below_its_next_release(distribution: str) -> None:
    """A hook is checked against the version installed: pyproject.toml keeps the next minor
    (or major) release, which may move it, from being installed unseen."""
    requirement = _dependencies().get(_normalized(distribution))
    assert requirement is not None, f"{distribution} has hooks but is not in the dependencies"
    upper = [spec for spec in requirement.specifier if spec.operator in ("<", "<=", "==", "~=")]
    assert upper, f"{requirement}: no upper bound, though service/hooks.py relies on its internals"
    version = installed(distribution)
    assert requirement.specifier.contains(Version(version), prereleases=True), (
        f"{distribution} {version} installed, outside {requirement}"
    )


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize(
    "proof", sorted({proof for hook in HOOKS for proof in hook.proven_by}), ids=str
)
def test_every_fast_path_proof_named_exists(proof: str) -> None:
    path, _, name = proof.partition("::")
    assert (ROOT / path).is_file(), proof
    assert name in _test_functions(ROOT / path), f"{proof} is not a test (service/hooks.py)"


def test_the_list_of_hooks_imports_nothing() -> None:
    """service/hooks.py is data at the bottom of the service: it imports no library, and
    nothing of the service."""
    tree = ast.parse((ROOT / "service" / "hooks.py").read_text(encoding="utf-8"))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= {"__future__", "dataclasses"}, imported
