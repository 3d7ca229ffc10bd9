"""The service uses its libraries through their public doors (issue 42): no module of the service
or of the project's entry points imports a private name of a library or reaches a private
attribute through one, but where the library documents the underscored name as its door.

This list is the whole ledger of such names, each with where the library documents it; a new
private access fails ``test_no_private_part_of_a_library_is_reached`` until it is either given
up or listed here with its reason (and, where no door exists, what to ask upstream). With none
undocumented, pyproject.toml bounds each library below its next major release only, and
``make newest`` (tests/newest.py) runs the store's and the server's tests on the newest releases.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.doors import library_names

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = (
    "eventsourcing",
    "psycopg",
    "psycopg_pool",
    "sqlite3",
    "gunicorn",
    "h11",
    "flask",
    "werkzeug",
    "marshmallow",
    "limits",
    "redis",
    "prometheus_client",
    "nacl",
    "orjson",
    "openskill",
    "argon2",
    "jinja2",
    "reportlab",
    "httpx",
)
# Underscored names the libraries document as their public API.
DOCUMENTED = {
    # Werkzeug documents LocalProxy._get_current_object, and Flask's "Notes On Proxies" says to
    # call it to reach the object behind ``request`` (service/http/core.py: this_request).
    "_get_current_object",
}
SOURCES = sorted(
    path
    for folder in ("service", "bench")
    for path in (ROOT / folder).rglob("*.py")
    if "pages/static" not in str(path)
)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_part_of_a_library_is_reached(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = library_names(tree, LIBRARIES)
    where = path.relative_to(ROOT)
    for origin in names.values():
        assert not any(private(part) for part in origin.split(".")), f"{where}: imports {origin}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not private(node.attr):
            continue
        root = node.value
        while isinstance(root, ast.Attribute | ast.Call):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and root.id in names:
            raise AssertionError(f"{where}:{node.lineno}: {ast.unparse(node)}")


def test_the_scan_finds_a_private_access() -> None:
    """The scan itself, on a module that reaches into a library: it must not pass silently."""
    source = "from eventsourcing.application import Application\nApplication._take_snapshots\n"
    tree = ast.parse(source)
    names = library_names(tree, LIBRARIES)
    found = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and private(node.attr)
        and isinstance(node.value, ast.Name)
        and node.value.id in names
    ]
    assert found == ["_take_snapshots"]
    assert private("_record") and not private("_get_current_object") and not private("__init__")


def test_no_library_is_bounded_below_its_next_major_release_without_a_reason() -> None:
    """With no private part reached, a library's release within its major version is taken as
    it comes (``make newest`` tries the newest): no bound below the next major."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == "<":
                parts = spec.version.split(".")
                # "<N" or "<0.N" (a 0.x library's major is its minor) is a major bound.
                major = len(parts) == 1 or (parts[0] == "0" and len(parts) == 2)
                assert major, f"{requirement.name} is bounded below a minor release: {line}"


# marshmallow's "Custom Fields" documentation: implement _serialize and _deserialize.
MARSHMALLOW_DOORS = frozenset({"_serialize", "_deserialize"})


def service_classes() -> list[type]:
    """Every class the service's modules define."""
    import importlib
    import inspect

    found = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if dotted in ("service.wsgi", "service.gunicorn_settings"):
            continue  # built for a server process: importing them reads the server's settings
        module = importlib.import_module(dotted)
        found += [
            c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == dotted
        ]
    return found


def written_in_body(cls: type) -> set[str]:
    """The names a class's own body defines (methods, attributes): not those a library's
    metaclass or Python set on it."""
    import inspect
    import textwrap

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # made at run time (type(...)): no body written
        return set()
    tree = ast.parse(textwrap.dedent(source))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_no_class_of_the_service_overrides_a_private_part_of_a_library() -> None:
    """A subclass of a library's class (a recorder, a worker, a transcoder, a field) overrides
    and sets only what the library offers: no underscored attribute of a library base. (A
    custom marshmallow field's ``_deserialize`` is that library's documented door.)"""
    wrong = []
    for cls in service_classes():
        bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in LIBRARIES]
        if not bases:
            continue
        for name in written_in_body(cls):
            if name in MARSHMALLOW_DOORS and any(
                b.__module__.startswith("marshmallow") for b in bases
            ):
                continue
            if private(name) and any(hasattr(base, name) for base in bases):
                wrong.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert not wrong, wrong
